// Device faults: the accelerator itself failed during a step (an illegal memory access, an
// uncorrectable ECC error, a device-side assert, a failed kernel launch). Unlike an ordinary
// per-request error (a bad mesh, an allocation that fails for one request, a validation error),
// it leaves the CUDA context unusable for every later request of the process, so the server
// fails the step's requests INTERNAL, stops serving and exits with kExitDeviceFault for its
// orchestrator to restart it (scheduler.h, server_main.cpp, README "Device faults").
//
// The rule: an exception is a device fault when
//   - it is a DeviceFault (thrown by the executor's thin check around the engine's device work,
//     or by the test-only fault injection), or
//   - it escapes device work (prefill, a decode step, the occupancy query) on a CUDA device and
//     its text is one that CUDA's runtime, cuBLAS or cuDNN gives a failed device
//     (is_device_error_text below: libtorch's c10::Error / c10::AcceleratorError say "CUDA
//     error: ..."; a kernel launch checked with cudaGetErrorString names the error itself).
// On the CPU nothing is a device fault except the injected one. Running out of device memory is
// not one: it fails one allocation, for one request, and the context stays usable.
//
// Header-only and torch-free: the scheduler, the engine's callers and the server all read it.
#pragma once

#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <string_view>

#include "cube3d/core/error.h"

namespace cube3d {

// The exit status of a server that stopped because its device failed: sysexits.h' EX_SOFTWARE,
// distinct from 0 (a drain after SIGTERM), 1 and 2 (start-up errors), so that an orchestrator
// (and its alerts) can tell a restart for a broken device from any other.
inline constexpr int kExitDeviceFault = 70;

class DeviceFault : public Error {
 public:
  // `stage`: what the device was doing ("decoding", "prefill", "meshing"); `detail`: the device's
  // own words (e.g. "CUDA error: an illegal memory access was encountered").
  DeviceFault(const std::string& stage, const std::string& detail)
      : Error(ErrorCode::kInternal, "the device failed during " + stage + " (" + detail +
                                        "); this replica is restarting"),
        stage_(stage),
        detail_(detail) {}

  const std::string& stage() const noexcept { return stage_; }
  const std::string& detail() const noexcept { return detail_; }

 private:
  std::string stage_;
  std::string detail_;
};

namespace device_fault_detail {

inline bool contains_ignoring_case(std::string_view text, std::string_view word) {
  return std::search(text.begin(), text.end(), word.begin(), word.end(), [](char a, char b) {
           return std::tolower(static_cast<unsigned char>(a)) ==
                  std::tolower(static_cast<unsigned char>(b));
         }) != text.end();
}

}  // namespace device_fault_detail

// Whether `what` (an exception's text) says that the CUDA device failed; see the rule above.
// Only meaningful for work that ran on a CUDA device.
inline bool is_device_error_text(std::string_view what) {
  using device_fault_detail::contains_ignoring_case;
  // One allocation failed; the device is fine (c10::OutOfMemoryError, "CUDA error: out of
  // memory" from a raw cudaMalloc, cuBLAS's workspace).
  if (contains_ignoring_case(what, "out of memory") ||
      contains_ignoring_case(what, "CUBLAS_STATUS_ALLOC_FAILED")) {
    return false;
  }
  static constexpr std::array<std::string_view, 14> kMarkers = {
      "CUDA error",  // c10::Error / c10::AcceleratorError from C10_CUDA_CHECK
      "cudaError",
      "CUDA driver error",
      "illegal memory access",
      "illegal address",
      "illegal instruction",
      "misaligned address",
      "unspecified launch failure",
      "device-side assert",
      "uncorrectable ECC",
      "ECC error",
      "CUBLAS_STATUS_EXECUTION_FAILED",
      "CUDNN_STATUS_EXECUTION_FAILED",
      "GPU has fallen off the bus",
  };
  return std::any_of(kMarkers.begin(), kMarkers.end(),
                     [&](std::string_view marker) { return contains_ignoring_case(what, marker); });
}

// The first line of `what`, at most 300 bytes: libtorch's messages carry a C++ backtrace after
// the first line, which belongs in no client's error message.
inline std::string device_error_summary(std::string_view what) {
  const size_t end = std::min(what.find('\n'), static_cast<size_t>(300));
  return std::string(what.substr(0, end));
}

}  // namespace cube3d
