// What cube3d-bench asks of the machine itself, beside the engine: waiting for the device before
// a timestamp, peak memory, and the device's name and the date for the record. Its own file
// because it is the only part of the bench that differs between CPU and CUDA outside the engine,
// and it does so without any CUDA header (the CPU build has none).
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>

namespace cube3d::bench {

// Waits for every queued kernel on a CUDA device; nothing on the CPU.
void synchronize(const at::Device& device);

// CUDA: the caching allocator's peak of allocated bytes since the last reset (device-generic
// accelerator API, so the CPU build needs no CUDA header). CPU: the process's peak RSS, which
// only ever grows (ru_maxrss is in KiB on Linux).
void reset_peak_memory(const at::Device& device);
int64_t peak_memory_bytes(const at::Device& device);

// For the record only (results are named by GPU): best effort, empty when unknown.
std::string device_name(const at::Device& device);

// Now, as 2025-11-30T12:00:00Z.
std::string utc_now();

}  // namespace cube3d::bench
