// One launch of a Triton kernel as data (which kernel and variant, its grid, its arguments by
// name, the bytes it moves), and what runs a list of them: the driver on a GPU
// (triton_launcher.h) or, anywhere, the recording mode below, which launches nothing and counts.
// Nothing here needs CUDA or libtorch.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "triton_cubins.h"

namespace cube3d::kernels {

struct KernelArg {
  std::string name;  // the kernel's parameter name (kernels/decode_kernels.py)
  ArgType type = ArgType::kPointer;
  const void* pointer = nullptr;  // kPointer
  int64_t integer = 0;            // kI32, kI64
  float real = 0.f;               // kF32
};

struct KernelLaunch {
  std::string kernel;   // the @triton.jit function, e.g. "linear_kernel"
  std::string variant;  // its constexprs and dtype, as kernels/build_cubins.py names them
  std::string label;    // what it computes, for messages: "block 3: qkv"
  std::array<uint32_t, 3> grid = {1, 1, 1};
  std::vector<KernelArg> args;  // every run-time parameter, in the kernel's order
  // What the launch moves through device memory, every distinct byte once (weights,
  // activations, and a block's KV cache at every slot: the last position's step).
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;

  const KernelArg* arg(const std::string& name) const;
};

// Launches and bytes of a list of launches, in total and per kernel.
struct LaunchCount {
  struct Kernel {
    int64_t launches = 0;
    int64_t bytes_read = 0;
    int64_t bytes_written = 0;
  };
  int64_t launches = 0;
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  std::map<std::string, Kernel> by_kernel;
};
LaunchCount count_launches(std::span<const KernelLaunch> launches);

// A decode step's launches, ready to run again and again (each step, each graph capture).
class LaunchSequence {
 public:
  virtual ~LaunchSequence() = default;
  // Enqueues every launch in order on `stream` (a cudaStream_t). Throws std::runtime_error
  // naming the launch when the driver refuses one.
  virtual void run(void* stream) = 0;
  // What one run launches.
  virtual const LaunchCount& per_run() const = 0;
};

// The recording mode: run() launches nothing and counts the runs, so a step's launches and the
// bytes each kernel reads can be pinned without a GPU.
class RecordedLaunches final : public LaunchSequence {
 public:
  explicit RecordedLaunches(std::span<const KernelLaunch> launches)
      : per_run_(count_launches(launches)) {}
  void run(void* /*stream*/) override { ++runs_; }
  const LaunchCount& per_run() const override { return per_run_; }
  int64_t runs() const { return runs_; }

 private:
  LaunchCount per_run_;
  int64_t runs_ = 0;
};

}  // namespace cube3d::kernels
