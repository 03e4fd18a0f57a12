#include "cube3d/server/observability/metrics.h"

#include <prometheus/text_serializer.h>

#include <algorithm>

#include "cube3d/core/error.h"
#include "cube3d/server/observability/process_metrics.h"

namespace cube3d {
namespace {

// From a millisecond (a queue that is empty, a small mesh on a GPU) to ten minutes (a large
// mesh meshed on a CPU behind a long queue).
prometheus::Histogram::BucketBoundaries duration_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
          1,     2.5,    5,     10,   25,    50,   100, 250,  600};
}

// Time per output token: about a tenth of a millisecond (a small bucket on an H200 with CUDA
// graphs) to half a second (a large batch on a CPU).
prometheus::Histogram::BucketBoundaries token_buckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0015, 0.002, 0.003, 0.005,
          0.0075, 0.01,    0.025,  0.05,  0.1,    0.25,  0.5};
}

// A Redis pipeline: a tenth of a millisecond (a GET on loopback) to the longest redis.timeout_ms.
prometheus::Histogram::BucketBoundaries redis_buckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
          0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
}

// A family of series by label (each series added where its labels are known).
prometheus::Family<prometheus::Counter>* counters(prometheus::Registry& registry,
                                                  const std::string& name,
                                                  const std::string& help) {
  return &prometheus::BuildCounter().Name(name).Help(help).Register(registry);
}

prometheus::Family<prometheus::Gauge>* gauges(prometheus::Registry& registry,
                                              const std::string& name, const std::string& help) {
  return &prometheus::BuildGauge().Name(name).Help(help).Register(registry);
}

prometheus::Family<prometheus::Histogram>* histograms(prometheus::Registry& registry,
                                                      const std::string& name,
                                                      const std::string& help) {
  return &prometheus::BuildHistogram().Name(name).Help(help).Register(registry);
}

// A metric with no labels: its family's one series.
prometheus::Histogram* histogram(prometheus::Registry& registry, const std::string& name,
                                 const std::string& help,
                                 const prometheus::Histogram::BucketBoundaries& buckets) {
  return &histograms(registry, name, help)->Add({}, buckets);
}

prometheus::Gauge* gauge(prometheus::Registry& registry, const std::string& name,
                         const std::string& help) {
  return &gauges(registry, name, help)->Add({});
}

prometheus::Counter* counter(prometheus::Registry& registry, const std::string& name,
                             const std::string& help) {
  return &counters(registry, name, help)->Add({});
}

}  // namespace

