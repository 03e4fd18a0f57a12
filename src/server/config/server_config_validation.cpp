// Server config validation: each value in its range or among its words, the relations between
// values (min <= default <= max resolution, TLS files in pairs, two listeners on two ports), and
// the files the server will open, so that a bad config fails at start-up with a message naming
// the key rather than at the first request or half-way through loading a model. Reading and
// printing are in server_config.cpp.
#include <algorithm>
#include <array>
#include <charconv>
#include <climits>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "cube3d/core/constants.h"
#include "cube3d/core/error.h"
#include "cube3d/core/files.h"
#include "cube3d/core/net_address.h"
#include "cube3d/core/yaml_reader.h"
#include "cube3d/mesh/mesh_format.h"
#include "cube3d/server/config/server_config.h"
#include "cube3d/server/redis/redis_url.h"

namespace cube3d {
namespace {

constexpr int64_t kMaxPromptBytes = 65'536;
constexpr int64_t kMinMessageBytes = 1 << 20;
constexpr int64_t kMaxMessageBytes = INT_MAX;  // gRPC takes the limits as int
// Deadlines and the drain grace period become std::chrono nanoseconds; the caps keep a typo
// (extra digits) from overflowing them and are far beyond any sensible value.
constexpr int64_t kMaxDeadlineMs = 7LL * 24 * 3600 * 1000;  // a week
constexpr int64_t kMaxDrainGraceSeconds = 24 * 3600;
constexpr int64_t kMaxMeshThreads = 1024;
// A budget above ~2^30 faces is no budget (marching cubes numbers vertices in 32 bits anyway).
constexpr int64_t kMaxMarchingCubesFaces = int64_t{1} << 30;
// Memory bounds (cache.max_bytes, jobs.max_result_bytes): 1 TiB is beyond any machine here, and
// a typo with extra digits is refused rather than taken as "unbounded".
constexpr int64_t kMaxCacheBytes = int64_t{1} << 40;
constexpr int64_t kMaxJobs = 10'000'000;
// A long-poll holds a little memory and no thread; ten minutes is past every proxy's timeout.
constexpr int64_t kMaxLongPollMs = 600'000;
// mesh.occupancy_dilation is a margin in cells of the level being refined. At the default
// coarsest level (2^5 = 32 cells a side) 8 cells either side of the surface already span half
// the box, so a larger margin refines most of the coarse levels and saves little over the dense
// grid while still paying for the bookkeeping: such a config wants mesh.occupancy: dense. The
// default is 1; 2 already costs 1.5 times the points for no change on the test fields
// (mesh/hierarchical_occupancy.h). The sampler accepts up to 2^10, which only a typo asks for.
constexpr int64_t kMaxOccupancyDilation = 8;

// A lease renewed every third of it: shorter than a few hundred milliseconds is renewal traffic
// for nothing; longer than an hour leaves a dead replica's jobs waiting all that time.
constexpr int64_t kMaxLeaseMs = 3'600'000;
constexpr int64_t kMaxTakeovers = 100;
constexpr int64_t kMaxRedisTimeoutMs = 60'000;
constexpr int64_t kMaxRedisConnections = 64;

constexpr std::array<std::string_view, 2> kJobStores = {"memory", "redis"};
constexpr std::array<std::string_view, 2> kWeightDtypes = {"float32", "bfloat16"};
constexpr std::array<std::string_view, 2> kDecodeModes = {"causal", "reference"};
constexpr std::array<std::string_view, 2> kClientCertificates = {"required", "optional"};
constexpr std::array<std::string_view, 3> kGraphModes = {"on", "off", "emulate"};
constexpr std::array<std::string_view, 2> kDecodeKernels = {"torch", "triton"};
constexpr std::array<std::string_view, 2> kLogFormats = {"text", "json"};
constexpr std::array<std::string_view, 7> kLogLevels = {"trace", "debug",    "info", "warn",
                                                        "error", "critical", "off"};

using yaml::fail;
using yaml::format_float;

template <std::size_t N>
std::string join_words(const std::array<std::string_view, N>& words) {
  std::string text;
  for (std::size_t i = 0; i < N; ++i) {
    if (i > 0) text += i + 1 == N ? " or " : ", ";
    text += words[i];
  }
  return text;
}

void check_server_range(std::string_view where, std::string_view key, int64_t value, int64_t min,
                        int64_t max) {
  if (value < min || value > max) {
    const std::string range =
        max == std::numeric_limits<int64_t>::max()
            ? " must be at least " + std::to_string(min)
            : " must be between " + std::to_string(min) + " and " + std::to_string(max);
    fail(where, std::string(key) + " (" + std::to_string(value) + ")" + range);
  }
}

template <std::size_t N>
void check_word(std::string_view where, std::string_view key, const std::string& value,
                const std::array<std::string_view, N>& allowed) {
  if (std::find(allowed.begin(), allowed.end(), value) == allowed.end()) {
    fail(where, std::string(key) + ": unknown value '" + value + "' (expected " +
                    join_words(allowed) + ")");
  }
}

// "host:port" or "[ipv6]:port", as gRPC and the metrics exposer take them.
HostPort check_address(std::string_view where, std::string_view key, const std::string& text) {
  try {
    return parse_host_port(text, key);
  } catch (const Error& e) {
    fail(where, e.what());
  }
}

// A file the server will open later: missing -> kNotFound, the wrong kind or unreadable ->
// kInvalidArgument, each naming the key.
void check_file(std::string_view where, std::string_view key, const std::string& path,
                ReadableKind kind) {
  try {
    require_readable(path, kind);
  } catch (const Error& e) {
    throw Error(e.code(), std::string(where) + ": " + std::string(key) + ": " + e.what());
  }
}

void check_device(std::string_view where, const std::string& device) {
  if (device == "cpu" || device == "cuda") return;
  if (device.starts_with("cuda:")) {
    const std::string_view index = std::string_view(device).substr(5);
    int value = 0;
    const auto [end, ec] = std::from_chars(index.data(), index.data() + index.size(), value);
    if (ec == std::errc() && end == index.data() + index.size() && value >= 0) return;
  }
  fail(where, "device: unknown device '" + device + "' (expected cpu, cuda or cuda:N)");
}

// redis.*: a URL that parses whenever something uses it, and its bounds.
void check_redis(std::string_view where, const ServerConfig& c) {
  const bool used = c.jobs.store == "redis" || (c.cache.enabled && c.cache.redis);
  if (used && c.redis.url.empty()) {
    fail(where, std::string(c.jobs.store == "redis" ? "jobs.store: redis" : "cache.redis: true") +
                    " needs redis.url (redis://host:6379, or --redis-url / CUBE3D_REDIS_URL)");
  }
  if (!c.redis.url.empty()) {
    try {
      parse_redis_url(c.redis.url);
    } catch (const Error& e) {
      fail(where, e.what());
    }
  }
  if (!c.redis.tls_ca_file.empty()) {
    check_file(where, "redis.tls_ca_file", c.redis.tls_ca_file, ReadableKind::kFile);
  }
  check_server_range(where, "redis.timeout_ms", c.redis.timeout_ms, 1, kMaxRedisTimeoutMs);
  check_server_range(where, "redis.connect_timeout_ms", c.redis.connect_timeout_ms, 1,
                     kMaxRedisTimeoutMs);
  check_server_range(where, "redis.connections", c.redis.connections, 1, kMaxRedisConnections);
  try {
    validate_sentinels(RedisSentinels{c.redis.sentinels, c.redis.master_name});
  } catch (const Error& e) {
    fail(where, e.what());
  }
  check_server_range(where, "jobs.durable_replicas", c.jobs.durable_replicas, 0, 100);
  check_server_range(where, "jobs.durable_timeout_ms", c.jobs.durable_timeout_ms, 1, 60'000);
  if (c.redis.key_prefix.empty() ||
      std::any_of(c.redis.key_prefix.begin(), c.redis.key_prefix.end(),
                  [](unsigned char ch) { return ch <= ' ' || ch >= 0x7f; })) {
    fail(where, "redis.key_prefix: must be printable ASCII without spaces, and not empty ('" +
                    c.redis.key_prefix + "')");
  }
}

}  // namespace

void validate_server_config(const ServerConfig& c) {
  const std::string_view where = c.source.empty() ? std::string_view("server config") : c.source;
  const HostPort listen = check_address(where, "listen", c.listen);

  if (c.tls.cert_file.empty() != c.tls.key_file.empty()) {
    fail(where, std::string("tls.cert_file and tls.key_file: set both or neither (") +
                    (c.tls.cert_file.empty() ? "tls.cert_file" : "tls.key_file") + " is empty)");
  }
  if (c.tls.enabled()) {
    check_file(where, "tls.cert_file", c.tls.cert_file, ReadableKind::kFile);
    check_file(where, "tls.key_file", c.tls.key_file, ReadableKind::kFile);
  }
  if (!c.tls.client_ca_file.empty()) {
    if (!c.tls.enabled()) {
      fail(where, "tls.client_ca_file: client certificates need TLS (tls.cert_file, tls.key_file)");
    }
    check_file(where, "tls.client_ca_file", c.tls.client_ca_file, ReadableKind::kFile);
  }
  check_word(where, "tls.client_certificates", c.tls.client_certificates, kClientCertificates);
  if (c.http.tls && !c.tls.enabled()) {
    fail(where,
         "http.tls: TLS on http_listen uses the tls: section's certificate and key "
         "(tls.cert_file, tls.key_file), and they are not set");
  }
  if (c.http.tls && c.http_listen.empty()) {
    fail(where, "http.tls: there is no http_listen to serve over TLS");
  }
  if (!c.auth.api_keys_file.empty()) {
    check_file(where, "auth.api_keys_file", c.auth.api_keys_file, ReadableKind::kFile);
  }
  if (!c.policy.prompt_denylist_file.empty()) {
    check_file(where, "policy.prompt_denylist_file", c.policy.prompt_denylist_file,
               ReadableKind::kFile);
  }

  if (c.model.config.empty()) fail(where, "model.config: must name the model YAML file");
  check_file(where, "model.config", c.model.config, ReadableKind::kFile);
  // A trained GPT with a random decoder (or the reverse) only makes noise.
  if (c.model.gpt_weights.empty() != c.model.shape_weights.empty()) {
    fail(where, std::string("model.gpt_weights and model.shape_weights: set both or neither (") +
                    (c.model.gpt_weights.empty() ? "model.gpt_weights" : "model.shape_weights") +
                    " is empty)");
  }
  if (!c.model.gpt_weights.empty()) {
    check_file(where, "model.gpt_weights", c.model.gpt_weights, ReadableKind::kFile);
    check_file(where, "model.shape_weights", c.model.shape_weights, ReadableKind::kFile);
  }
  if (!c.model.clip_model.empty()) {
    check_file(where, "model.clip_model", c.model.clip_model, ReadableKind::kDirectory);
  }
  if (!c.model.clip_vocab.empty()) {
    check_file(where, "model.clip_vocab", c.model.clip_vocab, ReadableKind::kFileOrDirectory);
  }

  check_device(where, c.device);
  check_word(where, "dtype", c.dtype, kWeightDtypes);
  check_word(where, "single_stream_decode", c.single_stream_decode, kDecodeModes);
  check_word(where, "cuda_graphs", c.cuda_graphs, kGraphModes);
  check_word(where, "decode_kernels", c.decode_kernels, kDecodeKernels);

  const std::vector<int64_t>& buckets = c.batching.batch_buckets;
  if (buckets.empty()) fail(where, "batching.batch_buckets: must list at least one batch size");
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    const std::string key = "batching.batch_buckets[" + std::to_string(i) + "]";
    check_server_range(where, key, buckets[i], 1, kMaxBatchBucket);
    if (i > 0 && buckets[i] == buckets[i - 1]) {
      fail(where, "batching.batch_buckets: " + std::to_string(buckets[i]) + " is listed twice");
    }
    if (i > 0 && buckets[i] < buckets[i - 1]) {
      fail(where, "batching.batch_buckets: must be in increasing order (" +
                      std::to_string(buckets[i - 1]) + " comes before " +
                      std::to_string(buckets[i]) + ")");
    }
  }
  check_server_range(where, "batching.max_queue_delay_ms", c.batching.max_queue_delay_ms, 0,
                     kMaxQueueDelayMs);
  check_server_range(where, "batching.max_queue_size", c.batching.max_queue_size, 1,
                     std::numeric_limits<int64_t>::max());
  check_server_range(where, "batching.max_joins_per_step", c.batching.max_joins_per_step, 1,
                     kMaxBatchBucket);
  check_server_range(where, "batching.batch_max_wait_ms", c.batching.batch_max_wait_ms, 0,
                     kMaxBatchWaitMs);
  // 0: three quarters of the queue (the rest is kept for interactive work).
  check_server_range(where, "batching.max_queued_batch", c.batching.max_queued_batch, 0,
                     c.batching.max_queue_size);

