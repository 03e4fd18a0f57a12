// The Triton decode kernels compiled ahead of time (kernels/build_cubins.py): each variant's
// cubin for one architecture, with the interface its launch needs. The CUDA build generates the
// table (triton_cubins.cpp in the build folder); nothing here needs CUDA's headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace cube3d::kernels {

// A kernel parameter's type: how a launch passes its value.
enum class ArgType { kPointer, kI32, kI64, kF32 };

struct KernelParam {
  const char* name;
  ArgType type;
};

struct CompiledKernel {
  const char* kernel;   // the @triton.jit function's name, e.g. "linear_kernel"
  const char* variant;  // its constexprs and dtype, sorted: "BLOCK_K=64,...,DTYPE=bf16"
  int capability;       // 90 (sm_90a: Hopper only) or 80 (sm_80: any 8.x)
  const unsigned char* cubin_begin;
  const unsigned char* cubin_end;
  const KernelParam* params;  // the run-time parameters in launch order (constexprs left out)
  size_t param_count;
  int num_warps;     // a program is num_warps * 32 threads
  int shared_bytes;  // dynamic shared memory per program
  int registers;     // per thread, as ptxas reported
  int spill_bytes;   // spill stores + loads per thread (0: none)
};

// Every compiled variant (empty where the build compiled none: no CUDA).
std::span<const CompiledKernel> compiled_kernels();

}  // namespace cube3d::kernels
