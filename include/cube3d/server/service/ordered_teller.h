// Tells a call's observer its news (progress, then one outcome) outside the owner's lock, one
// event at a time and in order. The owner (a service call, an Open Inference Protocol run)
// guards the teller with its own mutex and hands the held lock to progress() or outcome().
//
// Why outside the lock: an observer may call back into its call (cancel() from a progress
// event) or take locks of its own (a connection's). Why one at a time: several threads report
// (the scheduler's, the executor's, the timer's). An event that comes while another is being
// told waits and is told by the thread telling, so no thread waits for another; of the progress
// waiting, only the newest per key is kept (a newer report replaces an older one). Once the
// outcome is queued no progress is told: the outcome ends the queue, and what the listeners
// captured (a connection, a reactor) is released after it, outside the lock.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>

namespace cube3d {

// Key: what progress is kept per (a batch's prompt index, say); the default is one stream of
// progress, told to a listener that takes the event alone.
template <typename Progress, typename Outcome, typename Key = std::monostate>
class OrderedTeller {
  static constexpr bool kOneStream = std::is_same_v<Key, std::monostate>;

 public:
  using ProgressListener = std::conditional_t<kOneStream, std::function<void(const Progress&)>,
                                              std::function<void(const Key&, const Progress&)>>;
  using OutcomeListener = std::function<void(Outcome)>;

  // `progress` may be empty (the observer wants none); `done` is told the outcome.
  OrderedTeller(ProgressListener progress, OutcomeListener done)
      : progress_(std::move(progress)), done_(std::move(done)) {}

  // Whether progress is told at all (read under the owner's lock, or before any event).
  bool listens_to_progress() const { return static_cast<bool>(progress_); }

  // Queues `event` for `key` (replacing one waiting for it) and tells what waits, unless
  // another thread is telling. `lock` holds the owner's mutex; it is released on return.
  void progress(std::unique_lock<std::mutex> lock, Key key, Progress event) {
    if (ended_ || !progress_) return;
    pending_progress_.insert_or_assign(std::move(key), std::move(event));
    tell(std::move(lock));
  }
  void progress(std::unique_lock<std::mutex> lock, Progress event) requires kOneStream {
    progress(std::move(lock), Key{}, std::move(event));
  }

  // Queues the outcome (the first one only) and tells what waits.
  void outcome(std::unique_lock<std::mutex> lock, Outcome outcome) {
    if (ended_) return;
    ended_ = true;
    pending_outcome_ = std::move(outcome);
    tell(std::move(lock));
  }

 private:
  void tell(std::unique_lock<std::mutex> lock) {
    if (telling_) return;  // the thread telling now tells this event too
    telling_ = true;
    while (!pending_progress_.empty() || pending_outcome_) {
      if (pending_outcome_) {
        // Progress still waiting is dropped: the call is over.
        Outcome outcome = std::move(*pending_outcome_);
        pending_outcome_.reset();
        pending_progress_.clear();
        OutcomeListener done = std::move(done_);
        ProgressListener progress = std::move(progress_);
        done_ = nullptr;
        progress_ = nullptr;
        lock.unlock();
        if (done) done(std::move(outcome));
        return;  // nothing is told after the outcome: telling_ stays set
      }
      auto first = pending_progress_.begin();
      [[maybe_unused]] const Key key = first->first;
      const Progress event = std::move(first->second);
      pending_progress_.erase(first);
      lock.unlock();
      // Only the telling thread touches progress_ while telling_ is set.
      if constexpr (kOneStream) {
        progress_(event);
      } else {
        progress_(key, event);
      }
      lock.lock();
    }
    telling_ = false;
  }

  ProgressListener progress_;
  OutcomeListener done_;
  bool telling_ = false;
  bool ended_ = false;  // the outcome is queued or told
  std::map<Key, Progress> pending_progress_;
  std::optional<Outcome> pending_outcome_;
};

}  // namespace cube3d
