// The scheduler's BatchExecutor over the shape pipeline. A batch runs text encoding and token
// generation on the scheduler's worker thread; each request's shape (latents, occupancy field,
// marching cubes, clean-up, encoding) then runs on a small pool of mesh threads, so the next
// batch can start decoding while the last one is meshed.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cube3d/pipeline/shape_pipeline.h"
#include "cube3d/scheduler/batch_executor.h"

namespace cube3d {

struct ExecutorOptions {
  SingleStreamDecode single_stream_decode = SingleStreamDecode::kCausal;
  int64_t progress_interval_tokens = 32;
  int64_t mesh_threads = 2;
  ShapeOptions shape;  // occupancy and mesh stages; a request's target_faces overrides
                       // shape.mesh.simplification's
  // Observers for metrics (may be empty).
  std::function<void(double ttft_ms, double tpot_ms, int64_t tokens)> on_generated;
};

class EngineExecutor final : public BatchExecutor {
 public:
  EngineExecutor(Engine& engine, ExecutorOptions options);
  ~EngineExecutor() override;  // finishes the queued mesh work, then joins the threads
  EngineExecutor(const EngineExecutor&) = delete;
  EngineExecutor& operator=(const EngineExecutor&) = delete;

  void execute(const std::vector<std::shared_ptr<Job>>& jobs, int64_t bucket) override;

  // Creates every bucket's decode runners and runs one small batch end to end, so that the
  // first client request pays for nothing. Called once before the server reports SERVING.
  void warm_up(const std::vector<int64_t>& buckets);

  // Waits until no mesh work is queued or running, at most `timeout`; returns whether idle.
  bool wait_idle(std::chrono::milliseconds timeout = std::chrono::hours(24));

 private:
  void mesh_worker();
  void post(std::function<void()> task);
  void finish_job(const std::shared_ptr<Job>& job, const at::Tensor& ids, JobResult result);

  ExecutorOptions options_;
  ShapePipeline pipeline_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> tasks_;
  int64_t busy_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace cube3d
