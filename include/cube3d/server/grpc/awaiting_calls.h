// The calls and streams that wait for a client's request message, under one bound
// (grpc.max_calls_awaiting_message) across the gRPC door: GenerateMesh and GenerateMeshStream
// calls until their request arrives, ModelStreamInfer streams until their first request. A
// client that opens calls and sends nothing holds only a small reactor each, but without a bound
// a flood of them (over many connections) would hold memory without end; beyond the bound the
// call that has waited longest is refused RESOURCE_EXHAUSTED, so that clients that send their
// request with the call (which are never the oldest) are not the ones refused.
//
// Thread-safe. A refusal runs on the registering thread, with none of this object's locks held
// (it takes the refused call's own lock): register a call without holding its lock.
#pragma once

#include <grpcpp/support/status.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

namespace cube3d {

class AwaitingCalls {
 public:
  // A call waiting for its request message, as the bound sees it.
  class Call {
   public:
    virtual ~Call() = default;
    // Ends the call with `status` if its message has still not arrived.
    virtual void refuse_unread(const grpc::Status& status) = 0;
  };

  // Throws invalid_argument naming grpc.max_calls_awaiting_message when `max_calls` < 1.
  explicit AwaitingCalls(int64_t max_calls);

  // Registers a call and returns its place; when there would be more than max_calls, the one
  // that has waited longest is taken off the list and refused (a call already gone is just
  // dropped).
  uint64_t await(std::weak_ptr<Call> call);
  // The call at `place` no longer waits (its message came, or it ended); harmless when it was
  // refused already.
  void arrived(uint64_t place);
  // Calls on the list now (gone ones included until their place is freed).
  size_t waiting() const;

 private:
  const int64_t max_calls_;
  mutable std::mutex mutex_;
  std::map<uint64_t, std::weak_ptr<Call>> calls_;  // by place: the oldest first
  uint64_t next_place_ = 0;
};

}  // namespace cube3d
