// Google Benchmark's JSON layout of a cube3d-bench run (gbench_json.h).
#include "gbench_json.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace cube3d::bench {
namespace {

// Microseconds, to the nanosecond: compare.py prints times with no decimals.
double ms_to_us(double ms) { return std::round(ms * 1e6) / 1e3; }

// Google Benchmark's own statistics (src/statistics.cc): the mean, the median (the middle
// value, or the mean of the two middle ones), the sample standard deviation (n - 1) and
// cv = stddev / mean.
struct GbenchAggregates {
  double mean = 0, median = 0, stddev = 0, cv = 0;
};

GbenchAggregates gbench_aggregates(std::vector<double> values) {
  GbenchAggregates a;
  const double n = static_cast<double>(values.size());
  double sum = 0;
  for (const double v : values) sum += v;
  a.mean = sum / n;
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  a.median = values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
  double squares = 0;
  for (const double v : values) squares += (v - a.mean) * (v - a.mean);
  a.stddev = std::sqrt(squares / (n - 1));
  a.cv = a.mean != 0 ? a.stddev / a.mean : 0;
  return a;
}

}  // namespace

nlohmann::json google_benchmark_json(const nlohmann::json& bench, const std::string& executable) {
  const nlohmann::json& prov = bench.value("provenance", nlohmann::json::object());
  nlohmann::json context = {
      {"date", bench.value("date", "")},
      {"host_name", prov.value("host", "")},
      {"executable", executable},
      {"num_cpus", prov.value("cpu_cores", 0)},
      {"mhz_per_cpu", 0},
      {"cpu_scaling_enabled", false},
      {"caches", nlohmann::json::array()},
      {"load_avg", prov.contains("load_avg_at_start") && prov["load_avg_at_start"].is_array()
                       ? prov["load_avg_at_start"]
                       : nlohmann::json::array()},
      {"library_build_type", prov.value("build_type", "") == "Debug" ? "debug" : "release"},
      {"cube3d", prov}};
  nlohmann::json benchmarks = nlohmann::json::array();
  int64_t family = 0;
  for (const nlohmann::json& r : bench.value("results", nlohmann::json::array())) {
    if (!r.contains("samples")) continue;
    const nlohmann::json& samples = r["samples"];
    const std::string prefix = r.value("mode", "?") + "/bucket:" +
                               std::to_string(r.value("bucket", 0)) + "/tokens:" +
                               std::to_string(r.value("tokens", 0)) + "/";
    // graph-kv's samples are each run's mean step: a sample stands for tokens - 1 steps.
    const int64_t per_sample =
        r.value("tpot_kind", "per_step") == "per_run_mean"
            ? std::max<int64_t>(1, r.value("tokens", int64_t{1}) - 1)
            : 1;
    const struct {
      const char* metric;
      const char* key;
      bool nested;
      int64_t iterations;
    } metrics[] = {{"tpot", "tpot_ms", true, per_sample},
                   {"ttft", "ttft_ms", false, 1},
                   {"e2e", "e2e_ms", false, 1}};
    for (const auto& m : metrics) {
      std::vector<double> values;
      for (const nlohmann::json& item : samples.value(m.key, nlohmann::json::array())) {
        if (m.nested) {
          for (const nlohmann::json& v : item) values.push_back(ms_to_us(v.get<double>()));
        } else {
          values.push_back(ms_to_us(item.get<double>()));
        }
      }
      if (values.empty()) continue;
      const std::string name = prefix + m.metric;
      const int64_t n = static_cast<int64_t>(values.size());
      const auto entry = [&](const std::string& entry_name, const char* run_type) {
        return nlohmann::json{{"name", entry_name},
                              {"family_index", family},
                              {"per_family_instance_index", 0},
                              {"run_name", name},
                              {"run_type", run_type},
                              {"repetitions", n},
                              {"threads", 1}};
      };
      for (int64_t i = 0; i < n; ++i) {
        nlohmann::json b = entry(name, "iteration");
        b["repetition_index"] = i;
        b["iterations"] = m.iterations;
        b["real_time"] = values[static_cast<size_t>(i)];
        b["cpu_time"] = values[static_cast<size_t>(i)];
        b["time_unit"] = "us";
        benchmarks.push_back(std::move(b));
      }
      if (n >= 2) {
        const GbenchAggregates a = gbench_aggregates(values);
        const std::pair<const char*, double> aggregates[] = {
            {"mean", a.mean}, {"median", a.median}, {"stddev", a.stddev}, {"cv", a.cv}};
        for (const auto& [aggregate, value] : aggregates) {
          nlohmann::json b = entry(name + "_" + aggregate, "aggregate");
          b["aggregate_name"] = aggregate;
          b["aggregate_unit"] = std::string(aggregate) == "cv" ? "percentage" : "time";
          b["iterations"] = n;
          b["real_time"] = value;
          b["cpu_time"] = value;
          b["time_unit"] = "us";
          benchmarks.push_back(std::move(b));
        }
      }
      ++family;
    }
  }
  return {{"context", std::move(context)}, {"benchmarks", std::move(benchmarks)}};
}

}  // namespace cube3d::bench
