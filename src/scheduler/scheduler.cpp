#include "cube3d/scheduler/scheduler.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>
#include <optional>
#include <string>
#include <utility>

#include "cube3d/core/constants.h"
#include "cube3d/core/enum_table.h"
#include "cube3d/core/error.h"
#include "cube3d/scheduler/bucket_policy.h"

namespace cube3d {
namespace {

constexpr const char* kShuttingDown = "server is shutting down";
constexpr const char* kShutDownWhileRunning = "server shut down while the request was running";
// Queued and new work after a device fault: none of it reached the device, so a client may
// retry it elsewhere (UNAVAILABLE is what gRPC clients retry).
constexpr const char* kDeviceFailedNotStarted =
    "this replica's device failed and it is restarting; the request was not started: retry it "
    "on another replica";
const std::string kNoEndUser;

double milliseconds_between(SteadyClock::time_point from, SteadyClock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

// Outcome callbacks belong to the server; one that throws must not take the worker down.
void fail_quietly(Task& task, const Error& error) {
  try {
    task.fail(error);
  } catch (const std::exception& e) {
    spdlog::error("scheduler: request {}: outcome callback threw: {}", task.ticket().request_id,
                  e.what());
  } catch (...) {
    spdlog::error("scheduler: request {}: outcome callback threw", task.ticket().request_id);
  }
}

void fail_unfinished(const std::vector<std::shared_ptr<Task>>& batch, const Error& error) {
  for (const auto& task : batch) {
    if (!task->finished()) fail_quietly(*task, error);
  }
}

// Called from a catch block: the error that the tasks hit by an executor failure get (a
// cube3d::Error keeps its code and message; anything else becomes INTERNAL), logged with `what`.
Error executor_failure(const std::string& what) {
  try {
    throw;
  } catch (const Error& e) {
    spdlog::warn("scheduler: {} failed: {} {}", what, to_string(e.code()), e.what());
    return e;
  } catch (const std::exception& e) {
    spdlog::error("scheduler: {} failed: {}", what, e.what());
    return internal_error(std::string("batch executor failed: ") + e.what());
  } catch (...) {
    spdlog::error("scheduler: {} failed with a non-standard exception", what);
    return internal_error("batch executor failed with a non-standard exception");
  }
}

// Checked before the worker starts, so that a misconfigured server fails at startup rather
// than on its first request.
SchedulerConfig validated(SchedulerConfig config, const BatchExecutor& executor) {
  validate_scheduler_config(config);
  if (config.mode == BatchingMode::kContinuous && !executor.supports_continuous()) {
    throw invalid_argument(
        "batching.mode: continuous needs an executor that supports it (this one runs static "
        "batches only; use batching.mode: static)");
  }
  return config;
}

std::string joined_ids(const std::vector<std::shared_ptr<Task>>& tasks) {
  std::string ids;
  for (const auto& task : tasks) {
    if (!ids.empty()) ids += ',';
    ids += task->ticket().request_id;
  }
  return ids;
}

constexpr EnumTable<BatchingMode, std::string_view, 2> kBatchingModeNames = {
    {{BatchingMode::kContinuous, "continuous"}, {BatchingMode::kStatic, "static"}}};
constexpr EnumTable<TaskPriority, std::string_view, 2> kPriorityNames = {
    {{TaskPriority::kInteractive, "interactive"}, {TaskPriority::kBatch, "batch"}}};

}  // namespace

// The names are literals, so a name's data() is a C string.
const char* to_string(BatchingMode mode) {
  return lookup(kBatchingModeNames, mode).value_or("?").data();
}

const char* to_string(TaskPriority priority) {
  return lookup(kPriorityNames, priority).value_or("?").data();
}

BatchingMode parse_batching_mode(const std::string& text, const std::string& field) {
  return parse_enum(kBatchingModeNames, text, field);
}

void validate_scheduler_config(const SchedulerConfig& config) {
  validate_batch_buckets(config.batch_buckets);
  if (config.max_joins_per_step < 1 || config.max_joins_per_step > kMaxBatchBucket) {
    throw invalid_argument("max_joins_per_step: " + std::to_string(config.max_joins_per_step) +
                           " is outside [1, " + std::to_string(kMaxBatchBucket) + "]");
  }
  if (config.max_queue_delay_ms < 0 || config.max_queue_delay_ms > kMaxQueueDelayMs) {
    throw invalid_argument("max_queue_delay_ms: " + std::to_string(config.max_queue_delay_ms) +
                           " is outside [0, " + std::to_string(kMaxQueueDelayMs) + "]");
  }
  if (config.max_queue_size < 1) {
    throw invalid_argument("max_queue_size: must be >= 1, got " +
                           std::to_string(config.max_queue_size));
  }
  if (config.batch_max_wait_ms < 0 || config.batch_max_wait_ms > kMaxBatchWaitMs) {
    throw invalid_argument("batch_max_wait_ms: " + std::to_string(config.batch_max_wait_ms) +
                           " is outside [0, " + std::to_string(kMaxBatchWaitMs) + "]");
  }
  if (config.max_queued_batch < 0 || config.max_queued_batch > config.max_queue_size) {
    throw invalid_argument(
        "max_queued_batch: " + std::to_string(config.max_queued_batch) +
        " is outside [0, max_queue_size = " + std::to_string(config.max_queue_size) + "]");
  }
}

int64_t effective_max_queued_batch(const SchedulerConfig& config) {
  if (config.max_queued_batch > 0) return config.max_queued_batch;
  return std::max<int64_t>(1, config.max_queue_size * 3 / 4);
}

Scheduler::Scheduler(SchedulerConfig config, BatchExecutor& executor, BatchObserver on_batch,
                     DeviceFaultObserver on_device_fault)
    : config_(validated(std::move(config), executor)),
      executor_(executor),
      on_batch_(std::move(on_batch)),
      on_device_fault_(std::move(on_device_fault)),
      largest_bucket_(config_.batch_buckets.back()),
      worker_(&Scheduler::run_worker, this) {}

Scheduler::~Scheduler() { stop(); }

void Scheduler::submit(std::shared_ptr<Task> task) {
  if (!task) throw internal_error("Scheduler::submit: null task");
  const bool batch = task->ticket().priority == TaskPriority::kBatch;
  {
    std::unique_lock lock(mutex_);
    if (device_faulted_) throw unavailable(kDeviceFailedNotStarted);
    if (draining_ || stopping_) throw unavailable(kShuttingDown);
    if (task->expired()) {
      throw deadline_exceeded("deadline already passed before the request was queued");
    }
    // A cancelled (or expired) queued task holds no place: the queue looks full only until they
    // are dropped, which is done here rather than when the worker next wakes (a cancelled task
    // of one key kept another key's request out with "queue full" for seconds).
    const auto full = [&] {
      return static_cast<int64_t>(queue_.size()) + admitting_ >= config_.max_queue_size ||
             (batch && queued_batch_ >= effective_max_queued_batch(config_));
    };
    if (full() && reject_cancelled_and_expired(lock, SteadyClock::now())) {
      // The lock was released while they were failed: everything is asked again.
      if (device_faulted_) throw unavailable(kDeviceFailedNotStarted);
      if (draining_ || stopping_) throw unavailable(kShuttingDown);
    }
    const auto waiting = static_cast<int64_t>(queue_.size()) + admitting_;
    if (waiting >= config_.max_queue_size) {
      throw queue_full("queue full (" + std::to_string(waiting) + " waiting); retry later");
    }
    if (batch && queued_batch_ >= effective_max_queued_batch(config_)) {
      throw queue_full("batch queue full (" + std::to_string(queued_batch_) +
                       " batch jobs waiting, batching.max_queued_batch); retry later");
    }
    ++admitting_;  // holds the slot while kQueued is reported below
    if (batch) ++queued_batch_;
  }
  // Reported before the worker can see the task, so that "queued" always comes before the
  // executor's progress; outside the lock because the callback may write to a slow stream.
  try {
    task->progress(TaskProgress{TaskStage::kQueued});
  } catch (...) {
    {
      const std::lock_guard lock(mutex_);
      --admitting_;
      if (batch) --queued_batch_;
    }
    work_done_.notify_all();
    throw;
  }
  bool stopped_meanwhile = false;
  {
    const std::lock_guard lock(mutex_);
    --admitting_;
    stopped_meanwhile = stopping_;
    if (!stopped_meanwhile) {
      queue_.push_back(QueuedTask{task, SteadyClock::now()});
    } else if (batch) {
      --queued_batch_;
    }
  }
  work_done_.notify_all();
  if (stopped_meanwhile) {
    // Already accepted (it said "queued"), so it gets an outcome rather than an exception.
    fail_quietly(*task, unavailable(kShuttingDown));
    return;
  }
  wake_worker_.notify_one();
}

void Scheduler::begin_drain() {
  {
    const std::lock_guard lock(mutex_);
    if (draining_) return;
    draining_ = true;
    spdlog::info("scheduler: draining ({} queued, {} running)", queue_.size() + admitting_,
                 std::count_if(in_flight_.begin(), in_flight_.end(),
                               [](const auto& task) { return !task->finished(); }));
  }
  // The worker stops waiting for company: no more is coming.
  wake_worker_.notify_all();
}

bool Scheduler::drain(std::chrono::milliseconds grace) {
  begin_drain();
  const auto give_up_at = SteadyClock::now() + grace;
  bool finished_in_time = false;
  {
    std::unique_lock lock(mutex_);
    while (!(finished_in_time = idle_locked()) && SteadyClock::now() < give_up_at) {
      // The executor may deliver outcomes from its own threads without telling us, so look
      // again every few milliseconds as well as when a batch returns.
      const auto next_look = SteadyClock::now() + std::chrono::milliseconds(10);
      work_done_.wait_until(lock, std::min(give_up_at, next_look));
    }
  }
  if (!finished_in_time) {
    spdlog::warn("scheduler: work left after the {} ms grace period; cancelling it", grace.count());
  }
  stop();
  return finished_in_time;
}

int64_t Scheduler::queue_depth() const {
  const std::lock_guard lock(mutex_);
  return static_cast<int64_t>(queue_.size()) + admitting_;
}

int64_t Scheduler::queued_batch() const {
  const std::lock_guard lock(mutex_);
  return queued_batch_;
}

int64_t Scheduler::running_tasks() const {
  const std::lock_guard lock(mutex_);
  return std::count_if(in_flight_.begin(), in_flight_.end(),
                       [](const auto& task) { return !task->finished(); });
}

bool Scheduler::draining() const {
  const std::lock_guard lock(mutex_);
  return draining_;
}

bool Scheduler::device_faulted() const {
  const std::lock_guard lock(mutex_);
  return device_faulted_;
}

void Scheduler::report_device_fault(const DeviceFault& fault,
                                    const std::vector<std::string>& request_ids) {
  enter_device_fault(fault, request_ids);
}

void Scheduler::enter_device_fault(const DeviceFault& fault,
                                   const std::vector<std::string>& request_ids) {
  bool first = false;
  std::deque<QueuedTask> abandoned;
  {
    const std::lock_guard lock(mutex_);
    first = !device_faulted_;
    device_faulted_ = true;
    draining_ = true;  // the worker waits for no company, drain() finds nothing to wait for
    abandoned.swap(queue_);
    queued_batch_ -= std::count_if(abandoned.begin(), abandoned.end(), [](const QueuedTask& q) {
      return q.task->ticket().priority == TaskPriority::kBatch;
    });
    last_end_user_.clear();
  }
  wake_worker_.notify_all();
  if (first) {
    std::string ids;
    for (const auto& id : request_ids) ids += (ids.empty() ? "" : ",") + id;
    spdlog::error(
        "scheduler: DEVICE FAULT during {}: {}; failed requests [{}] INTERNAL, {} queued "
        "requests UNAVAILABLE; no new work is admitted, the server exits for a restart",
        fault.stage(), fault.detail(), ids, abandoned.size());
  } else {
    spdlog::info("scheduler: another device fault during {} ({} requests): {}", fault.stage(),
                 request_ids.size(), fault.detail());
  }
  for (const auto& queued : abandoned) {
    fail_quietly(*queued.task, unavailable(kDeviceFailedNotStarted));
  }
  work_done_.notify_all();
  if (first && on_device_fault_) {
    try {
      on_device_fault_(fault, request_ids);
    } catch (const std::exception& e) {
      spdlog::error("scheduler: device-fault observer threw: {}", e.what());
    } catch (...) {
      spdlog::error("scheduler: device-fault observer threw");
    }
  }
}

void Scheduler::fail_on_device_fault(const DeviceFault& fault,
                                     const std::vector<std::shared_ptr<Task>>& tasks) {
  // Every task that holds device state is lost with the device: the admission's, the step's or
  // the batch's, and whatever else still holds a slot.
  std::vector<std::shared_ptr<Task>> failed = tasks;
  for (auto& task : clear_slots_quietly()) {
    if (std::find(failed.begin(), failed.end(), task) == failed.end()) failed.push_back(task);
  }
  std::vector<std::string> ids;
  for (const auto& task : failed) {
    if (!task->finished()) ids.push_back(task->ticket().request_id);
  }
  // Stop admitting before answering: a client told INTERNAL that retries at once here is
  // refused rather than sent to the broken device.
  enter_device_fault(fault, ids);
  fail_unfinished(failed, fault);
}

bool Scheduler::idle_locked() const {
  return queue_.empty() && admitting_ == 0 && !executing_ &&
         std::all_of(in_flight_.begin(), in_flight_.end(),
                     [](const auto& task) { return task->finished(); });
}

void Scheduler::drop_cancelled_and_expired(SteadyClock::time_point now,
                                           std::vector<Rejected>& rejected) {
  const size_t rejected_before = rejected.size();
  std::erase_if(queue_, [&](const QueuedTask& queued) {
    std::optional<Error> error;
    if (queued.task->cancelled()) {
      error = cancelled("request cancelled while queued");
    } else if (queued.task->expired(now)) {
      const auto waited_ms = static_cast<int64_t>(milliseconds_between(queued.submitted, now));
      error = deadline_exceeded("deadline passed after " + std::to_string(waited_ms) +
                                " ms in the queue");
    }
    if (!error) return false;
    if (queued.task->ticket().priority == TaskPriority::kBatch) --queued_batch_;
    rejected.push_back({queued.task, std::move(*error)});
    return true;
  });
  if (rejected.size() == rejected_before || last_end_user_.empty()) return;
  // A client whose last queued tasks were dropped keeps no turn state (take_batch forgets a
  // client when it takes its last task; this covers the other way out of the queue).
  std::erase_if(last_end_user_, [&](const auto& entry) {
    return std::none_of(queue_.begin(), queue_.end(), [&](const QueuedTask& queued) {
      return queued.task->ticket().client == entry.first;
    });
  });
}

bool Scheduler::aged_or_interactive(const QueuedTask& queued, SteadyClock::time_point now) const {
  return queued.task->ticket().priority == TaskPriority::kInteractive ||
         now - queued.submitted >= std::chrono::milliseconds(config_.batch_max_wait_ms);
}

std::shared_ptr<Task> Scheduler::remove_from_queue(std::deque<QueuedTask>::iterator pick) {
  std::shared_ptr<Task> task = std::move(pick->task);
  queue_.erase(pick);
  if (task->ticket().priority == TaskPriority::kBatch) --queued_batch_;
  return task;
}

std::vector<std::shared_ptr<Task>> Scheduler::take_batch(int64_t count,
                                                         SteadyClock::time_point now) {
  // One task per pick, in the order of the class comment. Each pick scans the queue (a few
  // hundred tasks at most) twice: once for the next client, once for that client's next end
  // user and its oldest competing task.
  std::vector<std::shared_ptr<Task>> batch;
  batch.reserve(static_cast<size_t>(count));
  // Aging is judged at `now` for the whole take, so only taking changes who competes.
  auto competing =
      static_cast<int64_t>(std::count_if(queue_.begin(), queue_.end(), [&](const QueuedTask& q) {
        return aged_or_interactive(q, now);
      }));
  while (static_cast<int64_t>(batch.size()) < count && !queue_.empty()) {
    // With nothing interactive or aged waiting, the other batch tasks compete.
    const bool everyone = competing == 0;
    const auto competes = [&](const QueuedTask& q) {
      return everyone || aged_or_interactive(q, now);
    };

    // The client that follows last_client_ in name order, or (wrapping around) the first.
    const std::string* next_client = nullptr;
    const std::string* first_client = nullptr;
    for (const QueuedTask& queued : queue_) {
      if (!competes(queued)) continue;
      const std::string& client = queued.task->ticket().client;
      if (client > last_client_ && (next_client == nullptr || client < *next_client)) {
        next_client = &client;
      }
      if (first_client == nullptr || client < *first_client) first_client = &client;
    }
    const std::string& client = next_client != nullptr ? *next_client : *first_client;

    // Within it, the same turn-taking across end users, then its oldest competing task.
    const auto last_user_it = last_end_user_.find(client);
    const std::string& last_user =
        last_user_it != last_end_user_.end() ? last_user_it->second : kNoEndUser;
    auto next_pick = queue_.end();
    auto first_pick = queue_.end();
    int64_t of_client = 0;  // queued tasks of this client, competing or not
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      const TaskTicket& request = it->task->ticket();
      if (request.client != client) continue;
      ++of_client;
      if (!competes(*it)) continue;
      const std::string& user = request.end_user;
      // Strict comparisons keep the oldest task of each end user (the queue is in arrival order).
      if (user > last_user &&
          (next_pick == queue_.end() || user < next_pick->task->ticket().end_user)) {
        next_pick = it;
      }
      if (first_pick == queue_.end() || user < first_pick->task->ticket().end_user) {
        first_pick = it;
      }
    }
    const auto pick = next_pick != queue_.end() ? next_pick : first_pick;
    if (aged_or_interactive(*pick, now)) --competing;

    // `client` and `user` live in queued tasks; a taken task lives on in `batch`.
    const std::string& user = pick->task->ticket().end_user;
    if (of_client == 1 || user.empty()) {
      // Its last task, or no end user (the same as no entry): nothing to remember.
      if (last_user_it != last_end_user_.end()) last_end_user_.erase(last_user_it);
    } else if (last_user_it != last_end_user_.end()) {
      last_user_it->second = user;
    } else {
      last_end_user_.emplace(client, user);
    }
    last_client_ = client;
    batch.push_back(remove_from_queue(pick));
  }
  return batch;
}

bool Scheduler::reject_cancelled_and_expired(std::unique_lock<std::mutex>& lock,
                                             SteadyClock::time_point now) {
  std::vector<Rejected> rejected;
  drop_cancelled_and_expired(now, rejected);
  if (rejected.empty()) return false;
  lock.unlock();
  for (const auto& [task, error] : rejected) {
    spdlog::debug("scheduler: request {} dropped: {}", task->ticket().request_id, error.what());
    fail_quietly(*task, error);
  }
  lock.lock();
  work_done_.notify_all();
  return true;
}

bool Scheduler::waited_for_company(std::unique_lock<std::mutex>& lock,
                                   SteadyClock::time_point now) {
  const auto dispatch_at =
      queue_.front().submitted + std::chrono::milliseconds(config_.max_queue_delay_ms);
  const auto waiting = static_cast<int64_t>(queue_.size());
  if (draining_ || waiting >= largest_bucket_ || now >= dispatch_at) return false;
  // Wait for company, but wake for the earliest deadline so that it fails promptly.
  const auto earliest_deadline =
      std::min_element(queue_.begin(), queue_.end(), [](const auto& a, const auto& b) {
        return a.task->deadline() < b.task->deadline();
      })->task->deadline();
  wake_worker_.wait_until(lock, std::min(dispatch_at, earliest_deadline));
  return true;
}

void Scheduler::add_in_flight(const std::vector<std::shared_ptr<Task>>& tasks) {
  std::erase_if(in_flight_, [](const auto& task) { return task->finished(); });
  in_flight_.insert(in_flight_.end(), tasks.begin(), tasks.end());
}

void Scheduler::run_worker() {
  if (config_.mode == BatchingMode::kContinuous) {
    run_continuous_worker();
  } else {
    run_static_worker();
  }
}

void Scheduler::run_static_worker() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    const auto now = SteadyClock::now();
    if (reject_cancelled_and_expired(lock, now)) continue;  // the queue may have changed
    if (queue_.empty()) {
      wake_worker_.wait(lock);
      continue;
    }
    if (waited_for_company(lock, now)) continue;