Metrics::Metrics(const std::vector<int64_t>& buckets, const BuildInfo& build)
    // process_* (CPU, memory, file descriptors, start time) come with every scrape.
    : registry_(make_registry_with_process_metrics()) {
  auto& r = *registry_;
  requests_ = counters(r, "cube3d_requests_total",
                       "Mesh requests (gRPC and HTTP, and gRPC calls to unknown methods) by the "
                       "gRPC status code their clients saw");
  request_duration_ =
      histogram(r, "cube3d_request_duration_seconds",
                "Successful requests' time from arrival to response", duration_buckets());
  queue_duration_ = histogram(r, "cube3d_queue_duration_seconds",
                              "Successful requests' time from arrival to their first decode step",
                              duration_buckets());
  ttft_ = histogram(r, "cube3d_time_to_first_token_seconds",
                    "Time to the first shape token (queue, text encoding and prefill)",
                    duration_buckets());
  tpot_ = histogram(r, "cube3d_time_per_output_token_seconds",
                    "Decode time per shape token after the first", token_buckets());
  mesh_duration_ = histogram(r, "cube3d_mesh_duration_seconds",
                             "Successful requests' mesh stage: occupancy field, marching cubes, "
                             "clean-up, simplification and encoding",
                             duration_buckets());
  mesh_wait_ = histogram(r, "cube3d_mesh_wait_seconds",
                         "Time a decoded request waits for a mesh thread before its shape "
                         "stage starts (0 while mesh threads are free)",
                         duration_buckets());
  mesh_budget_exceeded_ =
      counter(r, "cube3d_mesh_budget_exceeded_total",
              "Meshes whose surface had more marching-cubes faces than "
              "mesh.max_marching_cubes_faces: extracted one level coarser (or more), with a "
              "warning in the answer");
  running_ = gauge(r, "cube3d_requests_running",
                   "Requests past the queue: encoding text, decoding or meshing");
  queue_depth_ = gauge(r, "cube3d_queue_depth", "Requests waiting for a batch");
  auto& batch_size = *histograms(r, "cube3d_batch_size",
                                 "Requests per batch (static batching) or per decode step "
                                 "(continuous batching), by batch bucket");
  prometheus::Histogram::BucketBoundaries sizes;
  for (const int64_t b : buckets) sizes.push_back(static_cast<double>(b));
  for (const int64_t b : buckets) {
    batch_size_by_bucket_[b] = &batch_size.Add({{"batch_bucket", std::to_string(b)}}, sizes);
  }
  gauges(r, "cube3d_build_info",
         "The running server's version, git revision, device and dtype (value 1)")
      ->Add({{"version", build.version},
             {"revision", build.revision},
             {"device", build.device},
             {"dtype", build.dtype}})
      .Set(1);
  tokens_ = counter(r, "cube3d_tokens_generated_total", "Shape tokens generated for requests");
  model_load_ = gauge(r, "cube3d_model_load_seconds", "Time to load and warm up the model");
  active_slots_ = gauge(r, "cube3d_active_slots",
                        "Requests holding a decode slot at the last step (continuous batching)");
  admissions_ = counter(r, "cube3d_admissions_total",
                        "Requests that joined the running batch (continuous batching)");
  prefill_ = histogram(r, "cube3d_prefill_duration_seconds",
                       "Text encoding and prefill of the requests joining at one step, during "
                       "which the running requests wait (continuous batching)",
                       duration_buckets());
  http_connections_ =
      gauges(r, "cube3d_http_connections", "Open HTTP connections, by listener (http, metrics)");
  http_closed_ = counters(r, "cube3d_http_connections_closed_total",
                          "HTTP connections closed, by listener and reason (client, idle_timeout, "
                          "header_timeout, body_timeout, write_timeout, refused_request, done, "
                          "server_stop)");
  http_refused_ = counters(r, "cube3d_http_connections_refused_total",
                           "HTTP connections closed at once when accepted, by listener and reason "
                           "(max_connections, max_connections_per_client)");
  cache_answers_ = counters(r, "cube3d_cache_requests_total",
                            "Answered requests by where their mesh came from: hit (the result "
                            "cache), miss (computed and stored), coalesced (an identical request's "
                            "computation in flight), bypass (computed without the cache)");
  cache_hit_bytes_ =
      counter(r, "cube3d_cache_hit_bytes_total", "Bytes of answers served from the result cache");
  cache_bytes_ =
      gauges(r, "cube3d_cache_bytes", "The result cache's size in bytes, by tier (memory, disk)");
  cache_entries_ =
      gauges(r, "cube3d_cache_entries", "The result cache's entries, by tier (memory, disk)");
  cache_evictions_ = counters(r, "cube3d_cache_evictions_total",
                              "Result cache entries evicted to stay within a tier's bound");
  cache_corrupt_ = counter(r, "cube3d_cache_corrupt_entries_total",
                           "Disk cache entries that failed their checks: deleted and recomputed");
  cache_disk_tier_up_ =
      gauge(r, "cube3d_cache_disk_tier_up",
            "1 when cache.dir's disk tier works; 0 when it is configured but unusable (missing "
            "and cannot be made, read-only, not a folder) and the memory tier serves alone");
  cache_writes_dropped_ = counter(r, "cube3d_cache_writes_dropped_total",
                                  "Disk cache writes dropped because the write queue was full");
  device_faults_ = counter(r, "cube3d_device_faults_total",
                           "Device faults (the GPU failed during a step: a CUDA error); after "
                           "one the server stops serving and exits with status 70 for a restart");
  peer_errors_ = counters(r, "cube3d_peer_errors_total",
                          "What peers caused and the server refused before its service, by door "
                          "(grpc, http) and kind (tls_handshake: a failed TLS handshake; "
                          "protocol: bytes that are no request; refused: a request refused "
                          "before the service), logged or not (the log writes one line a kind "
                          "per 10 s)");
  for (const auto& [door, kind] : {std::pair{"grpc", "tls_handshake"},
                                   {"grpc", "protocol"},
                                   {"http", "tls_handshake"},
                                   {"http", "protocol"},
                                   {"http", "refused"}}) {
    peer_errors_->Add({{"door", door}, {"kind", kind}});
  }
  redis_calls_ = counters(r, "cube3d_redis_commands_total",
                          "Pipelines of Redis commands (the shared job store and cache tier), "
                          "by their first command and outcome (ok: answered; error: timed "
                          "out, refused or connection lost)");
  redis_seconds_ = histograms(r, "cube3d_redis_command_seconds",
                              "Redis pipelines' time from queued to answered, by first command");
  redis_up_ = gauge(r, "cube3d_redis_up",
                    "1 while Redis (redis.url) can be reached, 0 when it cannot; 0 without one");
  cache_redis_lookups_ = counters(r, "cube3d_cache_redis_lookups_total",
                                  "Lookups in the shared (Redis) cache tier, by result: hit, "
                                  "miss, corrupt (deleted, recomputed), error (Redis could "
                                  "not be asked: a miss)");
  cache_redis_waits_ = counters(r, "cube3d_cache_redis_waits_total",
                                "Lookups that waited for another replica's computation of "
                                "the same request, by how they ended (hit, miss)");
  job_takeovers_ = counters(r, "cube3d_job_takeovers_total",
                            "Jobs whose replica stopped renewing its lease, handled here: "
                            "rerun (taken over), failed (past jobs.max_takeovers), cancelled");
  // The commands the server sends first in a pipeline, at zero from the start.
  for (const char* command : {"EVAL", "SET", "DEL", "PING"}) {
    for (const char* outcome : {"ok", "error"}) {
      redis_calls_->Add({{"command", command}, {"outcome", outcome}});
    }
    redis_seconds_by_command_[command] =
        &redis_seconds_->Add({{"command", command}}, redis_buckets());
  }
  for (const char* result : {"hit", "miss", "corrupt", "error"}) {
    cache_redis_lookups_->Add({{"result", result}});
  }
  for (const char* result : {"hit", "miss"}) cache_redis_waits_->Add({{"result", result}});
  for (const char* outcome : {"rerun", "failed", "cancelled"}) {
    job_takeovers_->Add({{"outcome", outcome}});
  }
  jobs_ = gauges(r, "cube3d_jobs",
                 "Jobs kept now, by state (queued, running, succeeded, failed, cancelled)");
  job_result_bytes_ =
      gauge(r, "cube3d_job_result_bytes", "Bytes of finished jobs' results kept in memory");
  jobs_submitted_ =
      counters(r, "cube3d_jobs_submitted_total", "Job submissions, by outcome (accepted, refused)");
  key_requests_ = counters(r, "cube3d_key_requests_total",
                           "Mesh requests by API key and the gRPC status code the core answered");
  key_shape_tokens_ =
      counters(r, "cube3d_key_shape_tokens_total",
               "Shape tokens decoded for each API key's requests, guidance rows included");
  key_occupancy_points_ = counters(r, "cube3d_key_occupancy_points_total",
                                   "Occupancy points evaluated for each API key's meshes");
  key_mesh_bytes_ = counters(r, "cube3d_key_mesh_bytes_total",
                             "Mesh bytes returned to each API key (files, or raw arrays)");
  prompt_refusals_ = counters(r, "cube3d_prompt_refusals_total",
                              "Prompts refused by the prompt policy, by API key");
  for (const char* result : {"hit", "miss", "coalesced", "bypass"}) {
    cache_answers_->Add({{"result", result}});
  }
  for (const char* tier : {"memory", "disk"}) {
    cache_bytes_->Add({{"tier", tier}});
    cache_entries_->Add({{"tier", tier}});
    cache_evictions_->Add({{"tier", tier}});
  }
  for (const char* state : {"queued", "running", "succeeded", "failed", "cancelled"}) {
    jobs_->Add({{"state", state}});
  }
  for (const char* outcome : {"accepted", "refused"}) jobs_submitted_->Add({{"outcome", outcome}});
  // Every listener and reason from the start, at zero: a rate() over a series that appears
  // only with its first event misses that event, and dashboards see the families before any.
  // The reasons are the HTTP server's (server/httpd/http_server.h, ServerObserver).
  for (const char* listener : {"http", "metrics"}) {
    http_connections_->Add({{"listener", listener}});
    for (const char* reason : {"client", "idle_timeout", "header_timeout", "body_timeout",
                               "write_timeout", "refused_request", "done", "server_stop"}) {
      http_closed_->Add({{"listener", listener}, {"reason", reason}});
    }
    for (const char* reason : {"max_connections", "max_connections_per_client"}) {
      http_refused_->Add({{"listener", listener}, {"reason", reason}});
    }
  }
}

