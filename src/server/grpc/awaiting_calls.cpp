#include "cube3d/server/grpc/awaiting_calls.h"

#include <string>
#include <utility>

#include "cube3d/core/error.h"

namespace cube3d {

AwaitingCalls::AwaitingCalls(int64_t max_calls) : max_calls_(max_calls) {
  if (max_calls < 1) {
    throw invalid_argument("grpc.max_calls_awaiting_message must be at least 1, got " +
                           std::to_string(max_calls));
  }
}

uint64_t AwaitingCalls::await(std::weak_ptr<Call> call) {
  std::shared_ptr<Call> evicted;
  uint64_t place = 0;
  {
    const std::lock_guard lock(mutex_);
    place = next_place_++;
    calls_.emplace(place, std::move(call));
    // Over the bound, the call that has waited longest goes: a client that sends its message
    // with its headers is almost never the oldest one.
    if (static_cast<int64_t>(calls_.size()) > max_calls_) {
      evicted = calls_.begin()->second.lock();
      calls_.erase(calls_.begin());
    }
  }
  // Outside the lock: refusing takes the evicted call's own lock.
  if (evicted) {
    evicted->refuse_unread(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        "too many calls without their request message (grpc.max_calls_awaiting_message " +
            std::to_string(max_calls_) +
            "): this one waited longest; send the request with the call"));
  }
  return place;
}

void AwaitingCalls::arrived(uint64_t place) {
  const std::lock_guard lock(mutex_);
  calls_.erase(place);  // absent when it was refused
}

size_t AwaitingCalls::waiting() const {
  const std::lock_guard lock(mutex_);
  return calls_.size();
}

}  // namespace cube3d
