// Actions due at a time, run on one thread of their own: the service core's request deadlines
// and the gRPC front door's request-read timeouts, for any number of calls, without a thread
// (or a polling loop) per call. Transport-free (an action is a function), tested on its own.
//
// An action runs at most once, on the queue's thread, at or after its due time, and never while
// the queue's lock is held: it may schedule and cancel timers itself. Cancelling never waits for
// an action that is running, so that an action and the code that cancels it may take the same
// lock; an action must therefore stay safe to run after it is cancelled (capture weak pointers
// and check a "done" flag under the lock it shares with its owner).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

namespace cube3d {

class TimerQueue {
 public:
  using Clock = std::chrono::steady_clock;

  TimerQueue();
  // Drops the actions still pending (they never run) and joins the thread; an action that is
  // running finishes first.
  ~TimerQueue();
  TimerQueue(const TimerQueue&) = delete;
  TimerQueue& operator=(const TimerQueue&) = delete;

  // One scheduled action. Destroying it cancels it; the queue must outlive it.
  class Timer {
   public:
    Timer() = default;
    Timer(Timer&& other) noexcept { *this = std::move(other); }
    Timer& operator=(Timer&& other) noexcept;
    Timer(const Timer&) = delete;
    Timer& operator=(const Timer&) = delete;
    ~Timer() { cancel(); }

    // Withdraws the action if it has not started. Returns true when it had started (it ran,
    // or is running on the queue's thread now), false when it was withdrawn or there was none.
    // Never waits. Later calls return false.
    bool cancel();
    explicit operator bool() const { return queue_ != nullptr; }

   private:
    friend class TimerQueue;
    Timer(TimerQueue* queue, Clock::time_point due, uint64_t id)
        : queue_(queue), due_(due), id_(id) {}
    TimerQueue* queue_ = nullptr;
    Clock::time_point due_{};
    uint64_t id_ = 0;
  };

  // Runs `action` at `due` (at once, on the queue's thread, when `due` has passed).
  [[nodiscard]] Timer schedule(Clock::time_point due, std::function<void()> action);
  [[nodiscard]] Timer schedule_after(std::chrono::milliseconds delay,
                                     std::function<void()> action) {
    return schedule(Clock::now() + delay, std::move(action));
  }

  size_t pending() const;  // actions not yet started (for tests and metrics)

 private:
  bool withdraw(Clock::time_point due, uint64_t id);  // true: it was pending
  void run();

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  // By due time, then by id (the order of scheduling): equal due times run in that order.
  std::map<std::pair<Clock::time_point, uint64_t>, std::function<void()>> pending_;
  uint64_t next_id_ = 0;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after the members it uses
};

}  // namespace cube3d
