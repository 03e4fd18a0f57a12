// Runs the Triton decode kernels' cubins (compiled ahead of time, triton_cubins.h) through the
// CUDA driver API, cuModuleLoadData and cuLaunchKernel, on the caller's stream, so that a CUDA
// graph being captured on it records them. The driver is reached through the runtime's entry
// points (cudaGetDriverEntryPointByVersion), never linked: every binary still starts on a
// machine without a GPU driver. In a build without the cubins (no CUDA, or no Triton at build
// time) nothing can be launched, and the lookups below find nothing.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "kernel_launch.h"
#include "triton_cubins.h"

namespace cube3d::kernels {

// True when this build embedded the cubins.
bool triton_cubins_compiled();

// The compiled variant of `launch` for a device of compute capability `capability` (e.g. 90,
// 86): the sm_90a cubin runs on 9.0 alone, the sm_80 one on any 8.x. Null when there is none.
const CompiledKernel* find_compiled(const KernelLaunch& launch, int capability);

// Why `launch`'s arguments do not fit `kernel`'s parameters: a name, the order or a type that
// differs (empty when they fit).
std::string signature_mismatch(const KernelLaunch& launch, const CompiledKernel& kernel);

// Loads the cubins `launches` use on the current CUDA device (each variant once per device, for
// the process's life) and binds every launch's arguments, so that a run costs one
// cuLaunchKernel per launch. Throws std::runtime_error naming the launch and what is missing: a
// build without cubins, a device no cubin was compiled for, a variant or signature that
// differs, a driver error.
std::unique_ptr<LaunchSequence> load_launches(std::span<const KernelLaunch> launches);

}  // namespace cube3d::kernels
