// The request scheduler: one queue shared by every gRPC thread and one worker thread that
// drives the BatchExecutor, either forming whole batches in buckets (static mode, Triton-style
// dynamic batching) or letting waiting tasks join a running batch of decode slots between two
// tokens (continuous mode, iteration-level scheduling). It also owns admission control (queue
// limits, deadlines, shutdown) and the order in which waiting tasks are taken (priority classes,
// fairness across clients and their end users), so that the server only maps the cube3d::Error
// codes it throws or delivers to gRPC statuses.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cube3d/core/device_fault.h"
#include "cube3d/scheduler/batch_executor.h"
#include "cube3d/scheduler/bucket_policy.h"
#include "cube3d/scheduler/task.h"

namespace cube3d {

// Plain data: the server config's `batching:` section is this struct (no copy, one set of
// defaults).
// continuous: iteration-level scheduling, a request joins the running batch at the next token
// and leaves it as soon as its tokens are done. static: a batch runs all of its tokens before
// the next one forms (Triton's dynamic batcher, the official code's one prompt at a time).
enum class BatchingMode { kContinuous, kStatic };
const char* to_string(BatchingMode mode);
// "continuous" | "static"; invalid_argument naming `field` and the choices otherwise.
BatchingMode parse_batching_mode(const std::string& text, const std::string& field);

struct SchedulerConfig {
  BatchingMode mode = BatchingMode::kContinuous;
  // Batch sizes the executor runs; strictly increasing, each in [1, kMaxBatchBucket]. In
  // continuous mode the largest is the number of decode slots and each step runs the smallest
  // bucket that holds the active slots.
  std::vector<int64_t> batch_buckets{1, 2, 4, 8};
  // How long the OLDEST waiting task may wait for company before a batch is formed anyway.
  // 0 dispatches at once. A full largest bucket is dispatched without waiting. In continuous
  // mode it applies only to forming a batch when no slot is running; later arrivals join at
  // the next step.
  int64_t max_queue_delay_ms = 5;
  // Continuous mode, the prefill budget: how many waiting tasks may join between two decode
  // steps while other slots are running (each join's prefill delays the running rows by about
  // one step's time or more). With no slot running, a whole largest bucket may join at once.
  int64_t max_joins_per_step = 2;
  // Tasks accepted but not yet handed to the executor; one more is refused (RESOURCE_EXHAUSTED)
  // so that clients back off instead of piling up behind a busy GPU.
  int64_t max_queue_size = 64;
  // Batch-priority work that has waited this long is taken as if it were interactive (in the
  // same fair order, not ahead of it), so that it cannot starve behind a steady stream of
  // interactive work. 0: batch work is never held back (priorities only limit the queue).
  // In [0, kMaxBatchWaitMs].
  int64_t batch_max_wait_ms = 60000;
  // Batch-priority tasks waiting at most; one more is refused (RESOURCE_EXHAUSTED), so that the
  // rest of max_queue_size stays free for interactive work. 0: three quarters of
  // max_queue_size (at least 1). In [0, max_queue_size].
  int64_t max_queued_batch = 0;
  bool operator==(const SchedulerConfig&) const = default;
};

// Throws invalid_argument naming the field at fault (the server checks its YAML first, with its
// own key names; this guards every other caller).
void validate_scheduler_config(const SchedulerConfig& config);
// max_queued_batch with its 0 resolved: three quarters of max_queue_size, at least 1.
int64_t effective_max_queued_batch(const SchedulerConfig& config);

// Deadlines: each Task carries its own (the server derives it from the gRPC deadline or its
// default timeout). A task whose deadline has passed is refused by submit and failed with
// DEADLINE_EXCEEDED, without running, when the worker finds it in the queue; the worker also
// wakes at the earliest queued deadline so that such a task fails promptly while the GPU idles.
// A task that is already running is the executor's to stop.
//
// Order (both modes; every batch or admission is taken this way, one task at a time): the
// candidates are the interactive tasks and the batch tasks that have waited batch_max_wait_ms
// (aged); only when there is none of those do the other batch tasks compete, so an interactive
// arrival is taken at the next batch or free slot even behind a queue of batch work. Among the
// candidates, clients take turns (the next name after the client served last, wrapping
// around), so one client's flood delays the others by at most its share; within the chosen
// client its end users take turns the same way, so one player's burst does not delay the
// others behind the same API key; FIFO within an end user. With one client and no end users
// this is plain FIFO. Aging needs no wake-up of its own: it changes the order, never whether
// or when a batch forms, and each take judges it afresh.
//
// Continuous mode, one worker iteration: drop cancelled/expired queued tasks; admit waiting tasks
// in the order above into the free slots (largest bucket - active slots), at most
// max_joins_per_step of them while other slots run, a whole largest bucket when none does; then
// run one decode step if any slot is active, and loop without sleeping while slots are active.
// With no slot active, the oldest task waits up to max_queue_delay_ms for company, as a static
// batch would.
//
// Outcomes: every task that submit accepts gets exactly one outcome through Task::succeed/fail,
// from the executor or from the scheduler (CANCELLED, DEADLINE_EXCEEDED, UNAVAILABLE, or the
// executor's exception). A task that submit refuses (it throws) gets none: the caller reports
// the thrown error itself.
//
// Device faults (core/device_fault.h): a DeviceFault escaping admit(), step() or execute() means
// the device is broken for good, not that one request was bad. The scheduler then fails every
// task that held device state (the admission's or step's tasks and every slot: clear_slots())
// with the fault, INTERNAL "the device failed during decoding (...); this replica is
// restarting"; stops admitting work for good (submit throws UNAVAILABLE, a retryable "not
// started" message); answers every queued task UNAVAILABLE the same way (none reached the
// device, so a client may retry it on another replica); logs the fault once, at error level,
// with the failed requests' ids; and calls the device-fault observer once. Tasks already past
// their slots (meshing on the executor's threads) go on and answer; drain() waits for them.
// Any other exception stays a per-request failure and the scheduler goes on serving.
class Scheduler {
 public:
  // Called on the worker thread before each STATIC batch runs (for the "batch size per bucket"
  // metric); must be quick and must not call back into the scheduler's drain/stop. Continuous
  // mode never calls it: each step's bucket is the executor's choice, so the executor reports
  // its own metrics.
  using BatchObserver = std::function<void(int64_t bucket, int64_t tasks_in_batch)>;
  // Called once, for the first device fault (from the worker thread, or from the thread that
  // called report_device_fault), after the scheduler stopped admitting and failed the queue:
  // the server marks itself NOT_SERVING and exits for a restart. The ids are the requests that
  // the fault failed. Must not call back into the scheduler's drain/stop.
  using DeviceFaultObserver =
      std::function<void(const DeviceFault& fault, const std::vector<std::string>& request_ids)>;

