#include "cube3d/clients/sender_pool.h"

#include <utility>

namespace cube3d {

SenderPool::SenderPool(std::shared_ptr<const SenderFactory> factory)
    : factory_(std::move(factory)) {}

SenderPool::Lease SenderPool::take() {
  {
    const std::lock_guard lock(mutex_);
    if (!idle_.empty()) {
      std::unique_ptr<RequestSender> sender = std::move(idle_.back());
      idle_.pop_back();
      return Lease(*this, std::move(sender));
    }
    ++created_;
  }
  return Lease(*this, factory_->make_sender());  // outside the lock: it may connect
}

size_t SenderPool::created() const {
  const std::lock_guard lock(mutex_);
  return created_;
}

size_t SenderPool::idle() const {
  const std::lock_guard lock(mutex_);
  return idle_.size();
}

void SenderPool::give_back(std::unique_ptr<RequestSender> sender) {
  const std::lock_guard lock(mutex_);
  idle_.push_back(std::move(sender));
}

}  // namespace cube3d