  const LimitsConfig& limits = c.limits;
  check_server_range(where, "limits.max_prompt_bytes", limits.max_prompt_bytes, 1, kMaxPromptBytes);
  check_server_range(where, "limits.max_resolution_base", limits.max_resolution_base, 1,
                     kMaxResolutionBase);
  if (limits.min_resolution_base < 1 || limits.min_resolution_base > limits.max_resolution_base) {
    fail(where, "limits.min_resolution_base (" + std::to_string(limits.min_resolution_base) +
                    ") must be between 1 and limits.max_resolution_base (" +
                    std::to_string(limits.max_resolution_base) + ")");
  }
  check_server_range(where, "limits.max_message_bytes", limits.max_message_bytes, kMinMessageBytes,
                     kMaxMessageBytes);
  check_server_range(where, "limits.max_target_face_count", limits.max_target_face_count, 1,
                     std::numeric_limits<int64_t>::max());
  check_server_range(where, "limits.max_lod_levels", limits.max_lod_levels, 1, kMaxLodLevels);
  check_server_range(where, "limits.default_deadline_ms", limits.default_deadline_ms, 0,
                     kMaxDeadlineMs);
  check_server_range(where, "limits.request_read_timeout_ms", limits.request_read_timeout_ms, 100,
                     kMaxDeadlineMs);