  // Validates `config` (invalid_argument) and starts the worker thread. `executor` must outlive
  // the scheduler; it is only called from the worker thread, one batch (or one admit/step) at a
  // time, except for supports_continuous(), asked here. Continuous mode with an executor that
  // does not support it throws invalid_argument.
  Scheduler(SchedulerConfig config, BatchExecutor& executor, BatchObserver on_batch = {},
            DeviceFaultObserver on_device_fault = {});
  // Stops like drain(0): queued tasks fail UNAVAILABLE, running tasks are cancelled, and the worker
  // is joined. Never waits for more than the running batch, which must honour cancellation
  // (static), or the admit/step in progress (continuous: the worker then clears the slots, and
  // their tasks fail UNAVAILABLE before they are cancelled, so that a step cannot report them
  // CANCELLED). Like drain(), it must not run on the worker thread (inside the executor or a
  // callback).
  ~Scheduler();

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;
  Scheduler(Scheduler&&) = delete;
  Scheduler& operator=(Scheduler&&) = delete;

  // Thread-safe. Queues `task` and returns; it reports TaskProgress{kQueued} first. Throws
  //   UNAVAILABLE        when draining or stopped ("server is shutting down"),
  //   DEADLINE_EXCEEDED  when the task's deadline has already passed,
  //   RESOURCE_EXHAUSTED when max_queue_size tasks are waiting ("queue full (N waiting); ..."),
  //                      or, for a batch-priority task, when effective_max_queued_batch batch tasks
  //                      are ("batch queue full (N batch jobs waiting, ...); ...").
  //   INTERNAL           for a null task.
  //   UNAVAILABLE        after a device fault ("this replica's device failed ...; retry on
  //                      another replica"), ahead of every other check.
  void submit(std::shared_ptr<Task> task);

  // Thread-safe. A device fault found outside the worker (the executor's mesh threads, whose
  // occupancy query runs on the device): the scheduler stops admitting, fails the queue
  // UNAVAILABLE and, for the first fault, logs it with `request_ids` (the requests it failed,
  // which the caller has already answered) and calls the observer, as for a fault in a step.
  // The running slots are failed by the next step, which meets the same broken device.
  void report_device_fault(const DeviceFault& fault, const std::vector<std::string>& request_ids);
  // Whether a device fault was met (from any thread).
  bool device_faulted() const;

  // Stops accepting work (submit throws UNAVAILABLE); queued work still runs, and the worker no
  // longer waits for company since no more is coming. Idempotent.
  void begin_drain();
  // begin_drain(), then waits until the queued and running tasks are done or `grace` has passed;
  // then fails what is still queued with UNAVAILABLE, cancels the running tasks and stops the
  // worker (waiting for the running batch to return). Returns whether everything finished within
  // the grace period. Later submits throw UNAVAILABLE.
  bool drain(std::chrono::milliseconds grace);

