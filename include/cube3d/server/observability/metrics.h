// Prometheus metrics: one registry, served at /metrics by the HTTP front door's server (on
// metrics_listen, and on http_listen); not by prometheus-cpp's exposer, whose civetweb threads
// have a stack too small for libtorch's static thread-local storage in any process that links
// it. Names follow Prometheus' conventions: base units (seconds, bytes), counters end in _total,
// the server's own under cube3d_, the process's under process_ (process_metrics.h).
#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace cube3d {

// cube3d_build_info's labels: what an operator groups dashboards and alerts by.
struct BuildInfo {
  std::string version;
  std::string revision;
  std::string device;  // cpu | cuda
  std::string dtype;   // float32 | bfloat16 | ...
};

class Metrics {
 public:
  explicit Metrics(const std::vector<int64_t>& buckets, const BuildInfo& build = {});
  ~Metrics();

  // One request's end, with the gRPC code its client saw (cube3d_requests_total{code}).
  void request_finished(const std::string& code);
  // A successful request's durations: end to end, waiting for its first decode step, meshing.
  void observe_request_seconds(double seconds);
  void observe_queue_seconds(double seconds);
  void observe_mesh_seconds(double seconds);
  // A decoded request's wait for a mesh thread (cube3d_mesh_wait_seconds); a mesh over the
  // mesh stage's budget (cube3d_mesh_budget_exceeded_total).
  void observe_mesh_wait_seconds(double seconds);
  void mesh_budget_exceeded();
  // Requests past the queue (text encoding, decoding, meshing) and those waiting for a batch.
  void request_running(int64_t delta);
  void set_queue_depth(int64_t depth);
  // A batch formed (static batching) or a decode step (continuous): its size, by bucket.
  void batch_started(int64_t bucket, int64_t jobs);
  void decode_step(int64_t bucket, int64_t slots) { batch_started(bucket, slots); }
  void observe_ttft_seconds(double seconds);
  void observe_tpot_seconds(double seconds);
  void tokens_generated(int64_t tokens);
  void set_model_load_seconds(double seconds);
  // Continuous batching: jobs that joined the running batch and their text encoding + prefill
  // time; the active slots.
  void jobs_admitted(int64_t jobs, double prefill_seconds);
  void set_active_slots(int64_t slots);

  // HTTP connections by listener ("http", "metrics"): opened, closed (by reason: client,
  // idle_timeout, header_timeout, body_timeout, write_timeout, refused_request, done,
  // server_stop) and refused at accept (max_connections, max_connections_per_client).
  void http_connection_opened(const std::string& listener);
  void http_connection_closed(const std::string& listener, const std::string& reason);
  void http_connection_refused(const std::string& listener, const std::string& reason);

  // The result cache: each cacheable answer's source (hit, miss, coalesced, bypass), the bytes
  // of mesh served from it, each tier's size (memory, disk), evictions, corrupt disk entries
  // found (and recomputed) and disk writes dropped behind a full write queue.
  void cache_answer(const std::string& result);
  void cache_hit_bytes(int64_t bytes);
  void set_cache_size(const std::string& tier, int64_t bytes, int64_t entries);
  void cache_eviction(const std::string& tier);
  void cache_corrupt_entry();
  void cache_write_dropped();
  // cube3d_cache_disk_tier_up: 1 when cache.dir's disk tier works, 0 when it is configured but
  // unusable (the memory tier serves alone).
  void set_cache_disk_tier(bool up);

  // Redis (redis.url: the shared job store and cache tier): each pipeline of commands by its
  // first command's name and outcome (ok: answered; error: timed out, refused, connection lost)
  // and its time (queued included), and whether Redis can be reached now.
  void redis_call(const std::string& command, double seconds, bool ok);
  void set_redis_up(bool up);
  // The shared cache tier's lookups (hit, miss, corrupt, error), and lookups that waited for
  // another replica's computation of the same key, by how they ended (hit, miss).
  void cache_redis_lookup(const std::string& result);
  void cache_redis_wait(bool hit);
  // Lapsed job leases handled by this replica: rerun (taken over), failed (past
  // jobs.max_takeovers), cancelled (a cancel came first).
  void job_takeover(const std::string& outcome);

  // A device fault (core/device_fault.h): the server stops serving and exits for a restart.
  void device_fault();

  // What a peer caused and the server refused before its service (core/peer_log.h), by door
  // (grpc, http) and kind (tls_handshake, protocol, refused): every one, whether its log line
  // was written or left out (cube3d_peer_errors_total).
  void peer_error(std::string_view door, std::string_view kind);
  // The server certificate's seconds until it expires, negative once it has
  // (cube3d_tls_certificate_expiry_seconds; only on a server with TLS).
  void set_tls_certificate_expiry_seconds(double seconds);