Metrics::~Metrics() = default;

void Metrics::request_finished(const std::string& code) {
  const std::lock_guard lock(mutex_);
  requests_->Add({{"code", code}}).Increment();
}

void Metrics::observe_request_seconds(double seconds) { request_duration_->Observe(seconds); }
void Metrics::observe_queue_seconds(double seconds) { queue_duration_->Observe(seconds); }
void Metrics::observe_mesh_seconds(double seconds) { mesh_duration_->Observe(seconds); }
void Metrics::observe_mesh_wait_seconds(double seconds) { mesh_wait_->Observe(seconds); }
void Metrics::mesh_budget_exceeded() { mesh_budget_exceeded_->Increment(); }

void Metrics::request_running(int64_t delta) {
  if (delta >= 0) {
    running_->Increment(static_cast<double>(delta));
  } else {
    running_->Decrement(static_cast<double>(-delta));
  }
}

void Metrics::set_queue_depth(int64_t depth) { queue_depth_->Set(static_cast<double>(depth)); }

void Metrics::batch_started(int64_t bucket, int64_t jobs) {
  const std::lock_guard lock(mutex_);
  const auto it = batch_size_by_bucket_.find(bucket);
  if (it != batch_size_by_bucket_.end()) it->second->Observe(static_cast<double>(jobs));
}