  const RequestDefaults& defaults = c.defaults;
  // The negated comparison also catches NaN.
  if (!(defaults.guidance_scale >= 0.0 && defaults.guidance_scale <= kMaxGuidanceScale)) {
    fail(where, "defaults.guidance_scale (" + format_float(defaults.guidance_scale) +
                    ") must be a number between 0 and " + format_float(kMaxGuidanceScale));
  }
  if (defaults.top_p && !(*defaults.top_p > 0.0 && *defaults.top_p <= 1.0)) {
    fail(where, "defaults.top_p (" + format_float(*defaults.top_p) +
                    ") must be in (0, 1], or null for greedy decoding");
  }
  if (defaults.resolution_base < limits.min_resolution_base ||
      defaults.resolution_base > limits.max_resolution_base) {
    fail(where, "defaults.resolution_base (" + std::to_string(defaults.resolution_base) +
                    ") must be between limits.min_resolution_base (" +
                    std::to_string(limits.min_resolution_base) +
                    ") and limits.max_resolution_base (" +
                    std::to_string(limits.max_resolution_base) + ")");
  }
  // Only a config built in code can hold a value outside the enum.
  if (!mesh_format_from_name(to_string(defaults.format))) {
    fail(where, "defaults.format: not one of raw, obj, ply or glb");
  }

