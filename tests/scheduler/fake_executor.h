// Test support: the one fake BatchExecutor of the scheduler's tests, for both batching modes, so
// that a change to the executor contract is made (and checked) in one place.
//   static      execute() records every batch, can hold it until release() (or until all its
//               tasks are cancelled, as the real executor stops early), and can throw part-way.
//   continuous  with decode slots, admit() / step() keep the slots in a vector and generate one
//               "token" per slot per step (the first at admission). Every admission and every
//               task's admit/done/drop/clear is recorded in order; steps can be held until
//               release(); admit or step can throw; breaches of the contract are recorded.
// Without slots the continuous methods are BatchExecutor's own defaults, so that the tests see
// what a static-only executor inherits (a continuous scheduler refuses it).
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cube3d/core/clock.h"
#include "cube3d/core/error.h"
#include "cube3d/scheduler/batch_executor.h"
#include "cube3d/scheduler/task.h"
#include "scheduler_test_support.h"  // kLongWait

namespace cube3d::test {

// The tokens a task needs unless set_tokens() says otherwise (continuous mode).
inline constexpr int64_t kTokensPerTask = 5;
// Never finishes on its own: the task holds its slot until cancelled or cleared.
inline constexpr int64_t kEndless = std::numeric_limits<int64_t>::max();

// One execute() call.
struct RecordedBatch {
  int64_t bucket = 0;
  std::vector<std::string> ids;
  SteadyClock::time_point started;
};

// One admit() call.
struct Admission {
  std::vector<std::string> ids;
  int64_t active_before = 0;  // slots running when it came
  size_t steps_before = 0;    // steps started before it
  SteadyClock::time_point at;
};

class FakeExecutor : public BatchExecutor {
 public:
  // `slots`: the decode slots of continuous batching (the largest bucket's rows, which the
  // scheduler must never admit past); 0 runs static batches only.
  explicit FakeExecutor(int64_t slots = 0) : capacity_(slots) {}

  // --- configuration -------------------------------------------------------------------------

  // Task `id` needs `tokens` tokens instead of kTokensPerTask.
  void set_tokens(const std::string& id, int64_t tokens) {
    const std::lock_guard lock(mutex_);
    tokens_[id] = tokens;
  }
  // Batches and steps block from now on until release(); a batch also goes on once all its tasks
  // are cancelled. Admissions never block.
  void hold() {
    const std::lock_guard lock(mutex_);
    held_ = true;
  }
  void release() {
    {
      const std::lock_guard lock(mutex_);
      held_ = false;
    }
    changed_.notify_all();
  }
  // Batch number `index` (from 0) succeeds its first `succeed_first` tasks, then calls `thrower`.
  void throw_on_batch(size_t index, std::function<void()> thrower, size_t succeed_first = 0) {
    const std::lock_guard lock(mutex_);
    batch_throw_index_ = index;
    batch_thrower_ = std::move(thrower);
    succeed_first_ = succeed_first;
  }
  // Admission / step number `index` (from 0) calls `thrower` instead of doing its work.
  void throw_on_admission(size_t index, std::function<void()> thrower) {
    const std::lock_guard lock(mutex_);
    admission_throw_index_ = index;
    admission_thrower_ = std::move(thrower);
  }
  void throw_on_step(size_t index, std::function<void()> thrower) {
    const std::lock_guard lock(mutex_);
    step_throw_index_ = index;
    step_thrower_ = std::move(thrower);
  }

  // --- waits ---------------------------------------------------------------------------------

