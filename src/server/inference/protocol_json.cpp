#include "cube3d/server/inference/protocol_json.h"

#include <algorithm>
#include <string>

namespace cube3d::inference {
namespace {

using nlohmann::json;

json tensor_metadata(const TensorSpec& t, bool batched) {
  std::vector<int64_t> shape;
  if (batched) shape.push_back(-1);
  shape.insert(shape.end(), t.dims.begin(), t.dims.end());
  return {{"name", t.name}, {"datatype", datatype_name(t.datatype)}, {"shape", shape}};
}

json duration(const InferenceStatistics::Duration& d) { return {{"count", d.count}, {"ns", d.ns}}; }

}  // namespace

json server_metadata_json(const std::string& version, const std::vector<std::string>& extensions) {
  return {{"name", kServerName}, {"version", version}, {"extensions", extensions}};
}

json model_metadata_json(const ModelDescription& model) {
  const bool batched = model.max_batch_size > 0;
  json inputs = json::array();
  for (const TensorSpec& t : model.inputs) inputs.push_back(tensor_metadata(t, batched));
  json outputs = json::array();
  for (const TensorSpec& t : model.outputs) outputs.push_back(tensor_metadata(t, batched));
  return {{"name", model.name},
          {"versions", {model.version}},
          {"platform", model.platform},
          {"inputs", std::move(inputs)},
          {"outputs", std::move(outputs)}};
}

json model_config_json(const ModelDescription& model) {
  json input = json::array();
  for (const TensorSpec& t : model.inputs) {
    input.push_back({{"name", t.name},
                     {"data_type", config_type_name(t.datatype)},
                     {"dims", t.dims},
                     {"optional", t.optional}});
  }
  json output = json::array();
  for (const TensorSpec& t : model.outputs) {
    output.push_back(
        {{"name", t.name}, {"data_type", config_type_name(t.datatype)}, {"dims", t.dims}});
  }
  const InferenceOptions& o = model.options;
  std::vector<int64_t> preferred = o.batch_buckets;
  std::sort(preferred.begin(), preferred.end());
  const auto parameter = [](const std::string& value) { return json{{"string_value", value}}; };
  return {
      {"name", model.name},
      {"platform", model.platform},
      {"backend", model.platform},
      {"version_policy", {{"specific", {{"versions", {std::stoll(model.version)}}}}}},
      {"max_batch_size", model.max_batch_size},
      {"input", std::move(input)},
      {"output", std::move(output)},
      // The scheduler's own batching (batching: in the server config): its buckets, how long a
      // request waits for others, the queue's bound; priority 1 interactive, 2 batch.
      {"dynamic_batching",
       {{"preferred_batch_size", preferred},
        {"max_queue_delay_microseconds", o.max_queue_delay_ms * 1000},
        {"priority_levels", 2},
        {"default_priority_level", 1},
        {"default_queue_policy", {{"max_queue_size", o.max_queue_size}}}}},
      {"instance_group",
       {{{"name", model.name}, {"kind", o.gpu ? "KIND_GPU" : "KIND_CPU"}, {"count", 1}}}},
      {"parameters",
       {{"tokens_per_shape", parameter(std::to_string(model.tokens_per_shape))},
        {"default_format", parameter(std::string(to_string(model.default_format)))},
        {"weights_digest", parameter(model.identity.weights_digest)},
        {"server_version", parameter(model.identity.server_version)}}},
      // One request, one response: a stream's progress responses come only when a request asks
      // for them (its parameter progress), so clients that expect one answer get one.
      {"model_transaction_policy", {{"decoupled", false}}},
      {"response_cache", {{"enable", o.cache_enabled}}},
  };
}

json model_statistics_json(const ModelDescription& model, const InferenceStatistics::Snapshot& s) {
  json batches = json::array();
  for (const auto& [size, b] : s.batches) {
    batches.push_back({{"batch_size", size},
                       {"compute_input", duration(b.compute_input)},
                       {"compute_infer", duration(b.compute_infer)},
                       {"compute_output", duration(b.compute_output)}});
  }
  const json stats = {{"name", model.name},
                      {"version", model.version},
                      {"last_inference", s.last_inference_ms},
                      {"inference_count", s.inference_count},
                      {"execution_count", s.execution_count},
                      {"inference_stats",
                       {{"success", duration(s.success)},
                        {"fail", duration(s.fail)},
                        {"queue", duration(s.queue)},
                        {"compute_input", duration(s.compute_input)},
                        {"compute_infer", duration(s.compute_infer)},
                        {"compute_output", duration(s.compute_output)},
                        {"cache_hit", duration(s.cache_hit)},
                        {"cache_miss", duration(s.cache_miss)}}},
                      {"batch_stats", std::move(batches)}};
  return {{"model_stats", json::array({stats})}};
}

json repository_index_json(const ModelDescription& model, bool ready) {
  json entry = {
      {"name", model.name}, {"version", model.version}, {"state", ready ? "READY" : "UNAVAILABLE"}};
  if (!ready) entry["reason"] = "the server is draining";
  return json::array({std::move(entry)});
}

}  // namespace cube3d::inference
