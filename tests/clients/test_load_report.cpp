// cube3d-loadgen's pure parts: the percentile method on known data, the Poisson arrival
// schedule (deterministic by seed, the right mean gap, cut by the duration), and the report's
// counts, error codes and JSON.
#include "cube3d/clients/load_report.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "cube3d/core/error.h"

namespace cube3d {
namespace test_load_report {

RequestRecord ok_record(uint64_t index, double send_s, double ttft_ms, double e2e_ms,
                        double queue_ms, CacheStatus cache = CacheStatus::kUnknown) {
  return {.index = index,
          .send_offset_s = send_s,
          .status = "OK",
          .ttft_ms = ttft_ms,
          .e2e_ms = e2e_ms,
          .queue_ms = queue_ms,
          .cache = cache};
}

RequestRecord failed_record(uint64_t index, double send_s, const std::string& code, double e2e_ms) {
  return {.index = index,
          .send_offset_s = send_s,
          .status = code,
          .ttft_ms = std::nullopt,  // a failed request has no first token
          .e2e_ms = e2e_ms,
          .queue_ms = std::nullopt};
}

// --- percentiles -----------------------------------------------------------------------------

TEST(LoadReportPercentileTest, EmptyHasNone) {
  EXPECT_FALSE(percentile({}, 0.5).has_value());
  const LatencySummary s = summarize_latency({});
  EXPECT_EQ(s.count, 0u);
  EXPECT_FALSE(s.mean || s.p50 || s.p90 || s.p99 || s.max);
}

TEST(LoadReportPercentileTest, OneSampleIsEveryPercentile) {
  for (const double p : {0.0, 0.5, 0.9, 0.99, 1.0}) EXPECT_DOUBLE_EQ(*percentile({7.0}, p), 7.0);
}

TEST(LoadReportPercentileTest, TwoSamplesInterpolate) {
  // h = (n - 1) p = p: the value moves linearly from the first sample to the second.
  EXPECT_DOUBLE_EQ(*percentile({30.0, 10.0}, 0.0), 10.0);
  EXPECT_DOUBLE_EQ(*percentile({30.0, 10.0}, 0.5), 20.0);
  EXPECT_DOUBLE_EQ(*percentile({30.0, 10.0}, 0.9), 28.0);
  EXPECT_DOUBLE_EQ(*percentile({30.0, 10.0}, 0.99), 29.8);
  EXPECT_DOUBLE_EQ(*percentile({30.0, 10.0}, 1.0), 30.0);
}

TEST(LoadReportPercentileTest, MatchesNumpyLinearOnKnownData) {
  // numpy.percentile([1..10], [50, 90, 99]) == [5.5, 9.1, 9.91]; order does not matter.
  const std::vector<double> data = {10, 3, 7, 1, 9, 2, 8, 5, 4, 6};
  EXPECT_DOUBLE_EQ(*percentile(data, 0.5), 5.5);
  EXPECT_DOUBLE_EQ(*percentile(data, 0.9), 9.1);
  EXPECT_NEAR(*percentile(data, 0.99), 9.91, 1e-12);
  EXPECT_DOUBLE_EQ(*percentile(data, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(*percentile(data, 1.0), 10.0);
  // 101 samples 0..100: the p-quantile is exactly 100 p.
  std::vector<double> hundred(101);
  std::iota(hundred.begin(), hundred.end(), 0.0);
  EXPECT_DOUBLE_EQ(*percentile(hundred, 0.99), 99.0);
}

TEST(LoadReportPercentileTest, RejectsOutOfRange) {
  EXPECT_THROW(percentile({1.0}, -0.1), Error);
  EXPECT_THROW(percentile({1.0}, 1.5), Error);
  EXPECT_THROW(percentile({1.0}, std::nan("")), Error);
}

TEST(LoadReportPercentileTest, SummaryIsOrdered) {
  const LatencySummary s = summarize_latency({5, 1, 4, 2, 3});
  EXPECT_EQ(s.count, 5u);
  EXPECT_DOUBLE_EQ(*s.mean, 3.0);
  EXPECT_DOUBLE_EQ(*s.p50, 3.0);
  EXPECT_DOUBLE_EQ(*s.p90, 4.6);
  EXPECT_DOUBLE_EQ(*s.p99, 4.96);
  EXPECT_DOUBLE_EQ(*s.max, 5.0);
}

// --- arrival schedule ------------------------------------------------------------------------

TEST(LoadReportScheduleTest, DeterministicBySeed) {
  const auto a = poisson_schedule(5.0, 42, 100, 0);
  const auto b = poisson_schedule(5.0, 42, 100, 0);
  const auto c = poisson_schedule(5.0, 43, 100, 0);
  ASSERT_EQ(a.size(), 100u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_GT(a.front(), 0.0);  // the first arrival comes one gap after the start
  for (size_t i = 1; i < a.size(); ++i) EXPECT_GE(a[i], a[i - 1]);
}

TEST(LoadReportScheduleTest, MeanGapIsOneOverRate) {
  // 20000 exponential gaps: the mean's standard error is 1 / (rate sqrt(n)) = 0.7% of the mean,
  // so 5% is a loose bound that a correct generator never misses.
  const double rate = 4.0;
  const auto s = poisson_schedule(rate, 7, 20000, 0);
  ASSERT_EQ(s.size(), 20000u);
  const double mean_gap = s.back() / static_cast<double>(s.size());
  EXPECT_NEAR(mean_gap, 1.0 / rate, 0.05 / rate);
  // Exponential, not fixed: the gaps' standard deviation is about the mean too.
  double sq = 0, prev = 0;
  for (const double t : s) {
    sq += (t - prev - mean_gap) * (t - prev - mean_gap);
    prev = t;
  }
  EXPECT_NEAR(std::sqrt(sq / static_cast<double>(s.size())), 1.0 / rate, 0.1 / rate);
}

TEST(LoadReportScheduleTest, DurationCutsTheSchedule) {
  const auto full = poisson_schedule(10.0, 3, 1000, 0);
  const auto cut = poisson_schedule(10.0, 3, 1000, 5.0);
  ASSERT_FALSE(cut.empty());
  EXPECT_LT(cut.size(), full.size());
  EXPECT_LT(cut.back(), 5.0);
  // Same seed, same arrivals: the cut schedule is the full one's prefix before 5 s.
  for (size_t i = 0; i < cut.size(); ++i) EXPECT_DOUBLE_EQ(cut[i], full[i]);
  EXPECT_GE(full[cut.size()], 5.0);
  // Only the duration: about rate * duration arrivals (50 +- a generous 25).
  const auto only_duration = poisson_schedule(10.0, 3, 0, 5.0);
  EXPECT_EQ(only_duration, cut);
  EXPECT_NEAR(static_cast<double>(only_duration.size()), 50.0, 25.0);
  // The request limit cuts too, whichever comes first.
  EXPECT_EQ(poisson_schedule(10.0, 3, 4, 5.0).size(), 4u);
}

TEST(LoadReportScheduleTest, RejectsBadArguments) {
  EXPECT_THROW(poisson_schedule(0.0, 1, 10, 0), Error);
  EXPECT_THROW(poisson_schedule(-1.0, 1, 10, 0), Error);
  EXPECT_THROW(poisson_schedule(INFINITY, 1, 10, 0), Error);
  EXPECT_THROW(poisson_schedule(1.0, 1, 0, 0), Error);  // unbounded
}

// --- report ----------------------------------------------------------------------------------

LoadConfig open_config() {
  LoadConfig c;
  c.server = "127.0.0.1:50051";
  c.open_loop = true;
  c.rate_rps = 2.0;
  c.arrival_seed = 9;
  c.max_requests = 6;
  c.deadline_ms = 1000;
  c.prompts_source = "built-in";
  c.prompt_count = 10;
  c.resolution_base = 4;
  return c;
}

std::vector<RequestRecord> mixed_records() {
  return {ok_record(0, 0.5, 10, 100, 1, CacheStatus::kMiss),
          ok_record(1, 1.0, 20, 200, 2, CacheStatus::kHit),
          failed_record(2, 1.5, "DEADLINE_EXCEEDED", 1000),
          ok_record(3, 2.0, 30, 300, 3),
          failed_record(4, 2.5, "RESOURCE_EXHAUSTED", 5),
          failed_record(5, 3.0, "DEADLINE_EXCEEDED", 1000)};
}

TEST(LoadReportRunTest, CountsErrorsByCode) {
  const LoadReport r = summarize_run(open_config(), mixed_records(), 4.0);
  EXPECT_EQ(r.sent, 6u);
  EXPECT_EQ(r.ok, 3u);
  EXPECT_EQ(r.errors.size(), 2u);
  EXPECT_EQ(r.errors.at("DEADLINE_EXCEEDED"), 2u);
  EXPECT_EQ(r.errors.at("RESOURCE_EXHAUSTED"), 1u);
  EXPECT_EQ(r.errors.count("OK"), 0u);
  // Latencies over the OK requests only.
  EXPECT_EQ(r.e2e_ms.count, 3u);
  EXPECT_DOUBLE_EQ(*r.e2e_ms.max, 300.0);
  EXPECT_DOUBLE_EQ(*r.ttft_ms.p50, 20.0);
  EXPECT_DOUBLE_EQ(*r.queue_ms.mean, 2.0);
  // Open loop: offered = sent / last send offset; throughput = ok / wall.
  EXPECT_DOUBLE_EQ(r.offered_rps, 2.0);
  EXPECT_DOUBLE_EQ(r.throughput_ok_rps, 0.75);
  EXPECT_FALSE(server_unreachable(r));

  // Cut by --duration (fewer than --requests sent): the window is the whole duration.
  LoadConfig timed = open_config();
  timed.max_duration_s = 5.0;
  EXPECT_DOUBLE_EQ(summarize_run(timed, mixed_records(), 6.0).offered_rps, 6.0 / 3.0);
  timed.max_requests = 0;
  EXPECT_DOUBLE_EQ(summarize_run(timed, mixed_records(), 6.0).offered_rps, 6.0 / 5.0);

  LoadConfig closed = open_config();
  closed.open_loop = false;
  closed.concurrency = 2;
  EXPECT_DOUBLE_EQ(summarize_run(closed, mixed_records(), 4.0).offered_rps, 1.5);
}

TEST(LoadReportRunTest, UnreachableOnlyWhenEveryRequestIsUnavailable) {
  std::vector<RequestRecord> records = {failed_record(0, 0, "UNAVAILABLE", 1),
                                        failed_record(1, 0, "UNAVAILABLE", 1)};
  EXPECT_TRUE(server_unreachable(summarize_run(open_config(), records, 0.1)));
  records.push_back(ok_record(2, 0.1, 1, 2, 0));
  EXPECT_FALSE(server_unreachable(summarize_run(open_config(), records, 0.1)));
  EXPECT_FALSE(server_unreachable(summarize_run(open_config(), {}, 0.1)));
}

TEST(LoadReportRunTest, JsonHoldsTheNumbersAndTheConfig) {
  const LoadConfig config = open_config();
  const LoadReport r = summarize_run(config, mixed_records(), 4.0);
  const nlohmann::json j = nlohmann::json::parse(report_json(config, r));
  EXPECT_EQ(j.at("tool"), "cube3d-loadgen");
  EXPECT_EQ(j.at("percentile_method"), kPercentileMethod);

  const auto& c = j.at("config");
  EXPECT_EQ(c.at("protocol"), "grpc");  // the default
  EXPECT_EQ(c.at("server"), "127.0.0.1:50051");
  EXPECT_EQ(c.at("mode"), "open");
  EXPECT_DOUBLE_EQ(c.at("rate_rps").get<double>(), 2.0);
  EXPECT_EQ(c.at("arrival_seed"), 9);
  EXPECT_TRUE(c.at("concurrency").is_null());
  EXPECT_EQ(c.at("max_requests"), 6);
  EXPECT_TRUE(c.at("max_duration_s").is_null());
  EXPECT_EQ(c.at("warmup"), 0);
  EXPECT_EQ(c.at("deadline_ms"), 1000);
  EXPECT_EQ(c.at("prompts").at("count"), 10);
  EXPECT_EQ(c.at("request").at("resolution_base"), 4);
  EXPECT_TRUE(c.at("request").at("format").is_null());
  EXPECT_EQ(c.at("request").at("bypass_cache"), false);
  EXPECT_EQ(c.at("prompt_mix"), (nlohmann::json{{"spec", "fixed"},
                                                {"kind", "fixed"},
                                                {"distinct", nullptr},
                                                {"exponent", nullptr},
                                                {"seed", nullptr}}));
  // The OK answers by cache status; the failed ones have none.
  EXPECT_EQ(
      j.at("cache_status"),
      (nlohmann::json{{"hit", 1}, {"miss", 1}, {"coalesced", 0}, {"bypass", 0}, {"unknown", 1}}));

  const auto& req = j.at("requests");
  EXPECT_EQ(req.at("sent"), 6);
  EXPECT_EQ(req.at("ok"), 3);
  EXPECT_EQ(req.at("failed"), 3);
  EXPECT_EQ(req.at("errors").at("DEADLINE_EXCEEDED"), 2);
  EXPECT_EQ(req.at("errors").at("RESOURCE_EXHAUSTED"), 1);
  EXPECT_DOUBLE_EQ(j.at("wall_s").get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(j.at("offered_rps").get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j.at("throughput_ok_rps").get<double>(), 0.75);

  const auto& lat = j.at("latency_ms");
  for (const char* name : {"queue", "ttft", "e2e"}) {
    SCOPED_TRACE(name);
    for (const char* key : {"count", "mean", "p50", "p90", "p99", "max"}) {
      EXPECT_TRUE(lat.at(name).contains(key)) << key;
    }
  }
  EXPECT_EQ(lat.at("e2e").at("count"), 3);
  EXPECT_DOUBLE_EQ(lat.at("e2e").at("mean").get<double>(), 200.0);
  EXPECT_DOUBLE_EQ(lat.at("e2e").at("p50").get<double>(), 200.0);
  EXPECT_DOUBLE_EQ(lat.at("e2e").at("p90").get<double>(), 280.0);
  EXPECT_DOUBLE_EQ(lat.at("e2e").at("p99").get<double>(), 298.0);
  EXPECT_DOUBLE_EQ(lat.at("e2e").at("max").get<double>(), 300.0);
  EXPECT_DOUBLE_EQ(lat.at("ttft").at("p50").get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(lat.at("queue").at("max").get<double>(), 3.0);
}

TEST(LoadReportRunTest, JsonOfAnEmptyRunHasNullLatencies) {
  LoadConfig config = open_config();
  config.open_loop = false;
  config.concurrency = 3;
  const nlohmann::json j = nlohmann::json::parse(report_json(config, summarize_run(config, {}, 0)));
  EXPECT_EQ(j.at("config").at("mode"), "closed");
  EXPECT_EQ(j.at("config").at("concurrency"), 3);
  EXPECT_EQ(j.at("config").at("protocol"), "grpc");
  EXPECT_TRUE(j.at("config").at("rate_rps").is_null());
  EXPECT_EQ(j.at("requests").at("sent"), 0);
  EXPECT_TRUE(j.at("requests").at("errors").is_object());
  EXPECT_TRUE(j.at("requests").at("errors").empty());
  EXPECT_EQ(j.at("latency_ms").at("e2e").at("count"), 0);
  EXPECT_TRUE(j.at("latency_ms").at("e2e").at("p50").is_null());
}

TEST(LoadReportRunTest, TheProtocolIsInTheTableAndTheJson) {
  LoadConfig config = open_config();
  config.protocol = "http";
  config.server = "127.0.0.1:8080";
  const LoadReport r = summarize_run(config, mixed_records(), 4.0);
  EXPECT_EQ(nlohmann::json::parse(report_json(config, r)).at("config").at("protocol"), "http");
  EXPECT_NE(format_report_table(config, r).find("against 127.0.0.1:8080 over http: "),
            std::string::npos);
}

TEST(LoadReportRunTest, TableAndCsvShowTheNumbers) {
  const LoadConfig config = open_config();
  const auto records = mixed_records();
  const std::string table = format_report_table(config, summarize_run(config, records, 4.0));
  EXPECT_NE(table.find("against 127.0.0.1:50051 over grpc: open loop"), std::string::npos);
  EXPECT_NE(table.find("DEADLINE_EXCEEDED"), std::string::npos);
  EXPECT_NE(table.find("e2e_ms"), std::string::npos);
  EXPECT_NE(table.find("300.0"), std::string::npos);  // the e2e max
  EXPECT_NE(table.find(kPercentileMethod), std::string::npos);

  EXPECT_NE(table.find("cache (ok answers)  hit 1, miss 1, coalesced 0, bypass 0, unknown 1\n"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("  prompts: 10 from built-in, mix fixed\n"), std::string::npos) << table;

  const std::string csv = records_csv(records);
  EXPECT_EQ(csv.rfind("index,send_offset_s,status,ttft_ms,e2e_ms,queue_ms,cache,attempts\n", 0),
            0u);
  EXPECT_NE(csv.find("\n0,0.500000,OK,10.000,100.000,1.000,miss,1\n"), std::string::npos);
  EXPECT_NE(csv.find("\n1,1.000000,OK,20.000,200.000,2.000,hit,1\n"), std::string::npos);
  EXPECT_NE(csv.find("\n3,2.000000,OK,30.000,300.000,3.000,unknown,1\n"), std::string::npos);
  EXPECT_NE(csv.find("\n2,1.500000,DEADLINE_EXCEEDED,,1000.000,,,1\n"), std::string::npos);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 7);
}

TEST(LoadReportRunTest, CacheCountsCoverTheOkAnswers) {
  const std::vector<RequestRecord> records = {ok_record(0, 0.1, 1, 10, 0, CacheStatus::kMiss),
                                              ok_record(1, 0.2, 1, 2, 0, CacheStatus::kHit),
                                              ok_record(2, 0.3, 1, 2, 0, CacheStatus::kHit),
                                              ok_record(3, 0.4, 1, 9, 0, CacheStatus::kCoalesced),
                                              ok_record(4, 0.5, 1, 10, 0, CacheStatus::kBypass),
                                              ok_record(5, 0.6, 1, 10, 0, CacheStatus::kUnknown),
                                              failed_record(6, 0.7, "RESOURCE_EXHAUSTED", 1)};
  const LoadReport r = summarize_run(open_config(), records, 1.0);
  EXPECT_EQ(r.cache, (CacheCounts{.hit = 2, .miss = 1, .coalesced = 1, .bypass = 1, .unknown = 1}));
  EXPECT_EQ(r.cache.total(), r.ok);
  EXPECT_EQ(summarize_run(open_config(), {}, 0).cache, CacheCounts{});
}

TEST(LoadReportRunTest, TheZipfMixIsInTheConfig) {
  LoadConfig config = open_config();
  config.prompt_mix = parse_prompt_mix("zipf:50");
  config.prompt_count = 50;
  config.base_seed = 7;
  config.bypass_cache = true;
  const LoadReport r = summarize_run(config, mixed_records(), 4.0);
  const nlohmann::json c = nlohmann::json::parse(report_json(config, r)).at("config");
  EXPECT_EQ(c.at("prompt_mix"), (nlohmann::json{{"spec", "zipf:50:1"},
                                                {"kind", "zipf"},
                                                {"distinct", 50},
                                                {"exponent", 1.0},
                                                {"seed", 7}}));
  EXPECT_EQ(c.at("prompts").at("count"), 50);
  EXPECT_EQ(c.at("request").at("bypass_cache"), true);
  const std::string table = format_report_table(config, r);
  EXPECT_NE(table.find("  prompts: 50 from built-in, mix zipf:50:1 (draw seed 7); bypass_cache\n"),
            std::string::npos)
      << table;
}

}  // namespace test_load_report
}  // namespace cube3d
