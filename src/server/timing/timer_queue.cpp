#include "cube3d/server/timing/timer_queue.h"

#include <spdlog/spdlog.h>

#include <exception>

namespace cube3d {

TimerQueue::TimerQueue() : thread_([this] { run(); }) {}

TimerQueue::~TimerQueue() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
    pending_.clear();
  }
  changed_.notify_all();
  thread_.join();
}

TimerQueue::Timer& TimerQueue::Timer::operator=(Timer&& other) noexcept {
  if (this != &other) {
    cancel();
    queue_ = std::exchange(other.queue_, nullptr);
    due_ = other.due_;
    id_ = other.id_;
  }
  return *this;
}

bool TimerQueue::Timer::cancel() {
  if (queue_ == nullptr) return false;
  TimerQueue* const queue = std::exchange(queue_, nullptr);
  return !queue->withdraw(due_, id_);
}

TimerQueue::Timer TimerQueue::schedule(Clock::time_point due, std::function<void()> action) {
  uint64_t id = 0;
  bool first = false;
  {
    const std::lock_guard lock(mutex_);
    id = next_id_++;
    const auto it = pending_.emplace(std::make_pair(due, id), std::move(action)).first;
    first = it == pending_.begin();
  }
  // Only a new earliest entry changes how long the thread sleeps.
  if (first) changed_.notify_all();
  return Timer(this, due, id);
}

size_t TimerQueue::pending() const {
  const std::lock_guard lock(mutex_);
  return pending_.size();
}

bool TimerQueue::withdraw(Clock::time_point due, uint64_t id) {
  const std::lock_guard lock(mutex_);
  return pending_.erase(std::make_pair(due, id)) > 0;
}

void TimerQueue::run() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (pending_.empty()) {
      changed_.wait(lock);
      continue;
    }
    // A copy: the entry may be withdrawn while the thread waits for it.
    const Clock::time_point due = pending_.begin()->first.first;
    if (Clock::now() < due) {
      changed_.wait_until(lock, due);
      continue;
    }
    std::function<void()> action = std::move(pending_.begin()->second);
    pending_.erase(pending_.begin());
    lock.unlock();
    try {
      if (action) action();
    } catch (const std::exception& e) {
      spdlog::error("timer action threw: {}", e.what());
    } catch (...) {
      spdlog::error("timer action threw a non-standard exception");
    }
    action = nullptr;  // what it captured goes before the lock is taken again
    lock.lock();
  }
}

}  // namespace cube3d
