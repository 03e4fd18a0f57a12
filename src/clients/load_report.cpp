#include "cube3d/clients/load_report.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "cube3d/core/enum_table.h"
#include "cube3d/core/error.h"

namespace cube3d {
namespace {

// printf into a std::string (the attribute keeps the compiler's format checks).
__attribute__((format(printf, 1, 2))) std::string format(const char* fmt, ...) {
  std::va_list args;
  va_start(args, fmt);
  std::va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, args);
  va_end(args);
  std::string out(static_cast<size_t>(std::max(n, 0)), '\0');
  std::vsnprintf(out.data(), out.size() + 1, fmt, again);
  va_end(again);
  return out;
}

std::string cell(const std::optional<double>& v) { return v ? format("%.1f", *v) : "-"; }

nlohmann::json json_of(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

nlohmann::json json_of(const LatencySummary& s) {
  return {{"count", s.count},      {"mean", json_of(s.mean)}, {"p50", json_of(s.p50)},
          {"p90", json_of(s.p90)}, {"p99", json_of(s.p99)},   {"max", json_of(s.max)}};
}

std::string describe_limits(const LoadConfig& c) {
  std::string out = c.max_requests ? format("%" PRIu64 " requests", c.max_requests)
                                   : std::string("no request limit");
  out += c.max_duration_s > 0 ? format(", %.3g s", c.max_duration_s) : ", no duration limit";
  return out + format("; warm-up %" PRIu64 "", c.warmup);
}

std::string describe_prompts(const LoadConfig& c) {
  std::string out =
      format("%zu from %s, mix ", c.prompt_count, c.prompts_source.c_str()) + c.prompt_mix.spec();
  if (c.prompt_mix.kind == PromptMix::Kind::kZipf) {
    out += format(" (draw seed %" PRIu64 ")", c.base_seed);
  }
  return out + (c.bypass_cache ? "; bypass_cache" : "");
}

nlohmann::json json_of(const PromptMix& mix, uint64_t draw_seed) {
  const bool zipf = mix.kind == PromptMix::Kind::kZipf;
  return {{"spec", mix.spec()},
          {"kind", zipf ? "zipf" : "fixed"},
          {"distinct", zipf ? nlohmann::json(mix.distinct) : nullptr},
          {"exponent", zipf ? nlohmann::json(mix.exponent) : nullptr},
          {"seed", zipf ? nlohmann::json(draw_seed) : nullptr}};
}

nlohmann::json json_of(const CacheCounts& c) {
  return {{"hit", c.hit},
          {"miss", c.miss},
          {"coalesced", c.coalesced},
          {"bypass", c.bypass},
          {"unknown", c.unknown}};
}

}  // namespace

void CacheCounts::add(CacheStatus status) {
  constexpr EnumTable<CacheStatus, uint64_t CacheCounts::*, 4> kCounters = {
      {{CacheStatus::kHit, &CacheCounts::hit},
       {CacheStatus::kMiss, &CacheCounts::miss},
       {CacheStatus::kCoalesced, &CacheCounts::coalesced},
       {CacheStatus::kBypass, &CacheCounts::bypass}}};
  ++(this->*lookup(kCounters, status).value_or(&CacheCounts::unknown));
}

std::optional<double> percentile(std::vector<double> samples, double p) {
  if (!(p >= 0.0 && p <= 1.0)) {
    throw invalid_argument("percentile: p must be in [0, 1], got " + std::to_string(p));
  }
  if (samples.empty()) return std::nullopt;
  std::sort(samples.begin(), samples.end());
  const double h = static_cast<double>(samples.size() - 1) * p;
  const auto lo = static_cast<size_t>(std::floor(h));
  if (lo + 1 >= samples.size()) return samples.back();
  return samples[lo] + (h - static_cast<double>(lo)) * (samples[lo + 1] - samples[lo]);
}

std::vector<double> poisson_schedule(double rate, uint64_t seed, uint64_t max_requests,
                                     double max_duration_s) {
  if (!(rate > 0.0) || !std::isfinite(rate)) {
    throw invalid_argument("the arrival rate must be positive and finite, got " +
                           std::to_string(rate));
  }
  if (max_requests == 0 && !(max_duration_s > 0.0)) {
    throw invalid_argument("an arrival schedule needs a request limit or a duration limit");
  }
  std::mt19937_64 rng(seed);
  std::vector<double> offsets;
  double t = 0.0;
  while (max_requests == 0 || offsets.size() < max_requests) {
    // u uniform in [0, 1) from the top 53 bits; -log(1 - u) / rate is Exp(rate) and finite.
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    t += -std::log1p(-u) / rate;
    if (max_duration_s > 0.0 && t >= max_duration_s) break;
    offsets.push_back(t);
  }
  return offsets;
}

LatencySummary summarize_latency(const std::vector<double>& samples_ms) {
  LatencySummary s;
  s.count = samples_ms.size();
  if (samples_ms.empty()) return s;
  s.mean = std::accumulate(samples_ms.begin(), samples_ms.end(), 0.0) /
           static_cast<double>(samples_ms.size());
  s.p50 = percentile(samples_ms, 0.50);
  s.p90 = percentile(samples_ms, 0.90);
  s.p99 = percentile(samples_ms, 0.99);
  s.max = *std::max_element(samples_ms.begin(), samples_ms.end());
  return s;
}

LoadReport summarize_run(const LoadConfig& config, const std::vector<RequestRecord>& records,
                         double wall_s) {
  LoadReport r;
  r.sent = records.size();
  r.wall_s = wall_s;
  std::vector<double> queue, ttft, e2e;
  double last_send_s = 0.0;
  for (const RequestRecord& rec : records) {
    last_send_s = std::max(last_send_s, rec.send_offset_s);
    if (rec.attempts > 1) {
      ++r.retried;
      r.extra_attempts += rec.attempts - 1;
    }
    if (rec.status != "OK") {
      ++r.errors[rec.status];
      continue;
    }
    ++r.ok;
    r.cache.add(rec.cache);
    e2e.push_back(rec.e2e_ms);
    if (rec.ttft_ms) ttft.push_back(*rec.ttft_ms);
    if (rec.queue_ms) queue.push_back(*rec.queue_ms);
  }
  // An open loop cut by --duration observed its arrival process over the whole duration (the
  // next arrival would have come later); one cut by --requests, up to its last arrival.
  const bool cut_by_duration =
      config.max_duration_s > 0 && (config.max_requests == 0 || r.sent < config.max_requests);
  const double send_window_s =
      !config.open_loop ? wall_s : (cut_by_duration ? config.max_duration_s : last_send_s);
  r.offered_rps = send_window_s > 0.0 ? static_cast<double>(r.sent) / send_window_s : 0.0;
  r.throughput_ok_rps = wall_s > 0.0 ? static_cast<double>(r.ok) / wall_s : 0.0;
  r.queue_ms = summarize_latency(queue);
  r.ttft_ms = summarize_latency(ttft);
  r.e2e_ms = summarize_latency(e2e);
  return r;
}

bool server_unreachable(const LoadReport& report) {
  const auto it = report.errors.find("UNAVAILABLE");
  return report.sent > 0 && it != report.errors.end() && it->second == report.sent;
}

std::string format_report_table(const LoadConfig& c, const LoadReport& r) {
  std::string out = "cube3d-loadgen against " + c.server + " over " + c.protocol + ": ";
  out += c.open_loop ? format("open loop, Poisson arrivals at %.3g req/s (seed %" PRIu64 ")",
                              c.rate_rps, c.arrival_seed)
                     : format("closed loop, concurrency %" PRIu64 "", c.concurrency);
  out += "\n  limits: " + describe_limits(c) + format("; deadline %" PRId64 " ms\n", c.deadline_ms);
  out += "  prompts: " + describe_prompts(c) + "\n";
  out += format("requests sent       %" PRIu64 "\n", r.sent);
  out += format("ok                  %" PRIu64 "\n", r.ok);
  uint64_t failed = 0;
  for (const auto& [code, n] : r.errors) failed += n;
  out += format("errors              %" PRIu64 "\n", failed);
  for (const auto& [code, n] : r.errors) {
    out += format("  %-19s %" PRIu64 "\n", code.c_str(), n);
  }
  out += format("retried             %" PRIu64 " (%" PRIu64 " more attempts)\n", r.retried,
                r.extra_attempts);
  out += format("wall time           %.3f s\n", r.wall_s);
  out += format("offered rate        %.3f req/s\n", r.offered_rps);
  out += format("throughput (ok)     %.3f req/s\n", r.throughput_ok_rps);
  out += format("cache (ok answers)  hit %" PRIu64 ", miss %" PRIu64 ", coalesced %" PRIu64
                ", bypass %" PRIu64 ", unknown %" PRIu64 "\n",
                r.cache.hit, r.cache.miss, r.cache.coalesced, r.cache.bypass, r.cache.unknown);
  out += std::string("\nlatency in ms over the OK requests; percentiles by ") + kPercentileMethod +
         "\n";
  out += format("%-10s %7s %10s %10s %10s %10s %10s\n", "", "count", "mean", "p50", "p90", "p99",
                "max");
  const auto row = [&](const char* name, const LatencySummary& s) {
    out +=
        format("%-10s %7zu %10s %10s %10s %10s %10s\n", name, s.count, cell(s.mean).c_str(),
               cell(s.p50).c_str(), cell(s.p90).c_str(), cell(s.p99).c_str(), cell(s.max).c_str());
  };
  row("queue_ms", r.queue_ms);
  row("ttft_ms", r.ttft_ms);
  row("e2e_ms", r.e2e_ms);
  return out;
}

std::string report_json(const LoadConfig& c, const LoadReport& r) {
  const auto limit = [](auto v) { return v ? nlohmann::json(v) : nlohmann::json(nullptr); };
  nlohmann::json request = {
      {"resolution_base", c.resolution_base ? nlohmann::json(*c.resolution_base) : nullptr},
      {"format", c.format ? nlohmann::json(*c.format) : nullptr},
      {"guidance_scale", json_of(c.guidance_scale)},
      {"top_p", json_of(c.top_p)},
      {"base_seed", c.base_seed},
      {"bypass_cache", c.bypass_cache}};
  nlohmann::json config = {{"protocol", c.protocol},
                           {"server", c.server},
                           {"mode", c.open_loop ? "open" : "closed"},
                           {"rate_rps", c.open_loop ? nlohmann::json(c.rate_rps) : nullptr},
                           {"arrival_seed", c.open_loop ? nlohmann::json(c.arrival_seed) : nullptr},
                           {"concurrency", c.open_loop ? nullptr : nlohmann::json(c.concurrency)},
                           {"max_requests", limit(c.max_requests)},
                           {"max_duration_s", limit(c.max_duration_s)},
                           {"warmup", c.warmup},
                           {"deadline_ms", c.deadline_ms},
                           {"prompts", {{"source", c.prompts_source}, {"count", c.prompt_count}}},
                           {"prompt_mix", json_of(c.prompt_mix, c.base_seed)},
                           {"request", request}};
  uint64_t failed = 0;
  for (const auto& [code, n] : r.errors) failed += n;
  const nlohmann::json doc = {
      {"tool", "cube3d-loadgen"},
      {"percentile_method", kPercentileMethod},
      {"config", config},
      {"requests",
       {{"sent", r.sent},
        {"ok", r.ok},
        {"failed", failed},
        {"errors", r.errors},
        {"retried", r.retried},
        {"extra_attempts", r.extra_attempts}}},
      {"wall_s", r.wall_s},
      {"offered_rps", r.offered_rps},
      {"throughput_ok_rps", r.throughput_ok_rps},
      {"cache_status", json_of(r.cache)},
      {"latency_ms",
       {{"queue", json_of(r.queue_ms)}, {"ttft", json_of(r.ttft_ms)}, {"e2e", json_of(r.e2e_ms)}}}};
  return doc.dump(2) + "\n";
}

std::string records_csv(const std::vector<RequestRecord>& records) {
  std::string out = "index,send_offset_s,status,ttft_ms,e2e_ms,queue_ms,cache,attempts\n";
  const auto opt = [](const std::optional<double>& v) { return v ? format("%.3f", *v) : ""; };
  for (const RequestRecord& rec : records) {
    // A failed request has no answer, so no cache status: empty, like its queue time.
    const char* cache = rec.status == "OK" ? cache_status_name(rec.cache) : "";
    out += format("%" PRIu64 ",%.6f,%s,%s,%.3f,%s,%s,%u\n", rec.index, rec.send_offset_s,
                  rec.status.c_str(), opt(rec.ttft_ms).c_str(), rec.e2e_ms,
                  opt(rec.queue_ms).c_str(), cache, rec.attempts);
  }
  return out;
}

}  // namespace cube3d