  // For metrics, from any thread.
  int64_t queue_depth() const;    // accepted, not yet handed to the executor
  int64_t queued_batch() const;   // the batch-priority part of queue_depth()
  int64_t running_tasks() const;  // handed to the executor, no outcome yet
  bool draining() const;

  const SchedulerConfig& config() const { return config_; }

 private:
  struct QueuedTask {
    std::shared_ptr<Task> task;
    SteadyClock::time_point submitted;
  };
  // Tasks the worker took off the queue without running them, with the reason.
  struct Rejected {
    std::shared_ptr<Task> task;
    Error error;
  };

  void run_worker();  // the loop of config_.mode, below
  // Static: drop cancelled/expired tasks, wait for company or a full largest bucket (waking at
  // the earliest deadline), then run up to the largest bucket, taken in the class comment's
  // order.
  void run_static_worker();
  // Continuous: see the class comment.
  void run_continuous_worker();
  // Lock held. Whether `queued` competes with interactive work (interactive, or batch aged).
  bool aged_or_interactive(const QueuedTask& queued, SteadyClock::time_point now) const;
  // Lock held. Moves cancelled and expired tasks from the queue to `rejected`.
  void drop_cancelled_and_expired(SteadyClock::time_point now, std::vector<Rejected>& rejected);
  // Lock held. Fails (with the lock released meanwhile) the queued tasks that were cancelled or
  // expired; returns whether there were any (then the queue may have changed).
  bool reject_cancelled_and_expired(std::unique_lock<std::mutex>& lock,
                                    SteadyClock::time_point now);
  // Lock held, queue not empty, nothing running. When the oldest task may still wait for company
  // (not draining, less than a largest bucket waiting, its delay not over), waits until its
  // delay ends, the earliest queued deadline or a wake-up, and returns true.
  bool waited_for_company(std::unique_lock<std::mutex>& lock, SteadyClock::time_point now);
  // Lock held. Takes up to `count` tasks off the queue in the order of the class comment.
  std::vector<std::shared_ptr<Task>> take_batch(int64_t count, SteadyClock::time_point now);
  // Lock held. Takes `pick` off the queue, keeping queued_batch_ right.
  std::shared_ptr<Task> remove_from_queue(std::deque<QueuedTask>::iterator pick);
  void add_in_flight(const std::vector<std::shared_ptr<Task>>& tasks);  // lock held
  void run_batch(const std::vector<std::shared_ptr<Task>>& batch, int64_t bucket);
  // Continuous, lock not held: admit() or fail `tasks`; step() or clear the slots and fail them.
  void admit_tasks(const std::vector<std::shared_ptr<Task>>& tasks);
  void step_slots();
  std::vector<std::shared_ptr<Task>> clear_slots_quietly();
  bool idle_locked() const;  // nothing queued, running or admitting
  // Worker thread, lock not held, from a catch block of a DeviceFault: fails `tasks` (those of
  // the admission, step or batch) and whatever still holds a slot with the fault, then
  // enter_device_fault().
  void fail_on_device_fault(const DeviceFault& fault,
                            const std::vector<std::shared_ptr<Task>>& tasks);
  // Lock not held: stops admitting for good, fails the queue UNAVAILABLE, and, the first time,
  // logs and calls the observer.
  void enter_device_fault(const DeviceFault& fault, const std::vector<std::string>& request_ids);
  void stop();

  const SchedulerConfig config_;
  BatchExecutor& executor_;
  const BatchObserver on_batch_;
  const DeviceFaultObserver on_device_fault_;
  const int64_t largest_bucket_;

  mutable std::mutex mutex_;
  std::condition_variable wake_worker_;
  std::condition_variable work_done_;  // a batch returned or an accepted task reached the queue
  std::deque<QueuedTask> queue_;
  std::string last_client_;  // fair queueing: the client whose task was taken last
  // Per client, the end user whose task was taken last; only for clients with tasks queued and
  // a non-empty last end user (absent means ""), so it stays small.
  std::map<std::string, std::string, std::less<>> last_end_user_;
  int64_t admitting_ = 0;     // accepted by submit, reporting kQueued, not yet in queue_
  int64_t queued_batch_ = 0;  // batch-priority tasks among queue_ and admitting_
  std::vector<std::shared_ptr<Task>> in_flight_;  // handed to the executor; pruned when finished
  // Static: a batch is running. Continuous: an admit/step is in progress or a slot is active.
  bool executing_ = false;
  bool draining_ = false;
  bool stopping_ = false;
  bool device_faulted_ = false;  // for good: a device fault was met

  std::mutex stop_mutex_;  // serialises stop() (drain and the destructor) around the join
  std::thread worker_;     // last: starts after every member above exists
};

}  // namespace cube3d