  // Jobs: those kept now, by state (queued, running, succeeded, failed, cancelled), their
  // results' bytes, and submissions by outcome (accepted, refused).
  void set_jobs(const std::string& state, int64_t count);
  void set_job_result_bytes(int64_t bytes);
  void job_submitted(bool accepted);

  // Usage by API key (its name: the keys file bounds the label's values; "" on a server without
  // keys; never by end user, whose ids are unbounded): requests by the code the core answered,
  // the shape tokens decoded and occupancy points evaluated on its behalf (work computed for
  // it; a cache hit or a coalesced answer costs none), the mesh bytes returned (the file, or
  // the raw arrays) and prompts the prompt policy refused. GET /v1/usage reads the same counters.
  struct KeyUsage {
    std::map<std::string, int64_t> requests_by_code;
    int64_t shape_tokens = 0;
    int64_t occupancy_points = 0;
    int64_t mesh_bytes = 0;
    int64_t prompt_refusals = 0;
  };
  void key_request(const std::string& key, const std::string& code);
  void key_work(const std::string& key, int64_t shape_tokens, int64_t occupancy_points);
  void key_mesh_bytes(const std::string& key, int64_t bytes);
  void key_prompt_refused(const std::string& key);
  KeyUsage key_usage(const std::string& key) const;

  // The Prometheus text exposition of the registry (what a scrape gets). Without `per_key`, the
  // families with a "key" label (API key names and what each key did) are left out: what the
  // API port's anonymous /metrics serves, so that no key's name or traffic reaches a stranger;
  // the metrics listener (for Prometheus) serves everything.
  std::string exposition(bool per_key = true) const;

  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Histogram* request_duration_;
  prometheus::Histogram* queue_duration_;
  prometheus::Histogram* mesh_duration_;
  prometheus::Histogram* mesh_wait_;
  prometheus::Counter* mesh_budget_exceeded_;
  prometheus::Gauge* running_;
  prometheus::Gauge* queue_depth_;
  std::map<int64_t, prometheus::Histogram*> batch_size_by_bucket_;
  prometheus::Histogram* ttft_;
  prometheus::Histogram* tpot_;
  prometheus::Counter* tokens_;
  prometheus::Gauge* model_load_;
  prometheus::Gauge* active_slots_;
  prometheus::Counter* admissions_;
  prometheus::Histogram* prefill_;
  prometheus::Family<prometheus::Gauge>* http_connections_;
  prometheus::Family<prometheus::Counter>* http_closed_;
  prometheus::Family<prometheus::Counter>* http_refused_;
  prometheus::Family<prometheus::Counter>* cache_answers_;
  prometheus::Counter* cache_hit_bytes_;
  prometheus::Family<prometheus::Gauge>* cache_bytes_;
  prometheus::Family<prometheus::Gauge>* cache_entries_;
  prometheus::Family<prometheus::Counter>* cache_evictions_;
  prometheus::Counter* cache_corrupt_;
  prometheus::Counter* cache_writes_dropped_;
  prometheus::Gauge* cache_disk_tier_up_;
  prometheus::Counter* device_faults_;
  prometheus::Family<prometheus::Counter>* peer_errors_;
  prometheus::Gauge* tls_certificate_expiry_ = nullptr;  // mutex_; made with TLS only
  prometheus::Family<prometheus::Counter>* redis_calls_;
  prometheus::Family<prometheus::Histogram>* redis_seconds_;
  std::map<std::string, prometheus::Histogram*> redis_seconds_by_command_;  // mutex_
  prometheus::Gauge* redis_up_;
  prometheus::Family<prometheus::Counter>* cache_redis_lookups_;
  prometheus::Family<prometheus::Counter>* cache_redis_waits_;
  prometheus::Family<prometheus::Counter>* job_takeovers_;
  prometheus::Family<prometheus::Gauge>* jobs_;
  prometheus::Gauge* job_result_bytes_;
  prometheus::Family<prometheus::Counter>* jobs_submitted_;
  // One key's counters, made at its first use.
  struct KeyCounters {
    std::map<std::string, prometheus::Counter*> requests_by_code;
    prometheus::Counter* shape_tokens = nullptr;
    prometheus::Counter* occupancy_points = nullptr;
    prometheus::Counter* mesh_bytes = nullptr;
    prometheus::Counter* prompt_refusals = nullptr;
  };
  KeyCounters& key_counters(const std::string& key);  // mutex_ held
  prometheus::Family<prometheus::Counter>* key_requests_;
  prometheus::Family<prometheus::Counter>* key_shape_tokens_;
  prometheus::Family<prometheus::Counter>* key_occupancy_points_;
  prometheus::Family<prometheus::Counter>* key_mesh_bytes_;
  prometheus::Family<prometheus::Counter>* prompt_refusals_;
  std::map<std::string, KeyCounters> keys_;
  mutable std::mutex mutex_;  // guards lazily created label children
};

}  // namespace cube3d
