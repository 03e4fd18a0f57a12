// Idle senders kept for the next request, so that a connection outlives the request (and the
// phase: the warm-up's connections serve the measured requests). A request takes the sender
// used last, or a new one when every sender is busy, so that nobody ever waits for one: the
// pool grows to the most requests in flight at once. Thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "cube3d/clients/request_sender.h"

namespace cube3d {

class SenderPool {
 public:
  explicit SenderPool(std::shared_ptr<const SenderFactory> factory);

  // A sender of the pool while the lease lives; back in the pool when it goes.
  class Lease {
   public:
    Lease(SenderPool& pool, std::unique_ptr<RequestSender> sender)
        : pool_(&pool), sender_(std::move(sender)) {}
    Lease(Lease&&) = default;
    Lease& operator=(Lease&&) = delete;
    ~Lease() {
      if (sender_) pool_->give_back(std::move(sender_));
    }
    RequestSender& operator*() const { return *sender_; }
    RequestSender* operator->() const { return sender_.get(); }

   private:
    SenderPool* pool_;
    std::unique_ptr<RequestSender> sender_;
  };

  Lease take();

  size_t created() const;  // senders made so far
  size_t idle() const;     // senders in the pool now

 private:
  void give_back(std::unique_ptr<RequestSender> sender);

  const std::shared_ptr<const SenderFactory> factory_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<RequestSender>> idle_;  // the one used last at the back
  size_t created_ = 0;
};

}  // namespace cube3d
