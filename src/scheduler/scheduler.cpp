#include "cube3d/scheduler/scheduler.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>
#include <string>
#include <utility>

#include "cube3d/core/error.h"
#include "cube3d/scheduler/bucket_policy.h"

namespace cube3d {
namespace {

constexpr const char* kShuttingDown = "server is shutting down";

double milliseconds_between(SteadyClock::time_point from, SteadyClock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

// Outcome callbacks belong to the server; one that throws must not take the worker down.
void fail_quietly(Job& job, const Error& error) {
  try {
    job.fail(error);
  } catch (const std::exception& e) {
    spdlog::error("scheduler: request {}: outcome callback threw: {}", job.request().request_id,
                  e.what());
  } catch (...) {
    spdlog::error("scheduler: request {}: outcome callback threw", job.request().request_id);
  }
}

void fail_unfinished(const std::vector<std::shared_ptr<Job>>& batch, const Error& error) {
  for (const auto& job : batch) {
    if (!job->finished()) fail_quietly(*job, error);
  }
}

SchedulerConfig validated(SchedulerConfig config) {
  validate_scheduler_config(config);
  return config;
}

}  // namespace

void validate_scheduler_config(const SchedulerConfig& config) {
  validate_batch_buckets(config.batch_buckets);
  if (config.max_queue_delay_ms < 0 || config.max_queue_delay_ms > kMaxQueueDelayMs) {
    throw invalid_argument("max_queue_delay_ms: " + std::to_string(config.max_queue_delay_ms) +
                           " is outside [0, " + std::to_string(kMaxQueueDelayMs) + "]");
  }
  if (config.max_queue_size < 1) {
    throw invalid_argument("max_queue_size: must be >= 1, got " +
                           std::to_string(config.max_queue_size));
  }
}

Scheduler::Scheduler(SchedulerConfig config, BatchExecutor& executor, BatchObserver on_batch)
    : config_(validated(std::move(config))),
      executor_(executor),
      on_batch_(std::move(on_batch)),
      largest_bucket_(config_.batch_buckets.back()),
      worker_(&Scheduler::run_worker, this) {}

Scheduler::~Scheduler() { stop(); }

void Scheduler::submit(std::shared_ptr<Job> job) {
  if (!job) throw internal_error("Scheduler::submit: null job");
  {
    const std::lock_guard lock(mutex_);
    if (draining_ || stopping_) throw unavailable(kShuttingDown);
    if (job->expired()) {
      throw deadline_exceeded("deadline already passed before the request was queued");
    }
    const auto waiting = static_cast<int64_t>(queue_.size()) + admitting_;
    if (waiting >= config_.max_queue_size) {
      throw resource_exhausted("queue full (" + std::to_string(waiting) + " waiting); retry later");
    }
    ++admitting_;  // holds the slot while kQueued is reported below
  }
  // Reported before the worker can see the job, so that "queued" always comes before the
  // executor's progress; outside the lock because the callback may write to a slow stream.
  try {
    job->progress(JobProgress{JobStage::kQueued});
  } catch (...) {
    {
      const std::lock_guard lock(mutex_);
      --admitting_;
    }
    work_done_.notify_all();
    throw;
  }
  bool stopped_meanwhile = false;
  {
    const std::lock_guard lock(mutex_);
    --admitting_;
    stopped_meanwhile = stopping_;
    if (!stopped_meanwhile) queue_.push_back(QueuedJob{job, SteadyClock::now()});
  }
  work_done_.notify_all();
  if (stopped_meanwhile) {
    // Already accepted (it said "queued"), so it gets an outcome rather than an exception.
    fail_quietly(*job, unavailable(kShuttingDown));
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
                               [](const auto& job) { return !job->finished(); }));
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

int64_t Scheduler::running_jobs() const {
  const std::lock_guard lock(mutex_);
  return std::count_if(in_flight_.begin(), in_flight_.end(),
                       [](const auto& job) { return !job->finished(); });
}

bool Scheduler::draining() const {
  const std::lock_guard lock(mutex_);
  return draining_;
}

bool Scheduler::idle_locked() const {
  return queue_.empty() && admitting_ == 0 && !executing_ &&
         std::all_of(in_flight_.begin(), in_flight_.end(),
                     [](const auto& job) { return job->finished(); });
}

void Scheduler::drop_cancelled_and_expired(SteadyClock::time_point now,
                                           std::vector<Rejected>& rejected) {
  std::erase_if(queue_, [&](const QueuedJob& queued) {
    if (queued.job->cancelled()) {
      rejected.push_back({queued.job, cancelled("request cancelled while queued")});
      return true;
    }
    if (queued.job->expired(now)) {
      const auto waited_ms = static_cast<int64_t>(milliseconds_between(queued.submitted, now));
      rejected.push_back(
          {queued.job, deadline_exceeded("deadline passed after " + std::to_string(waited_ms) +
                                         " ms in the queue")});
      return true;
    }
    return false;
  });
}

std::vector<std::shared_ptr<Job>> Scheduler::take_batch(int64_t count) {
  std::vector<std::shared_ptr<Job>> batch;
  batch.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    batch.push_back(std::move(queue_.front().job));
    queue_.pop_front();
  }
  return batch;
}

void Scheduler::run_worker() {
  std::unique_lock lock(mutex_);
  const auto max_delay = std::chrono::milliseconds(config_.max_queue_delay_ms);
  while (!stopping_) {
    const auto now = SteadyClock::now();
    std::vector<Rejected> rejected;
    drop_cancelled_and_expired(now, rejected);
    if (!rejected.empty()) {
      lock.unlock();
      for (const auto& [job, error] : rejected) {
        spdlog::debug("scheduler: request {} dropped: {}", job->request().request_id, error.what());
        fail_quietly(*job, error);
      }
      lock.lock();
      work_done_.notify_all();
      continue;  // the queue may have changed meanwhile
    }
    if (queue_.empty()) {
      wake_worker_.wait(lock);
      continue;
    }
    const auto dispatch_at = queue_.front().submitted + max_delay;
    const auto waiting = static_cast<int64_t>(queue_.size());
    if (!draining_ && waiting < largest_bucket_ && now < dispatch_at) {
      // Wait for company, but wake for the earliest deadline so that it fails promptly.
      const auto earliest_deadline =
          std::min_element(queue_.begin(), queue_.end(), [](const auto& a, const auto& b) {
            return a.job->deadline() < b.job->deadline();
          })->job->deadline();
      wake_worker_.wait_until(lock, std::min(dispatch_at, earliest_deadline));
      continue;
    }

    const int64_t bucket = choose_bucket(waiting, config_.batch_buckets);
    const double oldest_wait_ms = milliseconds_between(queue_.front().submitted, now);
    const auto batch = take_batch(std::min(bucket, waiting));
    std::erase_if(in_flight_, [](const auto& job) { return job->finished(); });
    in_flight_.insert(in_flight_.end(), batch.begin(), batch.end());
    executing_ = true;
    spdlog::debug("scheduler: batch bucket={} jobs={} oldest_wait_ms={:.1f} still_queued={}",
                  bucket, batch.size(), oldest_wait_ms, queue_.size());
    lock.unlock();
    run_batch(batch, bucket);
    lock.lock();
    executing_ = false;
    work_done_.notify_all();
  }
}

void Scheduler::run_batch(const std::vector<std::shared_ptr<Job>>& batch, int64_t bucket) {
  const auto jobs_in_batch = static_cast<int64_t>(batch.size());
  if (on_batch_) {
    try {
      on_batch_(bucket, jobs_in_batch);
    } catch (const std::exception& e) {
      spdlog::warn("scheduler: batch observer threw: {}", e.what());
    }
  }
  try {
    executor_.execute(batch, bucket);
  } catch (const Error& e) {
    spdlog::warn("scheduler: batch (bucket {}, {} jobs) failed: {} {}", bucket, jobs_in_batch,
                 to_string(e.code()), e.what());
    fail_unfinished(batch, e);
  } catch (const std::exception& e) {
    spdlog::error("scheduler: batch (bucket {}, {} jobs) failed: {}", bucket, jobs_in_batch,
                  e.what());
    fail_unfinished(batch, internal_error(std::string("batch executor failed: ") + e.what()));
  } catch (...) {
    spdlog::error("scheduler: batch (bucket {}, {} jobs) failed with a non-standard exception",
                  bucket, jobs_in_batch);
    fail_unfinished(batch, internal_error("batch executor failed with a non-standard exception"));
  }
}

void Scheduler::stop() {
  const std::lock_guard stop_lock(stop_mutex_);
  std::deque<QueuedJob> abandoned;
  std::vector<std::shared_ptr<Job>> running;
  {
    const std::lock_guard lock(mutex_);
    draining_ = true;
    stopping_ = true;
    abandoned.swap(queue_);
    running = in_flight_;
  }
  wake_worker_.notify_all();
  work_done_.notify_all();
  for (const auto& queued : abandoned) fail_quietly(*queued.job, unavailable(kShuttingDown));
  // The running batch (if any) is asked to stop early; the join below waits for it to return.
  for (const auto& job : running) job->cancel();
  if (worker_.joinable()) worker_.join();

  std::vector<std::shared_ptr<Job>> left_running;
  {
    const std::lock_guard lock(mutex_);
    left_running.swap(in_flight_);
  }
  // An executor that stopped early may leave a cancelled job without an outcome; every
  // accepted job gets exactly one.
  fail_unfinished(left_running, unavailable("server shut down while the request was running"));
}

}  // namespace cube3d
