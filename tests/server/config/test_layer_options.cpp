// The server config reaches every layer through one function per layer: each setting, changed
// from its default, arrives in that layer's options unchanged.
#include "cube3d/server/config/layer_options.h"

#include <gtest/gtest.h>

#include "cube3d/core/error.h"
#include "cube3d/server/work/work_request.h"
#include "expect_error.h"

namespace cube3d {
namespace test_layer_options {

ServerConfig changed_config() {
  ServerConfig c;
  c.model.gpt_weights = "/m/gpt.safetensors";
  c.model.shape_weights = "/m/shape.safetensors";
  c.model.clip_model = "/m/clip";
  c.model.clip_vocab = "/m/vocab.txt.gz";
  c.device = "cuda:1";
  c.dtype = "bfloat16";
  c.cuda_graphs = "emulate";
  c.decode_kernels = "triton";
  c.single_stream_decode = "reference";
  c.batching.batch_buckets = {1, 3, 12};
  c.batching.max_queue_delay_ms = 17;
  c.batching.max_queue_size = 9;
  c.limits.max_prompt_bytes = 333;
  c.limits.max_resolution_base = 7;
  c.limits.min_resolution_base = 5;
  c.limits.max_message_bytes = 5 << 20;
  c.limits.max_target_face_count = 4444;
  c.limits.default_deadline_ms = 1234;
  c.defaults.guidance_scale = 1.5;
  c.defaults.top_p = 0.7;
  c.defaults.resolution_base = 6;
  c.defaults.format = MeshFormat::kPly;
  c.mesh.occupancy.hierarchical = false;
  c.mesh.occupancy.coarsest_resolution_base = 4;
  c.mesh.occupancy.dilation = 2;
  c.mesh.pipeline.postprocess = false;
  c.mesh.pipeline.cleanup.remove_floaters = false;
  c.mesh.pipeline.cleanup.floater_diagonal_ratio = 0.3;
  c.mesh.pipeline.simplify = false;
  c.mesh.mesh_threads = 5;
  c.logging.prompts = true;
  c.progress_interval_tokens = 8;
  return c;
}

TEST(LayerOptions, EngineGetsTheModelFilesDeviceAndEveryBucketToCapture) {
  const EngineOptions e = engine_options(changed_config());
  EXPECT_EQ(e.gpt_weights, "/m/gpt.safetensors");
  EXPECT_EQ(e.shape_weights, "/m/shape.safetensors");
  EXPECT_EQ(e.clip_model, "/m/clip");
  EXPECT_EQ(e.clip_vocab, "/m/vocab.txt.gz");
  EXPECT_EQ(e.device, "cuda:1");
  EXPECT_EQ(e.dtype, "bfloat16");
  EXPECT_EQ(e.cuda_graphs, GraphMode::kEmulate);
  EXPECT_EQ(e.decode_kernels, DecodeKernels::kTriton);
  EXPECT_EQ(e.max_batch, 12);
  EXPECT_EQ(e.capture.buckets, (std::vector<int64_t>{1, 3, 12}));
  EXPECT_TRUE(e.capture.guided);
  EXPECT_TRUE(e.capture.unguided);
  EXPECT_EQ(e.capture.modes, (std::vector<SingleStreamDecode>{SingleStreamDecode::kReference}));
  EXPECT_FALSE(e.capture.record_logits);
}

TEST(LayerOptions, ExecutorGetsDecodingOccupancyAndMeshSettings) {
  const ExecutorOptions x = executor_options(changed_config());
  EXPECT_EQ(x.single_stream_decode, SingleStreamDecode::kReference);
  EXPECT_EQ(x.progress_interval_tokens, 8);
  EXPECT_EQ(x.mesh_threads, 5);
  EXPECT_FALSE(x.shape.occupancy.sampling.hierarchical);
  EXPECT_EQ(x.shape.occupancy.sampling.coarsest_resolution_base, 4);
  EXPECT_EQ(x.shape.occupancy.sampling.dilation, 2);
  EXPECT_FALSE(x.shape.mesh.postprocess);
  EXPECT_FALSE(x.shape.mesh.cleanup.remove_floaters);
  EXPECT_DOUBLE_EQ(x.shape.mesh.cleanup.floater_diagonal_ratio, 0.3);
  EXPECT_FALSE(x.shape.mesh.simplify);
  EXPECT_FALSE(x.on_generated);  // the caller's to set
}

TEST(LayerOptions, SchedulerAndServiceUseTheSectionsWhole) {
  const ServerConfig c = changed_config();
  EXPECT_EQ(scheduler_config(c), c.batching);
  ModelConfig model;
  model.gpt.use_bbox = true;
  model.shape.num_encoder_latents = 1024;
  const ServiceOptions s = service_options(c, model);
  EXPECT_EQ(s.policy.limits, c.limits);
  EXPECT_EQ(s.policy.defaults, c.defaults);
  EXPECT_TRUE(s.policy.model_has_bbox);
  EXPECT_TRUE(s.log_prompts);
  EXPECT_EQ(s.tokens_per_shape, 1024);
}

TEST(LayerOptions, DefaultsAgreeAcrossLayers) {
  // One set of defaults: the server config's are the layers' own.
  const ServerConfig c;
  EXPECT_EQ(c.batching, SchedulerConfig{});
  EXPECT_EQ(c.limits, LimitsConfig{});
  const ExecutorOptions x = executor_options(c);
  EXPECT_EQ(x.shape.occupancy.sampling.hierarchical, OccupancySamplingOptions{}.hierarchical);
  EXPECT_EQ(x.shape.occupancy.sampling.coarsest_resolution_base,
            OccupancySamplingOptions{}.coarsest_resolution_base);
  EXPECT_EQ(x.shape.occupancy.sampling.dilation, OccupancySamplingOptions{}.dilation);
  EXPECT_EQ(WorkRequest{}.guidance_scale, c.defaults.guidance_scale);
  EXPECT_EQ(WorkRequest{}.resolution_base, c.defaults.resolution_base);
  EXPECT_EQ(GenerationRequest{}.guidance_scale, c.defaults.guidance_scale);
}

TEST(LayerOptions, HttpGatewaySizedFromTheConfig) {
  ServerConfig config;
  config.http_listen = "127.0.0.1:8080";
  config.metrics_listen = "127.0.0.1:9464";
  config.batching.max_queue_size = 64;
  config.batching.batch_buckets = {1, 2, 4, 8};
  config.limits.max_message_bytes = 8 << 20;
  config.http.header_timeout_ms = 1234;
  config.http.write_timeout_ms = 4321;
  config.http.max_connections_per_client = 7;
  config.http.max_header_count = 50;
  config.http.cors_allowed_origins = {"https://studio.example.com"};
  HttpGatewayOptions options = http_gateway_options(config);
  EXPECT_EQ(options.listen, "127.0.0.1:8080");
  EXPECT_EQ(options.metrics_listen, "127.0.0.1:9464");
  EXPECT_EQ(options.server.limits.max_body_bytes, 8 << 20);
  EXPECT_EQ(options.max_generating, 64 + 4 * 8 + 16);
  EXPECT_EQ(options.server.header_timeout, std::chrono::milliseconds(1234));
  EXPECT_EQ(options.server.write_timeout, std::chrono::milliseconds(4321));
  EXPECT_EQ(options.server.idle_timeout, std::chrono::milliseconds(config.http.idle_timeout_ms));
  EXPECT_EQ(options.server.max_connections_per_client, 7);
  EXPECT_EQ(options.server.limits.max_header_count, 50);
  EXPECT_EQ(options.cors_allowed_origins, config.http.cors_allowed_origins);
  EXPECT_GE(options.server.io_threads, 1);  // 0 in the config: one per core
  config.http.io_threads = 3;
  config.batching.max_queue_size = 1;
  config.batching.batch_buckets = {1};
  options = http_gateway_options(config);
  EXPECT_EQ(options.server.io_threads, 3);
  EXPECT_EQ(options.max_generating, 1 + 4 + 16);
}

TEST(LayerOptions, RedisClientAndJobStoreGetTheFailoverSettings) {
  ServerConfig c;
  c.redis.url = "redis://:pw@unused/2";
  c.redis.sentinels = {"10.0.0.1:26379", "10.0.0.2:26379"};
  c.redis.master_name = "mymaster";
  c.jobs.durable_replicas = 2;
  c.jobs.durable_timeout_ms = 750;
  const RedisClientOptions client = redis_client_options(c);
  EXPECT_EQ(client.sentinels.addresses, c.redis.sentinels);
  EXPECT_EQ(client.sentinels.master_name, "mymaster");
  EXPECT_EQ(client.endpoint.db, 2);
  const RedisJobStoreOptions store = redis_job_store_options(c);
  EXPECT_EQ(store.durable_replicas, 2);
  EXPECT_EQ(store.durable_timeout_ms, 750);
}

// The mesh section is the mesh layer's own options, so they arrive whole: a setting that has no
// key (the simplifier's tolerance, say) set in code is not lost on the way. (A bad
// mesh.occupancy word is refused where it is read, naming the key: test_server_config.cpp.)
TEST(LayerOptions, TheMeshSectionReachesTheExecutorWhole) {
  ServerConfig c = changed_config();
  c.mesh.pipeline.simplification.tolerance = 0.25;
  c.mesh.occupancy.max_repair_passes = 3;
  const ExecutorOptions x = executor_options(c);
  EXPECT_EQ(x.shape.mesh, c.mesh.pipeline);
  EXPECT_EQ(x.shape.occupancy.sampling, c.mesh.occupancy);
  EXPECT_EQ(x.shape.mesh.simplification.tolerance, 0.25);
}

}  // namespace test_layer_options
}  // namespace cube3d
