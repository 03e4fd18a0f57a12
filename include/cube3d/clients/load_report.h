// cube3d-loadgen's pure parts: the open-loop arrival schedule, the latency summary and the
// report (a table and JSON), the same for both protocols. No networking and no libtorch here,
// so the tests can drive them with made-up records and the tool stays torch-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cube3d/clients/cache_status.h"
#include "cube3d/clients/prompt_mix.h"

namespace cube3d {

// How percentiles are computed everywhere in the report: linear interpolation between the
// closest ranks (numpy's default "linear", Hyndman & Fan type 7). For n sorted samples x[0..n-1]
// and p in [0, 1]: h = (n - 1) p, value = x[floor h] + (h - floor h) (x[floor h + 1] - x[floor h]).
inline constexpr const char* kPercentileMethod =
    "linear interpolation between closest ranks (numpy 'linear', Hyndman-Fan type 7)";

// The p-quantile (p in [0, 1]) of `samples` (any order) by kPercentileMethod; nullopt when
// there are none. Throws invalid_argument for p outside [0, 1].
std::optional<double> percentile(std::vector<double> samples, double p);

// Send offsets (seconds from the start) of a Poisson arrival process with `rate` requests per
// second: exponential inter-arrival times (mean 1 / rate) drawn from std::mt19937_64 seeded with
// `seed`, the first arrival one gap after the start. Stops after `max_requests` arrivals (0: no
// limit) and before the first arrival at or beyond `max_duration_s` (0: no limit); at least one
// limit is required (invalid_argument otherwise, and for a rate that is not positive and
// finite). The gaps are computed by hand from the raw 64-bit draws (not with
// std::exponential_distribution, whose algorithm each standard library picks), so a seed gives
// the same schedule everywhere.
std::vector<double> poisson_schedule(double rate, uint64_t seed, uint64_t max_requests,
                                     double max_duration_s);

// The outcome of one measured request, as the client saw it.
struct RequestRecord {
  uint64_t index = 0;              // 0-based among the measured requests, in send order
  double send_offset_s = 0;        // when it was sent, from the start of the measured phase
  std::string status = "OK";       // the gRPC status code name: OK, DEADLINE_EXCEEDED, ...
  std::optional<double> ttft_ms;   // send -> the first DECODING progress event, when one came
  double e2e_ms = 0;               // send -> the final status
  std::optional<double> queue_ms;  // the server's Timings.queue_ms (OK requests only)
  CacheStatus cache = CacheStatus::kUnknown;  // what the answer said (OK requests only)
  uint32_t attempts = 1;                      // > 1: tried again after UNAVAILABLE (call_retry.h)
};

// mean, p50, p90, p99 and max of one latency; all nullopt when count is 0.
struct LatencySummary {
  size_t count = 0;
  std::optional<double> mean, p50, p90, p99, max;
};

LatencySummary summarize_latency(const std::vector<double>& samples_ms);

// What the run was asked to do; echoed in the table and the JSON.
struct LoadConfig {
  std::string protocol = "grpc";  // grpc or http (request_sender.h)
  std::string server;
  bool open_loop = false;      // true: --rate (Poisson arrivals); false: --concurrency
  double rate_rps = 0;         // open loop only
  uint64_t concurrency = 0;    // closed loop only
  uint64_t max_requests = 0;   // --requests (0: no limit)
  double max_duration_s = 0;   // --duration (0: no limit)
  uint64_t warmup = 0;         // requests sent before the measured phase
  uint64_t arrival_seed = 0;   // open loop only
  int64_t deadline_ms = 0;     // per-request deadline (gRPC's, or X-Request-Timeout-Ms)
  size_t prompt_count = 0;     // distinct prompts sent (fixed: cycled; Zipf: N)
  std::string prompts_source;  // a file, or "built-in"
  PromptMix prompt_mix;        // --prompt-mix; a Zipf draw is seeded with base_seed
  // The request fields; nullopt: left unset (the server's default).
  std::optional<int64_t> resolution_base;
  std::optional<std::string> format;
  std::optional<double> guidance_scale;
  std::optional<double> top_p;
  uint64_t base_seed = 0;     // fixed mix: request i (warm-up first) gets base_seed + i
  bool bypass_cache = false;  // --bypass-cache
};

// OK answers by where they came from in the server's result cache (cache_status.h).
struct CacheCounts {
  uint64_t hit = 0, miss = 0, coalesced = 0, bypass = 0, unknown = 0;
  void add(CacheStatus status);
  uint64_t total() const { return hit + miss + coalesced + bypass + unknown; }
  bool operator==(const CacheCounts&) const = default;
};

// The measured phase's numbers. Latencies cover the OK requests only (a failed request's time is
// how fast it failed, not how fast the server serves); ttft covers those that reported decoding.
struct LoadReport {
  uint64_t sent = 0;
  uint64_t ok = 0;
  std::map<std::string, uint64_t> errors;  // by gRPC status code name; never holds "OK"
  double wall_s = 0;  // start of the measured phase -> the last request's final status
  // The arrival rate actually offered. Open loop: sent / the send window, which is --duration
  // when that bound stopped the sending and the last send's offset otherwise (close to --rate
  // either way); closed loop: sent / wall_s (there the load follows the server). 0 when
  // undefined.
  double offered_rps = 0;
  double throughput_ok_rps = 0;  // ok / wall_s
  LatencySummary queue_ms, ttft_ms, e2e_ms;
  CacheCounts cache;     // over the OK requests (a failed one has no answer to say): total() == ok
  uint64_t retried = 0;  // requests that took more than one attempt
  uint64_t extra_attempts = 0;  // the attempts after the first, over every request
};

LoadReport summarize_run(const LoadConfig& config, const std::vector<RequestRecord>& records,
                         double wall_s);

// True when requests were sent and every one failed with UNAVAILABLE (nothing answered).
bool server_unreachable(const LoadReport& report);

// The human-readable report: configuration, counts, errors by code, rates, latency table.
std::string format_report_table(const LoadConfig& config, const LoadReport& report);

// The report as a JSON document (see README.md, "Load testing", for the schema).
std::string report_json(const LoadConfig& config, const LoadReport& report);

// One line per record: index,send_offset_s,status,ttft_ms,e2e_ms,queue_ms,cache (empty when
// absent; cache is hit, miss, coalesced, bypass or unknown on OK lines).
std::string records_csv(const std::vector<RequestRecord>& records);

}  // namespace cube3d
