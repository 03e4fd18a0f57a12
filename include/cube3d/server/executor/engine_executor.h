// The scheduler's BatchExecutor over the shape pipeline. Token generation runs on the
// scheduler's worker thread: a whole static batch in execute(), or, in continuous mode, the
// joiners' text encoding and prefill in admit() and one token for every slot in step(). Each
// request's shape (latents, occupancy field, marching cubes, clean-up, encoding) then runs on a
// small pool of mesh threads, so decoding goes on while finished requests are meshed.
//
// Device faults (core/device_fault.h): on a CUDA device, an exception from the device work of
// admit() (text encoding, prefill), step() / execute() (decoding) or the mesh stage (the
// occupancy query) whose text says the device failed becomes a DeviceFault. From admit, step
// and execute it goes to the scheduler (which fails the slots and stops admitting); from a mesh
// thread it fails that task and goes to ExecutorOptions::on_device_fault. On the CPU only the
// test-only fault injection below makes one.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cube3d/core/device_fault.h"
#include "cube3d/pipeline/shape_pipeline.h"
#include "cube3d/scheduler/batch_executor.h"
#include "cube3d/server/work/work_request.h"
#include "cube3d/server/work/work_result.h"

namespace cube3d {

// TEST ONLY: faults the executor makes on purpose, so that tests can prove what the server does
// with a device fault and with an ordinary per-request error without breaking a GPU. Set only by
// the environment variable below (read by cube3d-server at start, which logs a warning when it is
// set); no config key and nothing in a request reaches it. Counts are from 1; 0 is off.
inline constexpr const char* kFaultInjectionEnv = "CUBE3D_FAULT_INJECTION";
struct FaultInjection {
  // The N-th decode step (continuous batching; static batching counts each batch as one step)
  // throws a DeviceFault before it runs, as an illegal memory access would.
  int64_t device_fault_at_step = 0;
  // The N-th task to reach the mesh stage meets a DeviceFault there (its occupancy query).
  int64_t device_fault_at_mesh = 0;
  // The N-th task to reach the mesh stage fails there with an ordinary error (INTERNAL "mesh
  // stage failed: ..."): one request fails, the server goes on serving.
  int64_t mesh_error_at_request = 0;
  bool any() const {
    return device_fault_at_step > 0 || device_fault_at_mesh > 0 || mesh_error_at_request > 0;
  }
  bool operator==(const FaultInjection&) const = default;
};
// Parses "device_fault_at_step:N,mesh_error_at_request:M,device_fault_at_mesh:K" (any subset,
// comma-separated, N >= 1); "" is none. invalid_argument naming CUBE3D_FAULT_INJECTION and the
// part at fault otherwise.
FaultInjection parse_fault_injection(std::string_view spec);

struct ExecutorOptions {
  SingleStreamDecode single_stream_decode = SingleStreamDecode::kCausal;
  // Continuous mode: the decode buckets (the scheduler's batch_buckets); empty: the engine's
  // max_batch alone.
  std::vector<int64_t> batch_buckets;
  // Decoding progress is reported every this many tokens (static) or steps (continuous: all
  // slots at once, so that a GPU waits for its queued work once per interval, not per slot).
  int64_t progress_interval_tokens = 32;
  // Objects meshed at once (the server resolves its config's 0 to the machine's cores): each
  // one's marching cubes and post-processing use every core through the mesh layer's shared
  // pool, so as many threads as cores keep a decoded request from waiting while cores idle.
  int64_t mesh_threads = 2;
  // What every mesh file records of how it was made (provenance), besides its request.
  std::string model_name;
  std::string weights_digest;
  std::string server_version;
  ShapeOptions shape;  // occupancy and mesh stages; a request's target_faces overrides
                       // shape.mesh.simplification's
  // Observers for metrics (may be empty).
  std::function<void(double ttft_ms, double tpot_ms, int64_t tokens)> on_generated;
  // Continuous mode: tasks that joined and their text encoding + prefill time; every decode
  // step's bucket and the slots it ran; the active slots whenever they change.
  std::function<void(int64_t tasks, double prefill_ms)> on_admitted;
  std::function<void(int64_t bucket, int64_t slots)> on_step;
  std::function<void(int64_t active_slots)> on_active_slots;
  // A decoded request's wait for a mesh thread (seconds), as its shape stage starts; a mesh
  // whose surface was over the mesh stage's budget.
  std::function<void(double seconds)> on_mesh_wait;
  std::function<void()> on_mesh_budget_exceeded;
  // A device fault met on a mesh thread (its task already failed with it): the server hands it
  // to Scheduler::report_device_fault. Empty: logged only.
  std::function<void(const DeviceFault& fault, const std::string& request_id)> on_device_fault;
  FaultInjection faults;  // TEST ONLY, see FaultInjection
};

class EngineExecutor final : public BatchExecutor {
 public:
  EngineExecutor(Engine& engine, ExecutorOptions options);
  ~EngineExecutor() override;  // finishes the queued mesh work, then joins the threads
  EngineExecutor(const EngineExecutor&) = delete;
  EngineExecutor& operator=(const EngineExecutor&) = delete;

