// The request scheduler: one FIFO queue shared by every gRPC thread and one worker thread that
// groups waiting jobs into batch buckets (Triton-style dynamic batching) and drives the
// BatchExecutor. It also owns admission control (queue limit, deadlines, shutdown) so that the
// server only maps the cube3d::Error codes it throws or delivers to gRPC statuses.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cube3d/scheduler/batch_executor.h"
#include "cube3d/scheduler/bucket_policy.h"
#include "cube3d/scheduler/job.h"

namespace cube3d {

// Plain data: the server config's `batching:` section is this struct (no copy, one set of
// defaults).
struct SchedulerConfig {
  // Batch sizes the executor runs; strictly increasing, each in [1, kMaxBatchBucket].
  std::vector<int64_t> batch_buckets{1, 2, 4, 8};
  // How long the OLDEST waiting job may wait for company before a batch is formed anyway.
  // 0 dispatches at once. A full largest bucket is dispatched without waiting.
  int64_t max_queue_delay_ms = 5;
  // Jobs accepted but not yet handed to the executor; one more is refused (RESOURCE_EXHAUSTED)
  // so that clients back off instead of piling up behind a busy GPU.
  int64_t max_queue_size = 64;
  bool operator==(const SchedulerConfig&) const = default;
};

// Throws invalid_argument naming the field at fault (the server checks its YAML first, with its
// own key names; this guards every other caller).
void validate_scheduler_config(const SchedulerConfig& config);

// Deadlines: each Job carries its own (the server derives it from the gRPC deadline or its
// default timeout). A job whose deadline has passed is refused by submit and failed with
// DEADLINE_EXCEEDED, without running, when the worker finds it in the queue; the worker also
// wakes at the earliest queued deadline so that such a job fails promptly while the GPU idles.
// A job that is already running is the executor's to stop.
//
// Outcomes: every job that submit accepts gets exactly one outcome through Job::succeed/fail,
// from the executor or from the scheduler (CANCELLED, DEADLINE_EXCEEDED, UNAVAILABLE, or the
// executor's exception). A job that submit refuses (it throws) gets none: the caller reports
// the thrown error itself.
class Scheduler {
 public:
  // Called on the worker thread before each batch runs (for the "batch size per bucket"
  // metric); must be quick and must not call back into the scheduler's drain/stop.
  using BatchObserver = std::function<void(int64_t bucket, int64_t jobs_in_batch)>;

  // Validates `config` (invalid_argument) and starts the worker thread. `executor` must outlive
  // the scheduler; it is only called from the worker thread, one batch at a time.
  Scheduler(SchedulerConfig config, BatchExecutor& executor, BatchObserver on_batch = {});
  // Stops like drain(0): queued jobs fail UNAVAILABLE, running jobs are cancelled, and the worker
  // is joined. Never waits for more than the running batch, which must honour cancellation.
  // Like drain(), it must not run on the worker thread (inside the executor or a callback).
  ~Scheduler();

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;
  Scheduler(Scheduler&&) = delete;
  Scheduler& operator=(Scheduler&&) = delete;

  // Thread-safe. Queues `job` and returns; it reports JobProgress{kQueued} first. Throws
  //   UNAVAILABLE        when draining or stopped ("server is shutting down"),
  //   DEADLINE_EXCEEDED  when the job's deadline has already passed,
  //   RESOURCE_EXHAUSTED when max_queue_size jobs are waiting ("queue full (N waiting); ...").
  //   INTERNAL           for a null job.
  void submit(std::shared_ptr<Job> job);

  // Stops accepting work (submit throws UNAVAILABLE); queued work still runs, and the worker no
  // longer waits for company since no more is coming. Idempotent.
  void begin_drain();
  // begin_drain(), then waits until the queued and running jobs are done or `grace` has passed;
  // then fails what is still queued with UNAVAILABLE, cancels the running jobs and stops the
  // worker (waiting for the running batch to return). Returns whether everything finished within
  // the grace period. Later submits throw UNAVAILABLE.
  bool drain(std::chrono::milliseconds grace);

  // For metrics, from any thread.
  int64_t queue_depth() const;   // accepted, not yet handed to the executor
  int64_t running_jobs() const;  // handed to the executor, no outcome yet
  bool draining() const;

  const SchedulerConfig& config() const { return config_; }

 private:
  struct QueuedJob {
    std::shared_ptr<Job> job;
    SteadyClock::time_point submitted;
  };
  // Jobs the worker took off the queue without running them, with the reason.
  struct Rejected {
    std::shared_ptr<Job> job;
    Error error;
  };

  // The worker loop: drop cancelled/expired jobs, wait for company or a full largest bucket
  // (waking at the earliest deadline), then run up to the largest bucket in FIFO order.
  void run_worker();
  // Lock held. Moves cancelled and expired jobs from the queue to `rejected`.
  void drop_cancelled_and_expired(SteadyClock::time_point now, std::vector<Rejected>& rejected);
  std::vector<std::shared_ptr<Job>> take_batch(int64_t count);  // lock held; FIFO
  void run_batch(const std::vector<std::shared_ptr<Job>>& batch, int64_t bucket);
  bool idle_locked() const;  // nothing queued, running or admitting
  void stop();

  const SchedulerConfig config_;
  BatchExecutor& executor_;
  const BatchObserver on_batch_;
  const int64_t largest_bucket_;

  mutable std::mutex mutex_;
  std::condition_variable wake_worker_;
  std::condition_variable work_done_;  // a batch returned or an accepted job reached the queue
  std::deque<QueuedJob> queue_;
  int64_t admitting_ = 0;  // accepted by submit, reporting kQueued, not yet in queue_
  std::vector<std::shared_ptr<Job>> in_flight_;  // handed to the executor; pruned when finished
  bool executing_ = false;
  bool draining_ = false;
  bool stopping_ = false;

  std::mutex stop_mutex_;  // serialises stop() (drain and the destructor) around the join
  std::thread worker_;     // last: starts after every member above exists
};

}  // namespace cube3d
