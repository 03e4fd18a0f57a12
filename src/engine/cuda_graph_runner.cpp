#include "cube3d/engine/cuda_graph_runner.h"

#include <ATen/ATen.h>
#include <spdlog/spdlog.h>

#include "cube3d/core/error.h"

#ifdef CUBE3D_WITH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <chrono>
#endif

namespace cube3d {

#ifdef CUBE3D_WITH_CUDA
namespace {

// Eager steps before capture, as torch.cuda.graph does: they create the cuBLAS workspace and
// the allocator's blocks on the capture stream so that capture itself allocates nothing new.
constexpr int kWarmupSteps = 3;

class CudaGraphDecodeRunner final : public DecodeRunner {
 public:
  CudaGraphDecodeRunner(const ShapeGpt& gpt, KvState cache, DecodeRunnerConfig config)
      : DecodeRunner(gpt, std::move(cache), config) {}

  void prepare() override {
    if (!graph_ || captured_mode_ != mode_) capture();
  }

  void step() override {
    prepare();
    graph_->replay();
  }

 private:
  void capture() {
    const auto start = std::chrono::steady_clock::now();
    const at::Device device = token_ids_.device();
    // The warm-up and capture steps run on scratch state: keep the real buffers' contents.
    const at::Tensor token_ids = token_ids_.clone();
    const at::Tensor positions = positions_.clone();
    const at::Tensor output_ids = output_ids_.clone();
    const bool any_sampling = plan_.any_sampling;
    // The graph always holds the top-p path; greedy rows pick the argmax inside it, so one graph
    // serves every mix of requests.
    plan_.any_sampling = true;
    const int64_t free_before = free_device_bytes(device);
    c10::cuda::device_synchronize();
    {
      const c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool(false, device.index());
      const c10::cuda::CUDAStreamGuard guard(stream);
      for (int i = 0; i < kWarmupSteps; ++i) {
        positions_.zero_();
        DecodeRunner::step();
      }
      positions_.zero_();
      graph_ = std::make_unique<at::cuda::CUDAGraph>();
      graph_->capture_begin();
      DecodeRunner::step();
      graph_->capture_end();
    }
    c10::cuda::device_synchronize();
    plan_.any_sampling = any_sampling;
    token_ids_.copy_(token_ids);
    positions_.copy_(positions);
    output_ids_.copy_(output_ids);
    captured_mode_ = mode_;
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    spdlog::info("captured the decode graph for {} requests ({} rows, {}): {:.0f} ms, {:.1f} MiB",
                 config_.batch, rows(), to_string(mode_), ms,
                 static_cast<double>(free_before - free_device_bytes(device)) / (1 << 20));
  }

  static int64_t free_device_bytes(const at::Device& device) {
    size_t free = 0, total = 0;
    const c10::cuda::CUDAGuard guard(device);
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) return 0;
    return static_cast<int64_t>(free);
  }

  std::unique_ptr<at::cuda::CUDAGraph> graph_;
  SingleStreamDecode captured_mode_ = SingleStreamDecode::kCausal;
};

}  // namespace

bool cuda_graphs_available() { return at::hasCUDA(); }

std::unique_ptr<DecodeRunner> make_cuda_graph_runner(const ShapeGpt& gpt, KvState cache,
                                                     DecodeRunnerConfig config) {
  if (!cuda_graphs_available()) {
    throw failed_precondition("CUDA graphs need a CUDA device; none is present");
  }
  if (!gpt.weights().wte.is_cuda()) {
    throw failed_precondition("CUDA graphs need the model on a CUDA device");
  }
  return std::make_unique<CudaGraphDecodeRunner>(gpt, std::move(cache), config);
}

#else  // built without the CUDA toolkit

bool cuda_graphs_available() { return false; }

std::unique_ptr<DecodeRunner> make_cuda_graph_runner(const ShapeGpt&, KvState, DecodeRunnerConfig) {
  throw failed_precondition("this build has no CUDA graph support (no CUDA toolkit at build time)");
}

#endif

}  // namespace cube3d
