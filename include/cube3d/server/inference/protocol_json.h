// The Open Inference Protocol's descriptions as JSON, in the shapes its REST API answers (and
// with the field names of its gRPC messages, so that the gRPC door parses the same JSON into
// them: one rendering for both doors):
//
//   server metadata   {"name", "version", "extensions": [...]}
//   model metadata    {"name", "versions": ["1"], "platform", "inputs": [{"name", "datatype",
//                     "shape"}], "outputs": [...]}, shapes with the batch dimension (-1) first
//   model config      Triton's model configuration: name, platform, backend, version_policy,
//                     max_batch_size, input / output (name, data_type, dims, optional),
//                     dynamic_batching (the batch buckets, queue delay and size, two priority
//                     levels), instance_group, parameters, model_transaction_policy,
//                     response_cache
//   model statistics  {"model_stats": [{"name", "version", "last_inference",
//                     "inference_count", "execution_count", "inference_stats": {...},
//                     "batch_stats": [...]}]} (observability/inference_statistics.h)
//   repository index  [{"name", "version", "state": "READY" | "UNAVAILABLE", "reason"}]
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "cube3d/server/inference/model_description.h"
#include "cube3d/server/observability/inference_statistics.h"

namespace cube3d::inference {

nlohmann::json server_metadata_json(const std::string& version,
                                    const std::vector<std::string>& extensions);
nlohmann::json model_metadata_json(const ModelDescription& model);
nlohmann::json model_config_json(const ModelDescription& model);
nlohmann::json model_statistics_json(const ModelDescription& model,
                                     const InferenceStatistics::Snapshot& stats);
nlohmann::json repository_index_json(const ModelDescription& model, bool ready);

}  // namespace cube3d::inference
