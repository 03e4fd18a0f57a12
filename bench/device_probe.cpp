// The bench's device probes (device_probe.h).
#include "device_probe.h"

#include <ATen/DeviceAccelerator.h>
#include <sys/resource.h>

#include <array>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>

namespace cube3d::bench {
namespace {

std::string trim_output(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  const size_t e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
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
  if (device.is_cuda()) {
    // No CUDA header in this file (the CPU build has none): ask the driver's tool.
    const std::string command = "nvidia-smi --query-gpu=name --format=csv,noheader -i " +
                                std::to_string(device.index()) + " 2>/dev/null";
    FILE* pipe = popen(command.c_str(), "r");
    if (pipe == nullptr) return "";
    std::array<char, 256> line{};
    const bool got = std::fgets(line.data(), line.size(), pipe) != nullptr;
    pclose(pipe);
    return got ? trim_output(line.data()) : "";
  }
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

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::array<char, 32> text{};
  std::strftime(text.data(), text.size(), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text.data();
}

}  // namespace cube3d::bench
