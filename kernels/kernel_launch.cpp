#include "kernel_launch.h"

namespace cube3d::kernels {

const KernelArg* KernelLaunch::arg(const std::string& name) const {
  for (const KernelArg& a : args) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

LaunchCount count_launches(std::span<const KernelLaunch> launches) {
  LaunchCount count;
  for (const KernelLaunch& launch : launches) {
    ++count.launches;
    count.bytes_read += launch.bytes_read;
    count.bytes_written += launch.bytes_written;
    LaunchCount::Kernel& kernel = count.by_kernel[launch.kernel];
    ++kernel.launches;
    kernel.bytes_read += launch.bytes_read;
    kernel.bytes_written += launch.bytes_written;
  }
  return count;
}

}  // namespace cube3d::kernels