  // Any level up to the hard cap: one at or above a request's resolution_base evaluates that
  // request's grid densely (the sampler clamps it), which is not an error.
  check_server_range(where, "mesh.occupancy_coarsest_resolution_base",
                     c.mesh.occupancy.coarsest_resolution_base, 1, kMaxResolutionBase);
  check_server_range(where, "mesh.occupancy_dilation", c.mesh.occupancy.dilation, 0,
                     kMaxOccupancyDilation);
  const double floater_ratio = c.mesh.pipeline.cleanup.floater_diagonal_ratio;
  if (!(floater_ratio > 0.0 && floater_ratio < 1.0)) {
    fail(where, "mesh.floater_ratio (" + format_float(floater_ratio) +
                    ") must be strictly between 0 and 1");
  }
  check_server_range(where, "mesh.mesh_threads", c.mesh.mesh_threads, 0, kMaxMeshThreads);
  // A std::size_t (the mesh layer's): the key's reader refused a negative value.
  check_server_range(where, "mesh.max_marching_cubes_faces",
                     static_cast<int64_t>(std::min<std::size_t>(
                         c.mesh.pipeline.max_marching_cubes_faces,
                         static_cast<std::size_t>(std::numeric_limits<int64_t>::max()))),
                     0, kMaxMarchingCubesFaces);