void Metrics::observe_ttft_seconds(double seconds) { ttft_->Observe(seconds); }
void Metrics::observe_tpot_seconds(double seconds) { tpot_->Observe(seconds); }
void Metrics::tokens_generated(int64_t tokens) { tokens_->Increment(static_cast<double>(tokens)); }
void Metrics::set_model_load_seconds(double seconds) { model_load_->Set(seconds); }

void Metrics::jobs_admitted(int64_t jobs, double prefill_seconds) {
  admissions_->Increment(static_cast<double>(jobs));
  prefill_->Observe(prefill_seconds);
}

void Metrics::set_active_slots(int64_t slots) { active_slots_->Set(static_cast<double>(slots)); }

void Metrics::http_connection_opened(const std::string& listener) {
  const std::lock_guard lock(mutex_);
  http_connections_->Add({{"listener", listener}}).Increment();
}

void Metrics::http_connection_closed(const std::string& listener, const std::string& reason) {
  const std::lock_guard lock(mutex_);
  http_connections_->Add({{"listener", listener}}).Decrement();
  http_closed_->Add({{"listener", listener}, {"reason", reason}}).Increment();
}

void Metrics::http_connection_refused(const std::string& listener, const std::string& reason) {
  const std::lock_guard lock(mutex_);
  http_refused_->Add({{"listener", listener}, {"reason", reason}}).Increment();
}

void Metrics::cache_answer(const std::string& result) {
  const std::lock_guard lock(mutex_);
  cache_answers_->Add({{"result", result}}).Increment();
}

void Metrics::cache_hit_bytes(int64_t bytes) {
  cache_hit_bytes_->Increment(static_cast<double>(bytes));
}

void Metrics::set_cache_size(const std::string& tier, int64_t bytes, int64_t entries) {
  const std::lock_guard lock(mutex_);
  cache_bytes_->Add({{"tier", tier}}).Set(static_cast<double>(bytes));
  cache_entries_->Add({{"tier", tier}}).Set(static_cast<double>(entries));
}

void Metrics::cache_eviction(const std::string& tier) {
  const std::lock_guard lock(mutex_);
  cache_evictions_->Add({{"tier", tier}}).Increment();
}

void Metrics::cache_corrupt_entry() { cache_corrupt_->Increment(); }
void Metrics::cache_write_dropped() { cache_writes_dropped_->Increment(); }
void Metrics::set_cache_disk_tier(bool up) { cache_disk_tier_up_->Set(up ? 1 : 0); }

void Metrics::device_fault() { device_faults_->Increment(); }

void Metrics::peer_error(std::string_view door, std::string_view kind) {
  peer_errors_->Add({{"door", std::string(door)}, {"kind", std::string(kind)}}).Increment();
}

void Metrics::set_tls_certificate_expiry_seconds(double seconds) {
  const std::lock_guard lock(mutex_);
  if (!tls_certificate_expiry_) {
    tls_certificate_expiry_ =
        gauge(*registry_, "cube3d_tls_certificate_expiry_seconds",
              "Seconds until the server's TLS certificate (tls.cert_file) expires; negative "
              "once it has. The server warns at start within 30 days");
  }
  tls_certificate_expiry_->Set(seconds);
}

