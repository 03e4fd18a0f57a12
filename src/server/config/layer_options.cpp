#include "cube3d/server/config/layer_options.h"

#include <algorithm>
#include <memory>
#include <string_view>
#include <thread>

#include "cube3d/pipeline/model_text.h"
#include "cube3d/server/http/playground.h"

namespace cube3d {

EngineOptions engine_options(const ServerConfig& config) {
  EngineOptions options;
  options.gpt_weights = config.model.gpt_weights;
  options.shape_weights = config.model.shape_weights;
  options.clip_model = config.model.clip_model;
  options.clip_vocab = config.model.clip_vocab;
  options.device = config.device;
  options.dtype = config.dtype;
  options.cuda_graphs = parse_graph_mode(config.cuda_graphs);
  options.decode_kernels = parse_decode_kernels(config.decode_kernels);
  options.max_batch = config.batching.batch_buckets.back();
  options.capture.buckets = config.batching.batch_buckets;
  options.capture.guided = true;
  options.capture.unguided = true;
  options.capture.modes = {parse_single_stream_decode(config.single_stream_decode)};
  return options;
}

ExecutorOptions executor_options(const ServerConfig& config) {
  ExecutorOptions options;
  options.single_stream_decode = parse_single_stream_decode(config.single_stream_decode);
  options.batch_buckets = config.batching.batch_buckets;
  options.progress_interval_tokens = config.progress_interval_tokens;
  options.mesh_threads = effective_mesh_threads(config.mesh);
  options.shape.occupancy.sampling = config.mesh.occupancy;
  options.shape.mesh = config.mesh.pipeline;
  return options;
}

SchedulerConfig scheduler_config(const ServerConfig& config) { return config.batching; }

JobServiceOptions job_service_options(const ServerConfig& config) {
  return {config.jobs.deadline_ms};
}

RedisClientOptions redis_client_options(const ServerConfig& config) {
  RedisClientOptions options;
  options.endpoint = parse_redis_url(config.redis.url);
  options.sentinels = RedisSentinels{config.redis.sentinels, config.redis.master_name};
  options.connect.connect_timeout = std::chrono::milliseconds(config.redis.connect_timeout_ms);
  options.connect.tls_ca_file = config.redis.tls_ca_file;
  options.connect.client_name = "cube3d-server";
  options.command_timeout = std::chrono::milliseconds(config.redis.timeout_ms);
  options.lanes = config.redis.connections;
  return options;
}

RedisJobStoreOptions redis_job_store_options(const ServerConfig& config) {
  RedisJobStoreOptions options;
  options.limits = config.jobs.limits;
  options.key_prefix = config.redis.key_prefix;
  options.lease_ms = config.jobs.lease_ms;
  options.max_takeovers = config.jobs.max_takeovers;
  options.durable_replicas = config.jobs.durable_replicas;
  options.durable_timeout_ms = config.jobs.durable_timeout_ms;
  return options;
}

RedisResultTierOptions redis_result_tier_options(const ServerConfig& config,
                                                 const std::string& replica) {
  RedisResultTierOptions options;
  options.key_prefix = config.redis.key_prefix;
  options.ttl_s = config.cache.redis_ttl_s;
  options.claim_ms = config.jobs.lease_ms;
  options.max_entry_bytes = config.limits.max_message_bytes;
  options.replica = replica;
  return options;
}

ServiceOptions service_options(const ServerConfig& config, const ModelConfig& model) {
  ServiceOptions options;
  options.cache_enabled = config.cache.enabled;
  options.cache_shared_across_keys = config.cache.shared_across_keys;
  options.policy.limits = config.limits;
  options.policy.defaults = config.defaults;
  options.policy.model_has_bbox = model.gpt.use_bbox;
  options.log_prompts = config.logging.prompts;
  options.tokens_per_shape = model.shape.num_encoder_latents;
  options.model_text = [](std::string_view prompt) { return text_the_model_reads(prompt); };
  return options;
}

inference::InferenceOptions inference_options(const ServerConfig& config) {
  inference::InferenceOptions options;
  options.batch_buckets = config.batching.batch_buckets;
  options.max_queue_delay_ms = config.batching.max_queue_delay_ms;
  options.max_queue_size = config.batching.max_queue_size;
  options.gpu = config.device.starts_with("cuda");
  options.cache_enabled = config.cache.enabled;
  return options;
}

HttpGatewayOptions http_gateway_options(const ServerConfig& config) {
  HttpGatewayOptions options;
  options.listen = config.http_listen;
  options.metrics_listen = config.metrics_listen;
  const auto& buckets = config.batching.batch_buckets;
  const int64_t largest = buckets.empty() ? 1 : *std::max_element(buckets.begin(), buckets.end());
  options.max_generating = config.batching.max_queue_size + 4 * largest + 16;
  options.cors_allowed_origins = config.http.cors_allowed_origins;
  if (config.http.playground && !config.http_listen.empty()) {
    const std::string dir = config.http.playground_dir.empty() ? http::default_playground_dir()
                                                               : config.http.playground_dir;
    options.playground = std::make_shared<const http::StaticSite>(
        http::load_playground(dir, config.http.three_js_dir));
  }
  http::ServerOptions& server = options.server;
  const HttpConfig& h = config.http;
  server.io_threads =
      h.io_threads > 0 ? h.io_threads : std::max<int64_t>(1, std::thread::hardware_concurrency());
  server.max_connections = h.max_connections;
  server.max_connections_per_client = h.max_connections_per_client;
  server.header_timeout = std::chrono::milliseconds(h.header_timeout_ms);
  server.body_timeout = std::chrono::milliseconds(h.body_timeout_ms);
  server.idle_timeout = std::chrono::milliseconds(h.idle_timeout_ms);
  server.write_timeout = std::chrono::milliseconds(h.write_timeout_ms);
  server.limits.max_request_line_bytes = h.max_request_line_bytes;
  server.limits.max_header_bytes = h.max_header_bytes;
  server.limits.max_header_count = h.max_header_count;
  server.limits.max_body_bytes = config.limits.max_message_bytes;
  server.gzip.enabled = h.gzip;
  server.gzip.min_bytes = h.gzip_min_bytes;
  if (h.tls) {
    // The same files and client-certificate rule as the gRPC listener's (server_main.cpp).
    options.tls =
        http::TlsOptions{config.tls.cert_file, config.tls.key_file, config.tls.client_ca_file,
                         config.tls.client_certificates != "optional"};
  }
  return options;
}

}  // namespace cube3d
