// The decode step through the Triton kernels (kernels/decode_kernels.py, compiled ahead of time
// into the CUDA build; decode_kernels: triton): one decode runner's workspace and its launch
// plans (kernels/decode_plan.h), one per single-stream mode, bound to the model's weights, the
// runner's static buffers and its rows of the KV cache. Nothing moves after construction, so a
// CUDA graph captures the launches like any other kernel. Where the kernels and the engine meet:
// the model stays pure forward math and the kernels know nothing of libtorch.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "cube3d/core/model_config.h"
#include "cube3d/model/kv_state.h"
#include "cube3d/model/shape_gpt.h"

namespace cube3d {

// A step's kernel launches and the bytes they move through device memory, every distinct byte
// once, a block's KV cache at every slot (the last position's step): kernels/kernel_launch.h.
struct DecodeLaunchCount {
  struct Kernel {
    int64_t launches = 0;
    int64_t bytes_read = 0;
    int64_t bytes_written = 0;
  };
  int64_t launches = 0;
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  std::map<std::string, Kernel> by_kernel;  // "linear_kernel" -> ...
};

// The runner's static buffers the kernels read.
struct TritonDecodeInputs {
  at::Tensor token_ids;  // [B] int64: the token fed to each request
  at::Tensor positions;  // [B] int64: its shape position
  at::Tensor guidance;   // [B] float64: its guidance scale
};

// True when this build embedded the kernels' cubins (the CUDA build, with Triton at build time).
bool triton_kernels_compiled();

// Why decode_kernels: triton cannot decode `config` in `dtype` on `device` for batches of up to
// `max_batch` requests (2 rows each with guidance); nullopt when it can.
std::optional<std::string> triton_decode_unavailable(const GptConfig& config, at::ScalarType dtype,
                                                     const at::Device& device, int64_t max_batch);

class TritonDecodeStep {
 public:
  // `cache` holds the runner's rows; batch B requests, 2B rows with cfg. record: the recording
  // mode (kernels/kernel_launch.h RecordedLaunches): run() launches nothing, on any device, and
  // the plans are laid out for an H100's 132 multiprocessors. Otherwise the kernels launch on
  // the model's CUDA device: failed_precondition when that cannot be (triton_decode_unavailable).
  TritonDecodeStep(const ShapeGpt& gpt, const KvState& cache, TritonDecodeInputs inputs,
                   int64_t batch, bool cfg, int64_t total_tokens, bool record);
  ~TritonDecodeStep();
  TritonDecodeStep(const TritonDecodeStep&) = delete;
  TritonDecodeStep& operator=(const TritonDecodeStep&) = delete;

  // Enqueues one step in `mode` on the current CUDA stream: every block's new key and value go
  // into the cache, and the guided logits [B, C] float32 into the tensor returned (a workspace
  // buffer, the same one every call). The first run in a mode loads its cubins, so it must not
  // be the one a graph captures (the graph runner's warm-up steps come first).
  const at::Tensor& run(SingleStreamDecode mode);

  // What one run in `mode` launches, and (recording mode) how many runs were recorded.
  DecodeLaunchCount count(SingleStreamDecode mode) const;
  int64_t recorded_runs() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cube3d
