#include "cube3d/server/observability/process_metrics.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <string>
#include <utility>

namespace cube3d {
namespace {

// The whole of a (small, procfs) file, or nullopt when it cannot be read.
std::optional<std::string> read_small_file(const char* path) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text;
  char buffer[4096];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

template <typename Int>
std::optional<Int> parse_int(std::string_view token) {
  Int value{};
  const auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), value);
  if (ec != std::errc() || end != token.data() + token.size()) return std::nullopt;
  return value;
}

// The space-separated tokens of `text`.
std::vector<std::string_view> split_stat_fields(std::string_view text) {
  std::vector<std::string_view> fields;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\n')) ++i;
    const size_t start = i;
    while (i < text.size() && text[i] != ' ' && text[i] != '\n') ++i;
    if (i > start) fields.push_back(text.substr(start, i - start));
  }
  return fields;
}

// Entries of /proc/self/fd other than the one the listing itself holds open; nullopt when the
// directory cannot be read. opendir/readdir rather than std::filesystem: libtorch interposes some
// std::filesystem symbols.
std::optional<int64_t> count_open_fds() {
  DIR* const dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return std::nullopt;
  const std::string own = std::to_string(::dirfd(dir));
  int64_t count = 0;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string_view name = entry->d_name;
    if (name == "." || name == ".." || name == own) continue;
    ++count;
  }
  ::closedir(dir);
  return count;
}

prometheus::MetricFamily family(std::string name, std::string help, prometheus::MetricType type,
                                double value) {
  prometheus::MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  prometheus::ClientMetric metric;
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  f.metric.push_back(std::move(metric));
  return f;
}

void collect_into(std::vector<prometheus::MetricFamily>& out) {
  using prometheus::MetricType;
  const long ticks_per_second = ::sysconf(_SC_CLK_TCK);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  const auto stat_text = read_small_file("/proc/self/stat");
  const auto stat = stat_text ? parse_proc_stat(*stat_text) : std::nullopt;
  if (stat && ticks_per_second > 0) {
    const double ticks = static_cast<double>(ticks_per_second);
    out.push_back(family("process_cpu_seconds_total",
                         "Total user and system CPU time spent in seconds.", MetricType::Counter,
                         static_cast<double>(stat->utime_ticks + stat->stime_ticks) / ticks));
  }
  if (stat) {
    out.push_back(family("process_virtual_memory_bytes", "Virtual memory size in bytes.",
                         MetricType::Gauge, static_cast<double>(stat->vsize_bytes)));
  }
  if (stat && page_size > 0) {
    out.push_back(family("process_resident_memory_bytes", "Resident memory size in bytes.",
                         MetricType::Gauge,
                         static_cast<double>(stat->rss_pages) * static_cast<double>(page_size)));
  }
  if (stat && ticks_per_second > 0) {
    const auto system_stat = read_small_file("/proc/stat");
    const auto boot_time = system_stat ? parse_boot_time(*system_stat) : std::nullopt;
    if (boot_time) {
      const double start =
          static_cast<double>(*boot_time) +
          static_cast<double>(stat->starttime_ticks) / static_cast<double>(ticks_per_second);
      out.push_back(family("process_start_time_seconds",
                           "Start time of the process since unix epoch in seconds.",
                           MetricType::Gauge, start));
    }
  }
  if (const auto fds = count_open_fds()) {
    out.push_back(family("process_open_fds", "Number of open file descriptors.", MetricType::Gauge,
                         static_cast<double>(*fds)));
  }
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    out.push_back(family("process_max_fds", "Maximum number of open file descriptors.",
                         MetricType::Gauge, static_cast<double>(limit.rlim_cur)));
  }
  if (stat) {
    out.push_back(family("process_threads", "Number of OS threads in the process.",
                         MetricType::Gauge, static_cast<double>(stat->num_threads)));
  }
}

}  // namespace

std::optional<ProcStat> parse_proc_stat(std::string_view text) {
  const size_t close = text.rfind(')');
  if (close == std::string_view::npos) return std::nullopt;
  // fields[0] is field 3 (state) of proc(5); field N is fields[N - 3].
  const auto fields = split_stat_fields(text.substr(close + 1));
  const auto field = [&fields](size_t n) -> std::string_view {
    return n - 3 < fields.size() ? fields[n - 3] : std::string_view();
  };
  const auto utime = parse_int<uint64_t>(field(14));
  const auto stime = parse_int<uint64_t>(field(15));
  const auto num_threads = parse_int<int64_t>(field(20));
  const auto starttime = parse_int<uint64_t>(field(22));
  const auto vsize = parse_int<uint64_t>(field(23));
  const auto rss = parse_int<int64_t>(field(24));
  if (!utime || !stime || !num_threads || !starttime || !vsize || !rss) return std::nullopt;
  return ProcStat{.utime_ticks = *utime,
                  .stime_ticks = *stime,
                  .num_threads = *num_threads,
                  .starttime_ticks = *starttime,
                  .vsize_bytes = *vsize,
                  .rss_pages = *rss};
}

std::optional<int64_t> parse_boot_time(std::string_view proc_stat_text) {
  size_t line_start = 0;
  while (line_start < proc_stat_text.size()) {
    size_t line_end = proc_stat_text.find('\n', line_start);
    if (line_end == std::string_view::npos) line_end = proc_stat_text.size();
    const auto fields = split_stat_fields(proc_stat_text.substr(line_start, line_end - line_start));
    if (fields.size() == 2 && fields[0] == "btime") return parse_int<int64_t>(fields[1]);
    line_start = line_end + 1;
  }
  return std::nullopt;
}

std::vector<prometheus::MetricFamily> ProcessMetrics::Collect() const {
  std::vector<prometheus::MetricFamily> families;
  try {
    collect_into(families);
  } catch (...) {
    // Only allocation can throw here; serve what was gathered rather than fail the scrape.
  }
  return families;
}

std::vector<prometheus::MetricFamily> RegistryWithProcessMetrics::Collect() const {
  auto families = prometheus::Registry::Collect();
  auto process = process_.Collect();
  try {
    families.insert(families.end(), std::make_move_iterator(process.begin()),
                    std::make_move_iterator(process.end()));
  } catch (...) {
    // Out of memory: the registry's own families still go out.
  }
  return families;
}

std::shared_ptr<prometheus::Registry> make_registry_with_process_metrics() {
  return std::make_shared<RegistryWithProcessMetrics>();
}

}  // namespace cube3d
