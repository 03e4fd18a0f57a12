// The messages a gRPC reactor has yet to write, and the one it is writing. gRPC takes one write
// at a time, so the front stays queued (its address handed to StartWrite) until OnWriteDone; a
// client that takes no message for grpc.write_timeout_ms is cancelled, through a timer armed
// with each write and disarmed when it is done. Both reactors (GenerateMesh's and the inference
// protocol's stream) write through one, under their own lock; when the queue is empty and what
// ends the call is theirs to say.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <iterator>
#include <utility>

#include "cube3d/server/timing/timer_queue.h"

namespace cube3d {

template <typename Message>
class WriteQueue {
 public:
  void push(Message message) { queued_.push_back(std::move(message)); }

  bool empty() const { return queued_.empty(); }
  size_t size() const { return queued_.size(); }
  bool writing() const { return writing_; }

  // The front, now being written, for StartWrite; `on_timeout` runs on the TimerQueue's thread
  // when the write is not done within `limit`. Not empty, not writing.
  Message* start(TimerQueue& timers, std::chrono::milliseconds limit,
                 std::function<void()> on_timeout) {
    writing_ = true;
    timer_ = timers.schedule_after(limit, std::move(on_timeout));
    return &queued_.front();
  }

  // OnWriteDone(ok): the front is written. Not ok: the client is gone, nothing more goes out.
  void written(bool ok) {
    writing_ = false;
    timer_.cancel();
    if (!queued_.empty()) queued_.pop_front();
    if (!ok) queued_.clear();
  }

  // Drops what waits, keeping the message being written until written().
  void drop_waiting() {
    queued_.erase(writing_ ? std::next(queued_.begin()) : queued_.begin(), queued_.end());
  }

  // The call is done (OnDone): no timeout may fire for it.
  void stop_timer() { timer_.cancel(); }

 private:
  std::deque<Message> queued_;  // the front is being written while writing_
  bool writing_ = false;
  TimerQueue::Timer timer_;
};

}  // namespace cube3d
