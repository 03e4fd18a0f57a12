#include "cube3d/server/watchdog.h"

#include <utility>

namespace cube3d {

Watchdog::Watchdog(std::chrono::milliseconds limit) : limit_(limit), thread_([this] { run(); }) {}

Watchdog::~Watchdog() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

Watchdog::Watch::Watch(Watch&& other) noexcept : owner_(other.owner_), id_(other.id_) {
  other.owner_ = nullptr;
}

Watchdog::Watch::~Watch() { close(); }

bool Watchdog::Watch::close() {
  if (owner_ == nullptr) return false;
  Watchdog* const owner = std::exchange(owner_, nullptr);
  return owner->close(id_);
}

Watchdog::Watch Watchdog::watch(std::function<void()> cancel) {
  uint64_t id = 0;
  {
    const std::lock_guard lock(mutex_);
    id = next_id_++;
    // Every watch has the same limit, so entries are due in id order.
    open_.emplace(id, Entry{std::chrono::steady_clock::now() + limit_, std::move(cancel)});
  }
  changed_.notify_all();
  return Watch(this, id);
}

bool Watchdog::close(uint64_t id) {
  // Waits while a cancel action runs (it runs under the lock): after close(), the action
  // neither runs nor is running.
  const std::lock_guard lock(mutex_);
  const auto it = open_.find(id);
  if (it == open_.end()) return false;
  const bool fired = it->second.fired;
  open_.erase(it);
  changed_.notify_all();  // the watchdog may be waiting for this one
  return fired;
}

void Watchdog::run() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    // The first entry not yet fired is the next due.
    auto next = open_.begin();
    while (next != open_.end() && next->second.fired) ++next;
    if (next == open_.end()) {
      changed_.wait(lock);
      continue;
    }
    // A copy: wait_until reads its time point after waking, when close() may have erased the
    // entry.
    const std::chrono::steady_clock::time_point due = next->second.due;
    if (std::chrono::steady_clock::now() < due) {
      changed_.wait_until(lock, due);
      continue;
    }
    next->second.fired = true;
    // Under the lock: the watch cannot close (and its owner cannot go) while this runs.
    if (next->second.cancel) next->second.cancel();
  }
}

}  // namespace cube3d
