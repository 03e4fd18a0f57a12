// The standard process metrics of the Prometheus client-library guidelines
// (process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
// process_start_time_seconds, process_open_fds, process_max_fds, process_threads), read from
// Linux's /proc/self at every scrape.
//
// prometheus-cpp 1.0 (Debian bookworm) has no Registry::Register for a foreign Collectable, but
// Registry::Collect is virtual: make_registry_with_process_metrics() gives a Registry that appends
// these families to its own, so that whatever serialises registry->Collect() (the metrics
// endpoint, Metrics::exposition) serves them too.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

namespace cube3d {

// The fields of /proc/self/stat (proc(5)) that the metrics need, in the file's units.
struct ProcStat {
  uint64_t utime_ticks = 0;      // field 14, clock ticks
  uint64_t stime_ticks = 0;      // field 15, clock ticks
  int64_t num_threads = 0;       // field 20
  uint64_t starttime_ticks = 0;  // field 22, clock ticks after boot
  uint64_t vsize_bytes = 0;      // field 23
  int64_t rss_pages = 0;         // field 24
};

// Parses the text of /proc/<pid>/stat. The command name (field 2) is in parentheses and may
// itself hold spaces and parentheses, so the fields are counted from after the LAST ')'.
// nullopt when the text does not have the fields or one is not a number.
std::optional<ProcStat> parse_proc_stat(std::string_view text);

// The boot time (the "btime" line of /proc/stat), in seconds since the Unix epoch; nullopt when
// absent or malformed.
std::optional<int64_t> parse_boot_time(std::string_view proc_stat_text);

// Reads /proc/self at every Collect(). Never throws: a value it cannot read is left out of that
// scrape (a scrape must not take the server down).
class ProcessMetrics : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override;
};

// A Registry whose Collect() returns its own families followed by ProcessMetrics'. Use it in
// place of std::make_shared<prometheus::Registry>(); metrics are built on it as on any Registry.
class RegistryWithProcessMetrics : public prometheus::Registry {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  ProcessMetrics process_;
};

std::shared_ptr<prometheus::Registry> make_registry_with_process_metrics();

}  // namespace cube3d
