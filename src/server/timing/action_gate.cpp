#include "cube3d/server/timing/action_gate.h"

#include <utility>

namespace cube3d {

ActionGate::Pass& ActionGate::Pass::operator=(Pass&& other) noexcept {
  if (this != &other) {
    end();
    gate_ = other.gate_;
    other.gate_ = nullptr;
  }
  return *this;
}

void ActionGate::Pass::end() {
  if (gate_ == nullptr) return;
  ActionGate& gate = *gate_;
  gate_ = nullptr;
  const std::lock_guard lock(gate.mutex_);
  --gate.in_progress_;
  // Under the lock: a wait_idle() woken by something else cannot see the count at 0, return
  // and let its owner destroy the gate before this notify is done with it.
  gate.idle_.notify_all();
}

ActionGate::Pass ActionGate::enter() {
  const std::lock_guard lock(mutex_);
  return enter_locked();
}

ActionGate::Pass ActionGate::enter_locked() {
  if (closed_) return Pass();
  ++in_progress_;
  return Pass(this);
}

bool ActionGate::schedule(TimerQueue& timers, TimerQueue::Timer& slot,
                          std::chrono::milliseconds delay, std::function<void()> action) {
  const std::lock_guard lock(mutex_);
  if (closed_) return false;
  slot = timers.schedule_after(delay, std::move(action));
  return true;
}

void ActionGate::wait_idle(std::unique_lock<std::mutex>& lock) {
  idle_.wait(lock, [this] { return in_progress_ == 0; });
}

}  // namespace cube3d
