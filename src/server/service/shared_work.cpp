#include "cube3d/server/service/shared_work.h"

#include <utility>
#include <vector>

namespace cube3d {

std::shared_ptr<SharedWork> SharedWork::make(WorkRequest request, SteadyClock::time_point deadline,
                                             OutcomeCallback on_outcome) {
  std::shared_ptr<SharedWork> work(new SharedWork());  // private constructor: make() only
  work->on_outcome_ = std::move(on_outcome);
  // The job holds the work weakly: its members (the calls) own it, so that once the last one
  // has gone (and cancelled the job) nothing is left to tell, and no cycle keeps either alive.
  const std::weak_ptr<SharedWork> weak = work;
  TaskTicket ticket = ticket_of(request);
  work->job_ = std::make_shared<Task>(
      std::move(ticket), std::move(request), deadline,
      [weak](const TaskProgress& p) {
        if (const auto self = weak.lock()) self->on_progress(p);
      },
      [weak](const std::any* result, const Error* error) {
        // The executor's result is a WorkResult (engine_executor.h): the payload's answer.
        if (const auto self = weak.lock()) {
          self->on_done(result ? &std::any_cast<const WorkResult&>(*result) : nullptr, error);
        }
      });
  return work;
}

std::optional<SharedWork::MemberId> SharedWork::join(Member member,
                                                     SteadyClock::time_point deadline) {
  const std::lock_guard lock(mutex_);
  if (ended_ || job_->cancelled() || job_->finished()) return std::nullopt;
  const MemberId id = next_id_++;
  members_.emplace(id, std::move(member));
  job_->extend_deadline(deadline);
  return id;
}

bool SharedWork::ended() const {
  const std::lock_guard lock(mutex_);
  return ended_ || job_->cancelled() || job_->finished();
}

void SharedWork::leave(MemberId id) {
  bool last = false;
  {
    const std::lock_guard lock(mutex_);
    if (members_.erase(id) == 0) return;
    last = members_.empty() && !ended_;
  }
  // Nobody waits for it any more: the scheduler drops it (queued) or frees its slot.
  if (last) job_->cancel();
}

int64_t SharedWork::members() const {
  const std::lock_guard lock(mutex_);
  return static_cast<int64_t>(members_.size());
}

void SharedWork::on_progress(const TaskProgress& progress) {
  // Called outside the lock: a member's callback takes its call's lock, and a call that is
  // cancelled meanwhile takes ours (leave) without holding its own; a member that has just
  // left may still hear this one event, which its call ignores once it has ended.
  std::vector<std::function<void(const TaskProgress&)>> targets;
  {
    const std::lock_guard lock(mutex_);
    for (const auto& [id, member] : members_) {
      if (member.progress) targets.push_back(member.progress);
    }
  }
  for (const auto& target : targets) target(progress);
}

void SharedWork::on_done(const WorkResult* result, const Error* error) {
  {
    const std::lock_guard lock(mutex_);
    ended_ = true;
  }
  const std::shared_ptr<const WorkAnswer> answer =
      on_outcome_ ? on_outcome_(*this, result, error) : nullptr;
  std::map<MemberId, Member> members;
  {
    const std::lock_guard lock(mutex_);
    members.swap(members_);
  }
  for (const auto& [id, member] : members) {
    if (member.done) member.done(result, error, answer.get());
  }
  on_outcome_ = nullptr;
}

}  // namespace cube3d