    const auto waiting = static_cast<int64_t>(queue_.size());
    const int64_t bucket = choose_bucket(waiting, config_.batch_buckets);
    const double oldest_wait_ms = milliseconds_between(queue_.front().submitted, now);
    const auto batch = take_batch(std::min(bucket, waiting), now);
    add_in_flight(batch);
    executing_ = true;
    spdlog::debug("scheduler: batch bucket={} tasks={} oldest_wait_ms={:.1f} still_queued={}",
                  bucket, batch.size(), oldest_wait_ms, queue_.size());
    lock.unlock();
    run_batch(batch, bucket);
    lock.lock();
    executing_ = false;
    work_done_.notify_all();
  }
}

void Scheduler::run_continuous_worker() {
  // Only this thread's admit/step/clear_slots change the slots, so the count read after each of
  // them stays true until the next one: the executor is never asked under the lock.
  int64_t active = executor_.active_slots();
  std::unique_lock lock(mutex_);
  executing_ = active > 0;
  while (!stopping_) {
    const auto now = SteadyClock::now();
    if (reject_cancelled_and_expired(lock, now)) continue;  // the queue may have changed
    const int64_t free = largest_bucket_ - active;
    std::vector<std::shared_ptr<Task>> joining;
    if (!queue_.empty() && free > 0) {
      // Only a batch forming from nothing waits for company; with slots running, a waiting
      // task joins at the next step, which is sooner than any company could make it.
      if (active == 0 && waited_for_company(lock, now)) continue;
      // Each join's prefill stalls the running rows, so joins between two steps are limited
      // while rows run; with none running there is nothing to stall.
      const int64_t budget = active > 0 ? config_.max_joins_per_step : largest_bucket_;
      joining = take_batch(std::min({free, static_cast<int64_t>(queue_.size()), budget}), now);
      add_in_flight(joining);
    } else if (active == 0) {
      wake_worker_.wait(lock);
      continue;
    }
    const size_t still_queued = queue_.size();
    executing_ = true;
    lock.unlock();

    if (!joining.empty()) {
      if (spdlog::should_log(spdlog::level::debug)) {
        spdlog::debug("scheduler: admitting tasks={} [{}] free_slots={} still_queued={}",
                      joining.size(), joined_ids(joining), free, still_queued);
      }
      admit_tasks(joining);
      active = executor_.active_slots();
    }
    if (active > 0) {
      step_slots();
      active = executor_.active_slots();
    }

    lock.lock();
    executing_ = active > 0;
    work_done_.notify_all();
  }
  lock.unlock();
  // stop() delivers UNAVAILABLE to these (and to every other unfinished in-flight task) once
  // this thread has been joined.
  clear_slots_quietly();
}