void Metrics::redis_call(const std::string& command, double seconds, bool ok) {
  redis_calls_->Add({{"command", command}, {"outcome", ok ? "ok" : "error"}}).Increment();
  prometheus::Histogram* histogram = nullptr;
  {
    const std::lock_guard lock(mutex_);
    auto& slot = redis_seconds_by_command_[command];
    if (slot == nullptr) {
      slot = &redis_seconds_->Add({{"command", command}}, redis_buckets());
    }
    histogram = slot;
  }
  histogram->Observe(seconds);
}

void Metrics::set_redis_up(bool up) { redis_up_->Set(up ? 1 : 0); }

void Metrics::cache_redis_lookup(const std::string& result) {
  cache_redis_lookups_->Add({{"result", result}}).Increment();
}

void Metrics::cache_redis_wait(bool hit) {
  cache_redis_waits_->Add({{"result", hit ? "hit" : "miss"}}).Increment();
}

void Metrics::job_takeover(const std::string& outcome) {
  job_takeovers_->Add({{"outcome", outcome}}).Increment();
}

void Metrics::set_jobs(const std::string& state, int64_t count) {
  const std::lock_guard lock(mutex_);
  jobs_->Add({{"state", state}}).Set(static_cast<double>(count));
}

void Metrics::set_job_result_bytes(int64_t bytes) {
  job_result_bytes_->Set(static_cast<double>(bytes));
}

void Metrics::job_submitted(bool accepted) {
  const std::lock_guard lock(mutex_);
  jobs_submitted_->Add({{"outcome", accepted ? "accepted" : "refused"}}).Increment();
}

Metrics::KeyCounters& Metrics::key_counters(const std::string& key) {
  const auto found = keys_.find(key);
  if (found != keys_.end()) return found->second;
  KeyCounters& made = keys_[key];
  made.shape_tokens = &key_shape_tokens_->Add({{"key", key}});
  made.occupancy_points = &key_occupancy_points_->Add({{"key", key}});
  made.mesh_bytes = &key_mesh_bytes_->Add({{"key", key}});
  made.prompt_refusals = &prompt_refusals_->Add({{"key", key}});
  return made;
}

void Metrics::key_request(const std::string& key, const std::string& code) {
  const std::lock_guard lock(mutex_);
  KeyCounters& counters = key_counters(key);
  prometheus::Counter*& by_code = counters.requests_by_code[code];
  if (!by_code) by_code = &key_requests_->Add({{"key", key}, {"code", code}});
  by_code->Increment();
}

void Metrics::key_work(const std::string& key, int64_t shape_tokens, int64_t occupancy_points) {
  const std::lock_guard lock(mutex_);
  KeyCounters& counters = key_counters(key);
  counters.shape_tokens->Increment(static_cast<double>(shape_tokens));
  counters.occupancy_points->Increment(static_cast<double>(occupancy_points));
}

void Metrics::key_mesh_bytes(const std::string& key, int64_t bytes) {
  const std::lock_guard lock(mutex_);
  key_counters(key).mesh_bytes->Increment(static_cast<double>(bytes));
}

void Metrics::key_prompt_refused(const std::string& key) {
  const std::lock_guard lock(mutex_);
  key_counters(key).prompt_refusals->Increment();
}

Metrics::KeyUsage Metrics::key_usage(const std::string& key) const {
  const std::lock_guard lock(mutex_);
  KeyUsage usage;
  const auto found = keys_.find(key);
  if (found == keys_.end()) return usage;
  const KeyCounters& c = found->second;
  // Counters hold doubles; the counts stay exact integers up to 2^53.
  for (const auto& [code, counter] : c.requests_by_code) {
    usage.requests_by_code[code] = static_cast<int64_t>(counter->Value());
  }
  usage.shape_tokens = static_cast<int64_t>(c.shape_tokens->Value());
  usage.occupancy_points = static_cast<int64_t>(c.occupancy_points->Value());
  usage.mesh_bytes = static_cast<int64_t>(c.mesh_bytes->Value());
  usage.prompt_refusals = static_cast<int64_t>(c.prompt_refusals->Value());
  return usage;
}

std::string Metrics::exposition(bool per_key) const {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  if (!per_key) {
    // A family is per key when any of its series carries a "key" label: the API key's name.
    std::erase_if(families, [](const prometheus::MetricFamily& family) {
      return std::any_of(family.metric.begin(), family.metric.end(), [](const auto& metric) {
        return std::any_of(
            metric.label.begin(), metric.label.end(),
            [](const prometheus::ClientMetric::Label& label) { return label.name == "key"; });
      });
    });
  }
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace cube3d