  bool wait_for_batches(size_t count, std::chrono::milliseconds timeout = kLongWait) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return batches_.size() >= count; });
  }
  bool wait_for_steps_started(size_t count) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, kLongWait, [&] { return steps_started_ >= count; });
  }
  bool wait_for_admitted(size_t tasks) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, kLongWait, [&] { return admitted_tasks_ >= tasks; });
  }

  // --- what happened: static batches ---------------------------------------------------------

  std::vector<RecordedBatch> batches() const {
    const std::lock_guard lock(mutex_);
    return batches_;
  }
  // How many execute() calls (a scheduler in continuous mode makes none).
  size_t static_batches() const {
    const std::lock_guard lock(mutex_);
    return batches_.size();
  }
  // Every task id of every batch.
  std::set<std::string> executed_ids() const {
    const std::lock_guard lock(mutex_);
    std::set<std::string> ids;
    for (const auto& batch : batches_) ids.insert(batch.ids.begin(), batch.ids.end());
    return ids;
  }

  // --- what happened: continuous batching ----------------------------------------------------

  std::vector<Admission> admissions() const {
    const std::lock_guard lock(mutex_);
    return admissions_;
  }
  // Every admitted task id, in admission order.
  std::vector<std::string> admitted_ids() const {
    const std::lock_guard lock(mutex_);
    std::vector<std::string> ids;
    for (const auto& admission : admissions_) {
      ids.insert(ids.end(), admission.ids.begin(), admission.ids.end());
    }
    return ids;
  }
  // "admit:<id>", "done:<id>" (tokens complete), "dropped:<id>" (cancelled), "cleared:<id>".
  std::vector<std::string> events() const {
    const std::lock_guard lock(mutex_);
    return events_;
  }
  // Position of `event` in events(), or events().size() when absent.
  size_t position_of(const std::string& event) const {
    const std::lock_guard lock(mutex_);
    return static_cast<size_t>(std::find(events_.begin(), events_.end(), event) - events_.begin());
  }
  int64_t max_active() const {
    const std::lock_guard lock(mutex_);
    return max_active_;
  }
  size_t clear_calls() const {
    const std::lock_guard lock(mutex_);
    return clear_calls_;
  }
  // Breaches of the BatchExecutor contract by the scheduler (or a held step that timed out).
  std::vector<std::string> violations() const {
    const std::lock_guard lock(mutex_);
    return violations_;
  }

  // --- BatchExecutor -------------------------------------------------------------------------

  void execute(const std::vector<std::shared_ptr<Task>>& tasks, int64_t bucket) override {
    std::function<void()> thrower;
    size_t succeed_first = 0;
    {
      std::unique_lock lock(mutex_);
      RecordedBatch batch{bucket, {}, SteadyClock::now()};
      for (const auto& task : tasks) batch.ids.push_back(task->ticket().request_id);
      const size_t index = batches_.size();
      batches_.push_back(std::move(batch));
      changed_.notify_all();
      // Cancellation does not notify anyone, so look at it every few milliseconds.
      while (held_ && !all_cancelled(tasks)) changed_.wait_for(lock, std::chrono::milliseconds(5));
      if (batch_thrower_ && index == batch_throw_index_) {
        thrower = batch_thrower_;
        succeed_first = succeed_first_;
      }
    }
    if (thrower) {
      for (size_t i = 0; i < succeed_first && i < tasks.size(); ++i) succeed(*tasks[i], bucket);
      thrower();
    }
    for (const auto& task : tasks) {
      if (task->cancelled()) {
        task->fail(cancelled("cancelled while running"));
      } else {
        succeed(*task, bucket);
      }
    }
  }

  // Without slots, BatchExecutor's answers below: what an executor of static batches inherits.
  bool supports_continuous() const override {
    return continuous() || BatchExecutor::supports_continuous();
  }

  int64_t active_slots() const override {
    if (!continuous()) return BatchExecutor::active_slots();
    const std::lock_guard lock(mutex_);
    return static_cast<int64_t>(slots_.size());
  }

  void admit(const std::vector<std::shared_ptr<Task>>& tasks) override {
    if (!continuous()) return BatchExecutor::admit(tasks);
    std::function<void()> thrower;
    std::vector<std::shared_ptr<Task>> done;
    {
      const std::lock_guard lock(mutex_);
      Admission admission{
          {}, static_cast<int64_t>(slots_.size()), steps_started_, SteadyClock::now()};
      for (const auto& task : tasks) admission.ids.push_back(task->ticket().request_id);
      if (tasks.empty()) violations_.push_back("empty admission");
      if (static_cast<int64_t>(slots_.size() + tasks.size()) > capacity_) {
        violations_.push_back("admission past the free slots");
      }
      const size_t index = admissions_.size();
      admissions_.push_back(std::move(admission));
      if (admission_thrower_ && index == admission_throw_index_) {
        thrower = admission_thrower_;
      } else {
        for (const auto& task : tasks) {
          const auto& id = task->ticket().request_id;
          events_.push_back("admit:" + id);
          const auto total = tokens_.contains(id) ? tokens_.at(id) : kTokensPerTask;
          if (total <= 1) {  // the first token comes with the prefill
            events_.push_back("done:" + id);
            done.push_back(task);
          } else {
            slots_.push_back(Slot{task, 1, total});
          }
        }
        admitted_tasks_ += tasks.size();
        max_active_ = std::max(max_active_, static_cast<int64_t>(slots_.size()));
      }
    }
    changed_.notify_all();
    if (thrower) thrower();  // nothing admitted
    for (const auto& task : done) succeed(*task, capacity_);
  }

  void step() override {
    if (!continuous()) return BatchExecutor::step();
    std::function<void()> thrower;
    std::vector<std::shared_ptr<Task>> done;
    std::vector<std::shared_ptr<Task>> dropped;
    {
      std::unique_lock lock(mutex_);
      const size_t index = steps_started_++;
      if (slots_.empty()) violations_.push_back("step with no active slot");
      changed_.notify_all();
      // Bounded, so that a test failing while the steps are held cannot hang in the destructor.
      if (!changed_.wait_for(lock, std::chrono::seconds(10), [&] { return !held_; })) {
        violations_.push_back("held step was never released");
      }
      if (step_thrower_ && index == step_throw_index_) {
        thrower = step_thrower_;  // the slots stay as they were
      } else {
        std::erase_if(slots_, [&](Slot& slot) {
          const auto& id = slot.task->ticket().request_id;
          if (slot.task->cancelled() || slot.task->finished()) {
            events_.push_back("dropped:" + id);
            dropped.push_back(slot.task);
            return true;
          }
          if (++slot.tokens_done < slot.tokens_total) return false;
          events_.push_back("done:" + id);
          done.push_back(slot.task);
          return true;
        });
      }
    }
    if (thrower) thrower();
    for (const auto& task : dropped) task->fail(cancelled("cancelled while running"));
    for (const auto& task : done) succeed(*task, capacity_);
    // Endless tasks keep the worker stepping; a pause keeps it from taking a whole core.
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }

  std::vector<std::shared_ptr<Task>> clear_slots() override {
    if (!continuous()) return BatchExecutor::clear_slots();
    const std::lock_guard lock(mutex_);
    ++clear_calls_;
    std::vector<std::shared_ptr<Task>> tasks;
    for (const auto& slot : slots_) {
      events_.push_back("cleared:" + slot.task->ticket().request_id);
      tasks.push_back(slot.task);
    }
    slots_.clear();
    return tasks;
  }

 private:
  struct Slot {
    std::shared_ptr<Task> task;
    int64_t tokens_done = 0;
    int64_t tokens_total = 0;
  };

  bool continuous() const { return capacity_ > 0; }

  static bool all_cancelled(const std::vector<std::shared_ptr<Task>>& tasks) {
    for (const auto& task : tasks) {
      if (!task->cancelled()) return false;
    }
    return true;
  }
  static void succeed(Task& task, int64_t bucket) {
    task.succeed(FakeTaskResult{task.ticket().request_id, bucket});
  }

  const int64_t capacity_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  bool held_ = false;
  // Static batches.
  std::vector<RecordedBatch> batches_;
  size_t batch_throw_index_ = 0;
  std::function<void()> batch_thrower_;
  size_t succeed_first_ = 0;
  // Continuous batching.
  std::map<std::string, int64_t> tokens_;
  std::vector<Slot> slots_;
  size_t admission_throw_index_ = 0;
  std::function<void()> admission_thrower_;
  size_t step_throw_index_ = 0;
  std::function<void()> step_thrower_;
  std::vector<Admission> admissions_;
  std::vector<std::string> events_;
  size_t admitted_tasks_ = 0;
  size_t steps_started_ = 0;
  int64_t max_active_ = 0;
  size_t clear_calls_ = 0;
  std::vector<std::string> violations_;
};

}  // namespace cube3d::test