void Scheduler::admit_tasks(const std::vector<std::shared_ptr<Task>>& tasks) {
  try {
    executor_.admit(tasks);
  } catch (const DeviceFault& fault) {
    fail_on_device_fault(fault, tasks);
  } catch (...) {
    // The executor admitted none of them; the running slots go on.
    fail_unfinished(tasks, executor_failure("admitting " + std::to_string(tasks.size()) + " jobs"));
  }
}

void Scheduler::step_slots() {
  std::optional<Error> error;
  try {
    executor_.step();
    return;
  } catch (const DeviceFault& fault) {
    fail_on_device_fault(fault, {});
    return;
  } catch (...) {
    error = executor_failure("decode step");
  }
  // The slots are as they were before the step, and their state is suspect: free them all.
  fail_unfinished(clear_slots_quietly(), *error);
}

std::vector<std::shared_ptr<Task>> Scheduler::clear_slots_quietly() {
  try {
    return executor_.clear_slots();
  } catch (...) {
    // Nothing better to do: a throwing clear_slots breaks the executor's contract. The tasks
    // keep their slots; stop() still fails whatever is unfinished.
    executor_failure("clearing the decode slots");
    return {};
  }
}

void Scheduler::run_batch(const std::vector<std::shared_ptr<Task>>& batch, int64_t bucket) {
  const auto tasks_in_batch = static_cast<int64_t>(batch.size());
  if (on_batch_) {
    try {
      on_batch_(bucket, tasks_in_batch);
    } catch (const std::exception& e) {
      spdlog::warn("scheduler: batch observer threw: {}", e.what());
    }
  }
  try {
    executor_.execute(batch, bucket);
  } catch (const DeviceFault& fault) {
    fail_on_device_fault(fault, batch);
  } catch (...) {
    fail_unfinished(batch, executor_failure("batch (bucket " + std::to_string(bucket) + ", " +
                                            std::to_string(tasks_in_batch) + " jobs)"));
  }
}

