// The one place where the server config becomes the options of the layers below it: one
// function per layer, so a setting is read in exactly one spot and no field is copied by hand
// in main(). Sections that are another layer's own struct (batching = SchedulerConfig,
// limits/defaults = RequestPolicy) are passed through whole.
#pragma once

#include "cube3d/core/model_config.h"
#include "cube3d/pipeline/shape_pipeline.h"
#include "cube3d/scheduler/scheduler.h"
#include "cube3d/server/cache/redis_result_tier.h"
#include "cube3d/server/config/server_config.h"
#include "cube3d/server/executor/engine_executor.h"
#include "cube3d/server/http/http_gateway.h"
#include "cube3d/server/inference/model_description.h"
#include "cube3d/server/jobs/job_service.h"
#include "cube3d/server/jobs/redis_job_store.h"
#include "cube3d/server/redis/redis_client.h"
#include "cube3d/server/service/service.h"

namespace cube3d {

// Model files, device, dtype, graphs, and the capture plan: every batch bucket, with and
// without guidance rows (a batch whose requests all ask for guidance 0 has one row each), in
// the configured single-stream mode, all captured at load before the server reports SERVING.
EngineOptions engine_options(const ServerConfig& config);

// Decode mode, progress interval, mesh threads, the occupancy evaluation and the mesh
// post-processing. The metrics observer (on_generated) is the caller's to set.
ExecutorOptions executor_options(const ServerConfig& config);

SchedulerConfig scheduler_config(const ServerConfig& config);

// The request policy (limits, defaults, whether the model takes a bounding box), prompt
// logging, and T for progress events.
ServiceOptions service_options(const ServerConfig& config, const ModelConfig& model);

// The HTTP front door: its listeners (http_listen, metrics_listen), the `http:` section, the
// body limit (limits.max_message_bytes), and how many generate calls it holds at once:
// max_queue_size + 4 x the largest bucket + 16 (every request the scheduler holds, waiting,
// decoding or meshing, and a burst the core refuses at once: the core's limits decide, not
// this). I/O threads: http.io_threads, or one per core. gzip: http.gzip, http.gzip_min_bytes. TLS
// on http_listen with http.tls: the tls: section's certificate, key and client certificates.
HttpGatewayOptions http_gateway_options(const ServerConfig& config);

// The Open Inference Protocol's model configuration: the batch buckets (max_batch_size, the
// largest), the queue delay and size, the device kind, whether the result cache is on.
inference::InferenceOptions inference_options(const ServerConfig& config);

// The `jobs:` section's deadline. (The store's bounds are the section's own JobStoreOptions,
// config.jobs.limits, and the cache's store is config.cache.store: no copy is made of either.)
JobServiceOptions job_service_options(const ServerConfig& config);

// The `redis:` section's client (the URL parsed; the caller checks it is set).
RedisClientOptions redis_client_options(const ServerConfig& config);
// jobs.store redis: the store's bounds with its key prefix, lease and takeovers.
RedisJobStoreOptions redis_job_store_options(const ServerConfig& config);
// cache.redis: the tier's prefix, TTL and claims (as long as jobs.lease_ms); `replica` names
// this process in its claims.
RedisResultTierOptions redis_result_tier_options(const ServerConfig& config,
                                                 const std::string& replica);

}  // namespace cube3d
