// What an object that closes needs against its own timer actions (a long-poll's answer, a lease
// renewal, an expiry sweep, run on a TimerQueue's thread): close() marks it closed and then
// waits until no action is past its start, so that no action touches the object once close()
// returns; an action that starts later finds it closed and does nothing, and schedule() arms no
// timer once it is closed. The memory and Redis job stores and the Redis result tier each use
// one.
//
// The gate keeps no lock of its own: it is guarded by its owner's mutex, the one that guards the
// state the actions read, so that "closed" and that state are seen together. A Pass (an action
// in progress) ends when it is destroyed, however the action leaves (a return, an exception the
// TimerQueue catches): a count held by hand would stay up after a throw and hang close() for
// ever, and the server's shutdown with it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>

#include "cube3d/server/timing/timer_queue.h"

namespace cube3d {

class ActionGate {
 public:
  // `mutex` is the owner's, and must outlive the gate and every Pass.
  explicit ActionGate(std::mutex& mutex) : mutex_(mutex) {}
  ActionGate(const ActionGate&) = delete;
  ActionGate& operator=(const ActionGate&) = delete;

  // An action in progress while it lives; empty (false) when the gate was closed. Destroy it
  // without the owner's mutex held (it takes the mutex to end the action).
  class Pass {
   public:
    Pass() = default;
    Pass(Pass&& other) noexcept : gate_(other.gate_) { other.gate_ = nullptr; }
    Pass& operator=(Pass&& other) noexcept;
    Pass(const Pass&) = delete;
    Pass& operator=(const Pass&) = delete;
    ~Pass() { end(); }
    explicit operator bool() const { return gate_ != nullptr; }

   private:
    friend class ActionGate;
    explicit Pass(ActionGate* gate) : gate_(gate) {}
    void end();
    ActionGate* gate_ = nullptr;
  };

  // Takes the owner's mutex: an action starts, unless the gate is closed.
  [[nodiscard]] Pass enter();
  // The same with the owner's mutex already held (an action that starts only after what it
  // looked up under that lock).
  [[nodiscard]] Pass enter_locked();

  // Takes the owner's mutex: unless the gate is closed, `slot` (a member the owner guards with
  // that mutex) becomes `action` scheduled on `timers` after `delay`; false, and `slot` left as
  // it is, when closed. The check and the arming under one lock are what the owner's close()
  // relies on: after close_locked() no timer is armed, so the one it takes out of `slot` under
  // that lock and cancels is the last. The action itself still enters the gate when it runs.
  bool schedule(TimerQueue& timers, TimerQueue::Timer& slot, std::chrono::milliseconds delay,
                std::function<void()> action);

  // With the owner's mutex held.
  bool closed() const { return closed_; }
  int in_progress() const { return in_progress_; }
  // With the owner's mutex held: no action starts from now on.
  void close_locked() { closed_ = true; }
  // With the owner's mutex held through `lock`: returns once no action is in progress (the lock
  // released while it waits, held again when it returns).
  void wait_idle(std::unique_lock<std::mutex>& lock);

 private:
  std::mutex& mutex_;
  std::condition_variable idle_;
  bool closed_ = false;
  int in_progress_ = 0;
};

}  // namespace cube3d
