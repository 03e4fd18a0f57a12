// What the scheduler's test files (and the executor's fault tests, which drive the real scheduler)
// share besides the fake executor: the recorder of every task's outcome, a task run to its end,
// the error a submit throws, the check that a bad config is refused naming its field, and task ids
// built without GCC 12's false -Wstringop-overflow on "literal" + std::string&&.
#pragma once

#include <gtest/gtest.h>

#include <any>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cube3d/core/clock.h"
#include "cube3d/core/error.h"
#include "cube3d/scheduler/scheduler.h"
#include "cube3d/scheduler/task.h"

namespace cube3d::test {

// For things that should happen at once: only hit on failure.
inline constexpr std::chrono::seconds kLongWait{5};
inline constexpr auto kNoDeadline = SteadyClock::time_point::max();

// What one task reported.
struct TaskOutcome {
  bool ok = false;
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
  int64_t bucket = 0;  // the result's batch bucket
  SteadyClock::time_point at;
};

// What the fake executors hand back as a task's result (the scheduler passes it on unread).
struct FakeTaskResult {
  std::string request_id;
  int64_t batch_bucket = 0;
};

// Records what every task of a test reports (the first outcome of each, and how many it got) and
// the stages of its progress reports. Outlives the scheduler (declare it first).
class TaskOutcomes {
 public:
  // `wait`: how long wait(id) waits before failing the test.
  explicit TaskOutcomes(std::chrono::milliseconds wait = kLongWait) : wait_(wait) {}

  // A task whose outcome is recorded; `on_progress` also sees its progress reports (and may throw,
  // as a closed stream does).
  // `payload` is what the executor reads (none for the scheduler's fake executors).
  std::shared_ptr<Task> make_task(TaskTicket request, SteadyClock::time_point deadline,
                                  std::function<void(const TaskProgress&)> on_progress = {},
                                  std::any payload = {}) {
    const std::string id = request.request_id;
    return std::make_shared<Task>(
        std::move(request), std::move(payload), deadline,
        [this, id, on_progress = std::move(on_progress)](const TaskProgress& progress) {
          {
            const std::lock_guard lock(mutex_);
            stages_[id].push_back(progress.stage);
          }
          if (on_progress) on_progress(progress);
        },
        [this, id](const std::any* result, const Error* error) { record(id, result, error); });
  }
  std::shared_ptr<Task> make_task(const std::string& id,
                                  SteadyClock::time_point deadline = kNoDeadline) {
    TaskTicket request;
    request.request_id = id;
    return make_task(std::move(request), deadline);
  }

  // Waits until `count` distinct tasks have an outcome.
  bool wait_for(size_t count, std::chrono::milliseconds timeout = kLongWait) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return outcomes_.size() >= count; });
  }
  bool wait_for(const std::string& id, std::chrono::milliseconds timeout = kLongWait) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return outcomes_.contains(id); });
  }
  // The outcome of `id`, waiting for it; a failure of the test when none comes.
  TaskOutcome wait(const std::string& id) {
    if (!wait_for(id, wait_)) {
      ADD_FAILURE() << "no outcome for " << id;
      return {};
    }
    return *get(id);
  }
  std::optional<TaskOutcome> get(const std::string& id) const {
    const std::lock_guard lock(mutex_);
    const auto it = outcomes_.find(id);
    if (it == outcomes_.end()) return std::nullopt;
    return it->second;
  }
  // How many outcomes `id` got (a task reports exactly one).
  int deliveries(const std::string& id) const {
    const std::lock_guard lock(mutex_);
    const auto it = deliveries_.find(id);
    return it == deliveries_.end() ? 0 : it->second;
  }
  size_t count() const {
    const std::lock_guard lock(mutex_);
    return outcomes_.size();
  }
  std::vector<TaskStage> stages(const std::string& id) const {
    const std::lock_guard lock(mutex_);
    const auto it = stages_.find(id);
    return it == stages_.end() ? std::vector<TaskStage>{} : it->second;
  }

 private:
  void record(const std::string& id, const std::any* result, const Error* error) {
    TaskOutcome outcome;
    outcome.ok = result != nullptr;
    // The fake executors' results say their bucket (a real executor's result is its own type).
    if (const auto* fake = result ? std::any_cast<FakeTaskResult>(result) : nullptr) {
      outcome.bucket = fake->batch_bucket;
    }
    if (error) {
      outcome.code = error->code();
      outcome.message = error->what();
    }
    outcome.at = SteadyClock::now();
    {
      const std::lock_guard lock(mutex_);
      ++deliveries_[id];
      outcomes_.emplace(id, std::move(outcome));
    }
    changed_.notify_all();
  }

  const std::chrono::milliseconds wait_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, TaskOutcome> outcomes_;
  std::map<std::string, int> deliveries_;
  std::map<std::string, std::vector<TaskStage>> stages_;
};

// The error that `submit` throws, if any.
inline std::optional<Error> submit_error(Scheduler& scheduler, std::shared_ptr<Task> task) {
  try {
    scheduler.submit(std::move(task));
  } catch (const Error& e) {
    return e;
  }
  return std::nullopt;
}

// Submits the plain task `id` and waits for its outcome; used to show the worker still takes work
// and to run a task alone.
inline TaskOutcome submit_and_wait(Scheduler& scheduler, TaskOutcomes& outcomes,
                                   const std::string& id) {
  scheduler.submit(outcomes.make_task(id));
  return outcomes.wait(id);
}

// validate_scheduler_config refuses `config` as INVALID_ARGUMENT naming `field`.
inline void expect_config_rejected(const SchedulerConfig& config, const std::string& field) {
  try {
    validate_scheduler_config(config);
    ADD_FAILURE() << "accepted a bad " << field;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

// "<prefix>-<index>", built by appending.
inline std::string task_id(const std::string& prefix, int index) {
  std::string id = prefix;
  id += '-';
  id += std::to_string(index);
  return id;
}

}  // namespace cube3d::test