void Scheduler::stop() {
  const std::lock_guard stop_lock(stop_mutex_);
  // Static: the running batch (if any) is asked to stop early; the join below waits for it to
  // return. Continuous: the worker returns after the admit/step in progress, so the tasks are
  // cancelled only after the join; cancelled now, that step would fail its rows CANCELLED (the
  // client's doing) instead of UNAVAILABLE (the server's, which clients retry).
  const bool cancel_before_join = config_.mode == BatchingMode::kStatic;
  std::deque<QueuedTask> abandoned;
  std::vector<std::shared_ptr<Task>> running;
  {
    const std::lock_guard lock(mutex_);
    draining_ = true;
    stopping_ = true;
    abandoned.swap(queue_);
    // Tasks still being admitted take themselves out of the count when they see stopping_.
    queued_batch_ -= std::count_if(abandoned.begin(), abandoned.end(), [](const QueuedTask& q) {
      return q.task->ticket().priority == TaskPriority::kBatch;
    });
    last_end_user_.clear();
    if (cancel_before_join) running = in_flight_;
  }
  wake_worker_.notify_all();
  work_done_.notify_all();
  for (const auto& queued : abandoned) fail_quietly(*queued.task, unavailable(kShuttingDown));
  for (const auto& task : running) task->cancel();
  if (worker_.joinable()) worker_.join();

  std::vector<std::shared_ptr<Task>> left_running;
  {
    const std::lock_guard lock(mutex_);
    left_running.swap(in_flight_);
  }
  // An executor that stopped early may leave a cancelled task without an outcome, and a
  // continuous worker leaves its cleared slots' tasks without one; every accepted task gets
  // exactly one.
  fail_unfinished(left_running, unavailable(kShutDownWhileRunning));
  // Tasks past their slots may still be meshing on the executor's threads: stop that work.
  if (!cancel_before_join) {
    for (const auto& task : left_running) task->cancel();
  }
}

}  // namespace cube3d