  void execute(const std::vector<std::shared_ptr<Task>>& tasks, int64_t bucket) override;

  bool supports_continuous() const override { return true; }
  int64_t active_slots() const override;
  void admit(const std::vector<std::shared_ptr<Task>>& tasks) override;
  void step() override;
  std::vector<std::shared_ptr<Task>> clear_slots() override;

  // Creates every bucket's decode runners and runs one small batch end to end, so that the
  // first client request pays for nothing. Called once before the server reports SERVING.
  void warm_up(const std::vector<int64_t>& buckets);

  // Waits until no mesh work is queued or running, at most `timeout`; returns whether idle.
  bool wait_idle(std::chrono::milliseconds timeout = std::chrono::hours(24));

 private:
  void mesh_worker();
  void post(std::function<void()> task);
  void finish_task(const std::shared_ptr<Task>& task, const at::Tensor& ids, WorkResult result);
  // Continuous mode: hands a slot whose tokens are done to the mesh threads.
  void retire(ContinuousDecoder::SlotId id);
  void report_active_slots() const;
  // admit() and step() inside the device check (core/device_fault.h).
  void admit_on_device(const std::vector<std::shared_ptr<Task>>& tasks);
  void step_on_device();
  // The mesh stage's device-fault path: reports `fault`, then fails `task` with it.
  void mesh_device_fault(const std::shared_ptr<Task>& task, const DeviceFault& fault);
  // Made at warm-up (its shared unconditional prefix is one prefill), or on first use.
  ContinuousDecoder& continuous_decoder();

  // A task holding a continuous decode slot.
  struct SlotTask {
    std::shared_ptr<Task> task;
    SteadyClock::time_point admitted;
    SteadyClock::time_point first_token;
    double text_encoding_ms = 0;
    double prefill_ms = 0;
    int64_t largest_bucket = 0;  // of the steps it ran in (reported as batch_bucket)
    std::vector<std::string> warnings;
  };

  ExecutorOptions options_;
  Engine& engine_;
  const bool on_accelerator_;       // the engine runs on a CUDA device: its errors may be faults
  int64_t steps_ = 0;               // decode steps (static: batches) run, for the fault injection
  std::atomic<int64_t> meshed_{0};  // tasks that reached the mesh stage, likewise
  ShapePipeline pipeline_;
  std::unique_ptr<ContinuousDecoder> decoder_;  // made on the first admission
  std::map<ContinuousDecoder::SlotId, SlotTask> slot_tasks_;
  std::mutex mutex_;
  std::condition_variable changed_;
  struct MeshTask {
    std::function<void()> run;
    SteadyClock::time_point posted;
  };
  std::deque<MeshTask> tasks_;
  int64_t busy_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace cube3d
