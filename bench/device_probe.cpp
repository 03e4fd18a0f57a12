// The bench's device probes (device_probe.h).
#include "device_probe.h"

#include <ATen/DeviceAccelerator.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>
#include <thread>

namespace cube3d::bench {
namespace {

std::string trim_output(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  const size_t e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// One field of nvidia-smi's --query-gpu for a CUDA device: no CUDA header in this file (the CPU
// build has none), so the driver's own tool is asked. Empty when it gives nothing.
std::string nvidia_smi_field(const at::Device& device, const std::string& field) {
  const std::string command = "nvidia-smi --query-gpu=" + field + " --format=csv,noheader -i " +
                              std::to_string(device.index() < 0 ? 0 : device.index()) +
                              " 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return "";
  std::array<char, 256> line{};
  const bool got = std::fgets(line.data(), line.size(), pipe) != nullptr;
  pclose(pipe);
  return got ? trim_output(line.data()) : "";
}

std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return trim_output(line.substr(colon + 1));
    }
  }
  return "";
}

}  // namespace

void synchronize(const at::Device& device) {
  if (device.is_cuda()) at::accelerator::synchronizeDevice(device.index());
}

void reset_peak_memory(const at::Device& device) {
  if (device.is_cuda()) at::accelerator::resetPeakStats(device.index());
}
int64_t peak_memory_bytes(const at::Device& device) {
  if (device.is_cuda()) {
    const auto stats = at::accelerator::getDeviceStats(device.index());
    return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
        .peak;
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

std::string device_name(const at::Device& device) {
  return device.is_cuda() ? nvidia_smi_field(device, "name") : cpu_model_name();
}

std::string driver_version(const at::Device& device) {
  return device.is_cuda() ? nvidia_smi_field(device, "driver_version") : "";
}

nlohmann::json machine_facts() {
  std::array<char, 256> host{};
  if (gethostname(host.data(), host.size() - 1) != 0) host[0] = '\0';
  utsname uts{};
  const std::string os =
      uname(&uts) == 0
          ? std::string(uts.sysname) + " " + uts.release + " " + uts.machine
          : std::string();
  // The CPUs this process may run on (a container's cpuset), not the host's.
  cpu_set_t set;
  CPU_ZERO(&set);
  const int64_t cores = sched_getaffinity(0, sizeof(set), &set) == 0
                            ? CPU_COUNT(&set)
                            : static_cast<int64_t>(std::thread::hardware_concurrency());
  nlohmann::json load = nlohmann::json::array();
  std::ifstream loadavg("/proc/loadavg");
  for (int i = 0; i < 3; ++i) {
    double value = 0;
    if (!(loadavg >> value)) {
      load = nullptr;
      break;
    }
    load.push_back(value);
  }
  return {{"host", host.data()},
          {"os", os},
          {"cpu_model", cpu_model_name()},
          {"cpu_cores", cores},
          {"load_avg_at_start", load}};
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::array<char, 32> text{};
  std::strftime(text.data(), text.size(), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text.data();
}

}  // namespace cube3d::bench
