// Google Benchmark's JSON layout (what a benchmark binary writes with --benchmark_format=json) of
// a cube3d-bench run, for the tools that read that layout unchanged: Google Benchmark's
// compare.py (Debian's libbenchmark-tools), github-action-benchmark, Bencher. bench/tpot_stats.py
// writes the very same layout from a --json file (bench/official_engine.py's section too), and
// tests/tools/test_bench_cli.py checks that the two agree.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace cube3d::bench {

// One benchmark per (mode, bucket, metric), named "<mode>/bucket:<B>/tokens:<T>/<metric>" with
// metric tpot, ttft or e2e: one "iteration" entry per timed sample (each decode step, or each
// run's mean step for graph-kv, whose "iterations" are then the steps it averages; each run's
// TTFT and end to end), then, with two samples or more, the aggregates mean, median, stddev and
// cv. Times in microseconds; cpu_time repeats real_time (no CPU time is measured). `bench` is
// the --json document (its "results" with their "samples", its "provenance"); the context
// carries the provenance as "cube3d".
nlohmann::json google_benchmark_json(const nlohmann::json& bench, const std::string& executable);

}  // namespace cube3d::bench