  check_server_range(where, "jobs.result_ttl_s", c.jobs.limits.result_ttl_ms / 1000, 1,
                     kMaxDeadlineMs / 1000);
  check_server_range(where, "jobs.max_result_bytes", c.jobs.limits.max_result_bytes, 0,
                     kMaxCacheBytes);
  check_server_range(where, "jobs.max_jobs_per_key", c.jobs.limits.max_jobs_per_key, 1, kMaxJobs);
  check_server_range(where, "jobs.max_jobs", c.jobs.limits.max_jobs, 1, kMaxJobs);
  check_server_range(where, "jobs.max_wait_ms", c.jobs.limits.max_wait_ms, 0, kMaxLongPollMs);
  check_server_range(where, "jobs.poll_after_ms", c.jobs.limits.poll_after_ms, 1, kMaxLongPollMs);
  check_server_range(where, "jobs.deadline_ms", c.jobs.deadline_ms, 1, kMaxDeadlineMs);
  if (c.jobs.limits.max_jobs_per_key > c.jobs.limits.max_jobs) {
    fail(where, "jobs.max_jobs_per_key (" + std::to_string(c.jobs.limits.max_jobs_per_key) +
                    ") is more than jobs.max_jobs (" + std::to_string(c.jobs.limits.max_jobs) +
                    ")");
  }
  check_word(where, "jobs.store", c.jobs.store, kJobStores);
  check_server_range(where, "jobs.lease_ms", c.jobs.lease_ms, 300, kMaxLeaseMs);
  check_server_range(where, "jobs.max_takeovers", c.jobs.max_takeovers, 0, kMaxTakeovers);
  check_server_range(where, "cache.max_bytes", c.cache.store.max_bytes, 0, kMaxCacheBytes);
  check_server_range(where, "cache.redis_ttl_s", c.cache.redis_ttl_s, 1, kMaxDeadlineMs / 1000);
  check_redis(where, c);
  check_server_range(where, "cache.max_dir_bytes", c.cache.store.max_dir_bytes, 0,
                     kMaxCacheBytes * 1024);

  if (!c.metrics_listen.empty()) {
    const HostPort metrics = check_address(where, "metrics_listen", c.metrics_listen);
    // Two listeners on one port: the second bind would fail at start-up with a vaguer message.
    if (listeners_collide(metrics, listen)) {
      fail(where, "metrics_listen ('" + c.metrics_listen + "') uses the port of listen ('" +
                      c.listen + "')");
    }
  }
  if (!c.http_listen.empty()) {
    const HostPort http = check_address(where, "http_listen", c.http_listen);
    if (listeners_collide(http, listen)) {
      fail(where,
           "http_listen ('" + c.http_listen + "') uses the port of listen ('" + c.listen + "')");
    }
    if (!c.metrics_listen.empty() &&
        listeners_collide(http, check_address(where, "metrics_listen", c.metrics_listen))) {
      fail(where, "http_listen ('" + c.http_listen + "') uses the port of metrics_listen ('" +
                      c.metrics_listen + "')");
    }
  }
  // The front doors' own sections are checked by their own rules (one set of ranges).
  try {
    validate_http_config(c.http);
    validate_grpc_options(c.grpc);
  } catch (const Error& e) {
    fail(where, e.what());
  }
  check_word(where, "logging.level", c.logging.level, kLogLevels);
  check_word(where, "logging.format", c.logging.format, kLogFormats);
  check_server_range(where, "drain_grace_seconds", c.drain_grace_seconds, 0, kMaxDrainGraceSeconds);
  check_server_range(where, "progress_interval_tokens", c.progress_interval_tokens, 1,
                     std::numeric_limits<int64_t>::max());
}

}  // namespace cube3d
