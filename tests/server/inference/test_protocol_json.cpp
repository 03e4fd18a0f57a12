// The protocol's descriptions as JSON (inference/protocol_json.h): the shapes the REST API
// answers, and one rendering for both doors, so each parses into its gRPC message with no field
// left over (a misspelt name would fail here, not at a client).
#include "cube3d/server/inference/protocol_json.h"

#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <string>

#include "inference/grpc_service.pb.h"
#include "server/inference/infer_builders.h"

namespace cube3d::inference {
namespace {

using testing::demo_model;

template <typename Message>
Message parsed(const nlohmann::json& json) {
  Message message;
  const auto status = google::protobuf::util::JsonStringToMessage(json.dump(), &message);
  EXPECT_TRUE(status.ok()) << status.message() << "\n" << json.dump();
  return message;
}

TEST(ProtocolJsonTest, ModelMetadataHasTheBatchDimensionFirst) {
  const auto json = model_metadata_json(demo_model());
  EXPECT_EQ(json["name"], "demo");
  EXPECT_EQ(json["versions"], nlohmann::json::array({"1"}));
  EXPECT_EQ(json["inputs"][0]["name"], "PROMPT");
  EXPECT_EQ(json["inputs"][0]["datatype"], "BYTES");
  EXPECT_EQ(json["inputs"][0]["shape"], nlohmann::json::array({-1, 1}));
  EXPECT_EQ(json["outputs"][1]["shape"], nlohmann::json::array({-1, -1, 3}));
  const auto message = parsed<::inference::ModelMetadataResponse>(json);
  EXPECT_EQ(message.inputs_size(), 6);  // no BBOX on this model
  EXPECT_EQ(message.outputs(2).name(), "FACES");
  EXPECT_EQ(parsed<::inference::ModelMetadataResponse>(model_metadata_json(demo_model(true)))
                .inputs_size(),
            7);
}

TEST(ProtocolJsonTest, ModelConfigIsTritonsWithTheSchedulersBatching) {
  const auto json = model_config_json(demo_model());
  EXPECT_EQ(json["max_batch_size"], 8);
  EXPECT_EQ(json["input"][0]["data_type"], "TYPE_STRING");
  EXPECT_EQ(json["input"][0]["dims"], nlohmann::json::array({1}));
  EXPECT_EQ(json["input"][0]["optional"], false);
  EXPECT_EQ(json["input"][1]["optional"], true);
  EXPECT_EQ(json["model_transaction_policy"]["decoupled"], false);
  const auto config = parsed<::inference::ModelConfig>(json);
  EXPECT_EQ(config.name(), "demo");
  EXPECT_EQ(config.max_batch_size(), 8);
  EXPECT_EQ(config.dynamic_batching().preferred_batch_size_size(), 4);
  EXPECT_EQ(config.dynamic_batching().max_queue_delay_microseconds(), 5000u);
  EXPECT_EQ(config.instance_group(0).kind(), ::inference::ModelInstanceGroup::KIND_CPU);
  EXPECT_EQ(config.parameters().at("tokens_per_shape").string_value(), "64");
  EXPECT_EQ(config.version_policy().specific().versions(0), 1);
}

TEST(ProtocolJsonTest, StatisticsServerMetadataAndTheIndexParseToo) {
  InferenceStatistics stats;
  stats.computed({.total_ms = 10,
                  .queue_ms = 1,
                  .input_ms = 2,
                  .infer_ms = 5,
                  .output_ms = 2,
                  .batch_bucket = 2,
                  .executed = true,
                  .cache_miss = true});
  stats.cache_hit(0.5);
  stats.failed(3);
  const auto json = model_statistics_json(demo_model(), stats.snapshot());
  const auto message = parsed<::inference::ModelStatisticsResponse>(json);
  ASSERT_EQ(message.model_stats_size(), 1);
  const auto& s = message.model_stats(0);
  EXPECT_EQ(s.name(), "demo");
  EXPECT_EQ(s.version(), "1");
  EXPECT_EQ(s.inference_count(), 1u);
  EXPECT_EQ(s.execution_count(), 1u);
  EXPECT_EQ(s.inference_stats().success().count(), 2u);
  EXPECT_EQ(s.inference_stats().success().ns(), 10'500'000u);
  EXPECT_EQ(s.inference_stats().queue().count(), 2u);  // a hit waited for nothing
  EXPECT_EQ(s.inference_stats().compute_infer().ns(), 5'000'000u);
  EXPECT_EQ(s.inference_stats().cache_hit().count(), 1u);
  EXPECT_EQ(s.inference_stats().cache_miss().count(), 1u);
  EXPECT_EQ(s.inference_stats().fail().count(), 1u);
  ASSERT_EQ(s.batch_stats_size(), 1);
  EXPECT_EQ(s.batch_stats(0).batch_size(), 2u);

  const auto server = parsed<::inference::ServerMetadataResponse>(
      server_metadata_json("0.1.0", {"binary_tensor_data", "statistics"}));
  EXPECT_EQ(server.name(), "cube3d-server");
  EXPECT_EQ(server.extensions_size(), 2);
  const auto index = parsed<::inference::RepositoryIndexResponse>(
      nlohmann::json{{"models", repository_index_json(demo_model(), false)}});
  EXPECT_EQ(index.models(0).state(), "UNAVAILABLE");
}

}  // namespace
}  // namespace cube3d::inference
