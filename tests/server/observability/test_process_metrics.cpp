// The standard Prometheus process metrics from /proc/self: names, types and help, values that
// follow the process (CPU time, open files, memory, start time), the /proc/self/stat parser on
// hostile command names, and the text exposition through a registry.
#include "cube3d/server/observability/process_metrics.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <prometheus/counter.h>
#include <prometheus/text_serializer.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace cube3d {
namespace test_process_metrics {

std::map<std::string, prometheus::MetricFamily> collect_by_name() {
  std::map<std::string, prometheus::MetricFamily> by_name;
  for (auto& family : ProcessMetrics().Collect()) by_name[family.name] = std::move(family);
  return by_name;
}

double value_of(const std::string& name) {
  const auto families = collect_by_name();
  const auto it = families.find(name);
  if (it == families.end() || it->second.metric.size() != 1) {
    ADD_FAILURE() << name << " missing";
    return std::nan("");
  }
  const auto& metric = it->second.metric.front();
  return it->second.type == prometheus::MetricType::Counter ? metric.counter.value
                                                            : metric.gauge.value;
}

double now_unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

TEST(ProcessMetrics, ReportsTheStandardFamilies) {
  using prometheus::MetricType;
  const std::map<std::string, std::pair<MetricType, std::string>> expected = {
      {"process_cpu_seconds_total",
       {MetricType::Counter, "Total user and system CPU time spent in seconds."}},
      {"process_resident_memory_bytes", {MetricType::Gauge, "Resident memory size in bytes."}},
      {"process_virtual_memory_bytes", {MetricType::Gauge, "Virtual memory size in bytes."}},
      {"process_start_time_seconds",
       {MetricType::Gauge, "Start time of the process since unix epoch in seconds."}},
      {"process_open_fds", {MetricType::Gauge, "Number of open file descriptors."}},
      {"process_max_fds", {MetricType::Gauge, "Maximum number of open file descriptors."}},
      {"process_threads", {MetricType::Gauge, "Number of OS threads in the process."}},
  };
  const auto families = collect_by_name();
  EXPECT_EQ(families.size(), expected.size());
  for (const auto& [name, type_and_help] : expected) {
    const auto it = families.find(name);
    ASSERT_NE(it, families.end()) << name;
    EXPECT_EQ(it->second.type, type_and_help.first) << name;
    EXPECT_EQ(it->second.help, type_and_help.second) << name;
    ASSERT_EQ(it->second.metric.size(), 1u) << name;
    EXPECT_TRUE(it->second.metric.front().label.empty()) << name;
  }
}

TEST(ProcessMetrics, CpuSecondsGrowWithWork) {
  const double before = value_of("process_cpu_seconds_total");
  EXPECT_GE(before, 0.0);
  // Burn CPU until the counter moves (clock ticks are 10 ms): at most a few seconds.
  volatile uint64_t sink = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  double after = before;
  while (after <= before && std::chrono::steady_clock::now() < deadline) {
    for (int i = 0; i < 5'000'000; ++i) sink = sink + static_cast<uint64_t>(i) * 2654435761u;
    after = value_of("process_cpu_seconds_total");
  }
  EXPECT_GT(after, before);
}

TEST(ProcessMetrics, OpenFdsCountAFileOpenedMeanwhile) {
  const double before = value_of("process_open_fds");
  EXPECT_GE(before, 3.0);  // stdin, stdout, stderr at least
  const int fd = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const double during = value_of("process_open_fds");
  ::close(fd);
  const double after = value_of("process_open_fds");
  EXPECT_EQ(during, before + 1);
  EXPECT_EQ(after, before);
  EXPECT_GE(value_of("process_max_fds"), during);
}

TEST(ProcessMetrics, MemoryThreadsAndStartTimeArePlausible) {
  const double rss = value_of("process_resident_memory_bytes");
  const double vsize = value_of("process_virtual_memory_bytes");
  EXPECT_GT(rss, 0.0);
  EXPECT_GE(vsize, rss);
  EXPECT_GE(value_of("process_threads"), 1.0);
  const double start = value_of("process_start_time_seconds");
  const double now = now_unix_seconds();
  EXPECT_LE(start, now + 1.0);  // ticks are coarse: allow rounding up to the next second
  EXPECT_GT(start, now - 24 * 3600.0);
}

// Expects `line` to parse, into the fields of `expected`.
void expect_parsed_stat(const std::string& line, const ProcStat& expected) {
  SCOPED_TRACE(line);
  const auto stat = parse_proc_stat(line);
  ASSERT_TRUE(stat.has_value());
  EXPECT_EQ(stat->utime_ticks, expected.utime_ticks);
  EXPECT_EQ(stat->stime_ticks, expected.stime_ticks);
  EXPECT_EQ(stat->num_threads, expected.num_threads);
  EXPECT_EQ(stat->starttime_ticks, expected.starttime_ticks);
  EXPECT_EQ(stat->vsize_bytes, expected.vsize_bytes);
  EXPECT_EQ(stat->rss_pages, expected.rss_pages);
}

TEST(ProcessMetrics, ParsesStatWithAHostileCommandName) {
  // A real line's layout (proc(5)), with a comm holding spaces and both parentheses.
  const std::string line =
      "4242 (x (y)) z) S 1 4242 4242 0 -1 4194560 1234 0 5 0 "
      "731 129 0 0 20 0 17 0 99887 123456789 4321 18446744073709551615 1 1 0 0 0 0 0 4096 "
      "17410 0 0 0 17 3 0 0 0 0 0\n";
  expect_parsed_stat(line, {731, 129, 17, 99887, 123456789, 4321});

  // The brief's name "a) b (c": a ')' inside, no ')' at its end.
  expect_parsed_stat("7 (a) b (c) R 1 7 7 0 -1 0 0 0 0 0 10 20 0 0 20 0 3 0 500 4096 2 0\n",
                     {10, 20, 3, 500, 4096, 2});
}

TEST(ProcessMetrics, ParsesTheRealStatFile) {
  const int fd = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  char buffer[2048];
  const ssize_t n = ::read(fd, buffer, sizeof buffer);
  ::close(fd);
  ASSERT_GT(n, 0);
  const auto stat = parse_proc_stat(std::string_view(buffer, static_cast<size_t>(n)));
  ASSERT_TRUE(stat.has_value());
  EXPECT_GT(stat->rss_pages, 0);
  EXPECT_GE(stat->num_threads, 1);
}

TEST(ProcessMetrics, RejectsMalformedStat) {
  EXPECT_EQ(parse_proc_stat(""), std::nullopt);
  EXPECT_EQ(parse_proc_stat("12 (no closing paren S 1 2 3"), std::nullopt);
  EXPECT_EQ(parse_proc_stat("12 (short) S 1 2 3 4 5 6 7 8 9 10 11"), std::nullopt);
  EXPECT_EQ(parse_proc_stat("1 (x) S 1 1 1 0 -1 0 0 0 0 0 1x 2 0 0 20 0 1 0 5 6 7 0"),
            std::nullopt);
  // A ')' after the fields would cut them off: the parser must not find numbers there.
  EXPECT_EQ(parse_proc_stat("1 (x) S 1 1 1 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 5 6 7 0 )"),
            std::nullopt);
}

TEST(ProcessMetrics, ParsesBootTime) {
  EXPECT_EQ(parse_boot_time("cpu  1 2 3\nintr 5 6\nbtime 1700000000\nprocesses 9\n"), 1700000000);
  EXPECT_EQ(parse_boot_time("btime 42"), 42);
  EXPECT_EQ(parse_boot_time("cpu 1 2\nprocesses 9\n"), std::nullopt);
  EXPECT_EQ(parse_boot_time("btime soon\n"), std::nullopt);
  EXPECT_EQ(parse_boot_time(""), std::nullopt);
}

TEST(ProcessMetrics, RegistryServesItsOwnAndTheProcessFamilies) {
  const auto registry = make_registry_with_process_metrics();
  prometheus::BuildCounter()
      .Name("cube3d_test_total")
      .Help("A metric of the registry itself")
      .Register(*registry)
      .Add({})
      .Increment(3);
  const std::string text = prometheus::TextSerializer().Serialize(registry->Collect());
  EXPECT_NE(text.find("# TYPE cube3d_test_total counter\ncube3d_test_total 3"), std::string::npos)
      << text;
  EXPECT_NE(text.find("# HELP process_cpu_seconds_total Total user and system CPU time spent in "
                      "seconds.\n# TYPE process_cpu_seconds_total counter\n"
                      "process_cpu_seconds_total "),
            std::string::npos)
      << text;
  for (const char* gauge :
       {"process_resident_memory_bytes", "process_virtual_memory_bytes",
        "process_start_time_seconds", "process_open_fds", "process_max_fds", "process_threads"}) {
    EXPECT_NE(text.find(std::string("# TYPE ") + gauge + " gauge\n" + gauge + " "),
              std::string::npos)
        << gauge;
  }
}

}  // namespace test_process_metrics
}  // namespace cube3d
