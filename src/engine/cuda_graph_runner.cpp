#include "cube3d/engine/cuda_graph_runner.h"

#include <ATen/ATen.h>
#include <spdlog/spdlog.h>

#include "cube3d/core/error.h"
#include "cube3d/engine/graph_runner.h"

#ifdef CUBE3D_WITH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <vector>
#endif

namespace cube3d {

#ifdef CUBE3D_WITH_CUDA
namespace {

class CudaGraphDecodeRunner final : public GraphDecodeRunner {
 public:
  using GraphDecodeRunner::GraphDecodeRunner;
  const char* kind() const override { return "CUDA graph"; }

 protected:
  class GraphRecording final : public Recording {
   public:
    explicit GraphRecording(std::unique_ptr<at::cuda::CUDAGraph> graph)
        : graph_(std::move(graph)) {}
    // Launches on the caller's current stream.
    void replay() override { graph_->replay(); }

   private:
    std::unique_ptr<at::cuda::CUDAGraph> graph_;
  };

  std::unique_ptr<Recording> record(const std::function<void()>& reset,
                                    const std::function<void()>& step) override {
    const at::Device device = token_ids_.device();
    const c10::cuda::CUDAGuard device_guard(device);
    const int64_t free_before = free_device_bytes();
    c10::cuda::device_synchronize();
    auto graph = std::make_unique<at::cuda::CUDAGraph>();
    int64_t kernels = -1;
    {
      // Warm-ups and capture on a side stream, as torch.cuda.graph does, so that the caching
      // allocator's blocks they use belong to that stream and not to the legacy stream.
      const c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool(false, device.index());
      const c10::cuda::CUDAStreamGuard stream_guard(stream);
      for (int i = 0; i < kWarmupSteps; ++i) {
        reset();
        step();
      }
      reset();
      stream.synchronize();
      // Thread-local capture mode: other threads (the mesh workers) may keep using the GPU
      // while this thread captures; only this thread's unsafe calls would be refused.
      graph->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
      step();
      kernels = kernels_in_capture(stream.stream());
      graph->capture_end();
    }
    c10::cuda::device_synchronize();
    // The kernel count is the first thing to read against TPOT: a decode step of a few rows
    // is bound by how many kernels it runs (a few microseconds each even inside a graph)
    // long before it is bound by reading the weights.
    spdlog::info(
        "CUDA graph for batch {} ({} rows): {} kernels per decode step, {:.1f} MiB of "
        "device memory",
        config_.batch, rows(), kernels,
        static_cast<double>(free_before - free_device_bytes()) / (1 << 20));
    return std::make_unique<GraphRecording>(std::move(graph));
  }

 private:
  // Kernel nodes of the graph `stream` is capturing so far (-1 if the driver does not say).
  static int64_t kernels_in_capture(cudaStream_t stream) {
    cudaStreamCaptureStatus status{};
    cudaGraph_t building = nullptr;
    if (cudaStreamGetCaptureInfo(stream, &status, nullptr, &building) != cudaSuccess ||
        building == nullptr) {
      return -1;
    }
    size_t count = 0;
    if (cudaGraphGetNodes(building, nullptr, &count) != cudaSuccess) return -1;
    std::vector<cudaGraphNode_t> nodes(count);
    if (cudaGraphGetNodes(building, nodes.data(), &count) != cudaSuccess) return -1;
    int64_t kernels = 0;
    for (const cudaGraphNode_t node : nodes) {
      cudaGraphNodeType type{};
      if (cudaGraphNodeGetType(node, &type) == cudaSuccess && type == cudaGraphNodeTypeKernel) {
        ++kernels;
      }
    }
    return kernels;
  }

  static int64_t free_device_bytes() {
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) return 0;
    return static_cast<int64_t>(free);
  }
};

}  // namespace

bool cuda_graph_runner_compiled() { return true; }

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

bool cuda_graph_runner_compiled() { return false; }

bool cuda_graphs_available() { return false; }

std::unique_ptr<DecodeRunner> make_cuda_graph_runner(const ShapeGpt&, KvState, DecodeRunnerConfig) {
  throw failed_precondition("this build has no CUDA graph support (no CUDA toolkit at build time)");
}

#endif

}  // namespace cube3d
