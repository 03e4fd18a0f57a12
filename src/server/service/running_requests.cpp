#include "cube3d/server/service/running_requests.h"

#include <iterator>

namespace cube3d {
namespace {

bool running(const std::shared_ptr<SharedWork>& work) { return work && !work->ended(); }

}  // namespace

std::optional<RunningRequests::Found> RunningRequests::find(std::string_view scope,
                                                            std::string_view request_id,
                                                            const ResultKey& request_key) {
  const std::lock_guard lock(mutex_);
  const auto it = entries_.find(std::pair{std::string(scope), std::string(request_id)});
  if (it == entries_.end()) return std::nullopt;
  std::shared_ptr<SharedWork> work = it->second.work.lock();
  if (!running(work)) {
    entries_.erase(it);
    return std::nullopt;
  }
  return Found{std::move(work), it->second.request_key == request_key};
}

void RunningRequests::add(std::string_view scope, std::string_view request_id,
                          const ResultKey& request_key, const std::shared_ptr<SharedWork>& work) {
  const std::lock_guard lock(mutex_);
  entries_[std::pair{std::string(scope), std::string(request_id)}] = Entry{request_key, work};
  if (++adds_since_sweep_ < kSweepEvery) return;
  adds_since_sweep_ = 0;
  for (auto it = entries_.begin(); it != entries_.end();) {
    it = running(it->second.work.lock()) ? std::next(it) : entries_.erase(it);
  }
}

size_t RunningRequests::size() const {
  const std::lock_guard lock(mutex_);
  return entries_.size();
}

}  // namespace cube3d
