// What cube3d-bench asks of the machine itself, beside the engine: waiting for the device before
// a timestamp, peak memory, and the device's name and the date for the record. Its own file
// because it is the only part of the bench that differs between CPU and CUDA outside the engine,
// and it does so without any CUDA header (the CPU build has none).
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <nlohmann/json.hpp>
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

// The GPU driver's version (nvidia-smi), for the record; empty on the CPU or when unknown.
std::string driver_version(const at::Device& device);

// The machine a run is made on, for its provenance (bench/README.md): host, os (uname -srm),
// cpu_model, cpu_cores (the CPUs this process may run on) and load_avg_at_start (/proc/loadavg's
// 1, 5 and 15 minute averages, read now: call it before the engine loads).
nlohmann::json machine_facts();

// Now, as 2025-11-30T12:00:00Z.
std::string utc_now();

}  // namespace cube3d::bench
