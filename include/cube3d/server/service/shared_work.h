// One computation (a scheduler Task) on behalf of one or more identical calls: the result cache
// coalesces identical requests in flight into one. Every member keeps its own deadline and
// cancellation; the job runs until its last member leaves (then it is cancelled) and lives as
// long as the latest member's deadline. The job's progress and outcome go to every member that
// is still in when they come.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "cube3d/core/status.h"
#include "cube3d/scheduler/task.h"
#include "cube3d/server/service/mesh_answer.h"
#include "cube3d/server/work/work_request.h"
#include "cube3d/server/work/work_result.h"

namespace cube3d {

// A work's one answer, built once where the work finished (the core's outcome callback) and
// shared by its members, each of which stamps its own request id, cache status and timings on
// the shared body (as a cache hit does), or why there is none (a mesh over the message limit).
struct WorkAnswer {
  Status status;
  std::shared_ptr<const MeshBody> body;
  int64_t body_bytes = 0;  // as the answer codec encodes it
};

// A body read from the cache, and the bytes it was read from.
struct CachedBody {
  std::shared_ptr<const MeshBody> body;
  int64_t bytes = 0;
};

class SharedWork : public std::enable_shared_from_this<SharedWork> {
 public:
  // `done` gets the job's result (for the member's log and statistics) or its error, and the
  // answer the outcome callback built (null for an error).
  struct Member {
    std::function<void(const TaskProgress&)> progress;
    std::function<void(const WorkResult*, const Error*, const WorkAnswer*)> done;
  };
  using OutcomeCallback = std::function<std::shared_ptr<const WorkAnswer>(
      SharedWork&, const WorkResult*, const Error*)>;
  using MemberId = uint64_t;

  // `on_outcome` runs once, before the members hear of the outcome: the core builds the answer
  // there, stores it in the cache and forgets the work, so that a later identical call finds
  // the entry. What it returns is what every member gets.
  static std::shared_ptr<SharedWork> make(WorkRequest request, SteadyClock::time_point deadline,
                                          OutcomeCallback on_outcome);

  // The job to hand to the scheduler.
  const std::shared_ptr<Task>& job() const { return job_; }

  // A member in, or nullopt once the work has ended or been cancelled (the caller then looks
  // in the cache again or starts a work of its own). Its deadline moves the job's out.
  std::optional<MemberId> join(Member member, SteadyClock::time_point deadline);
  // A member out (cancelled, timed out); the last one out cancels the job. Idempotent.
  void leave(MemberId id);
  // The job could not be queued: every member gets `error`.
  void fail(const Error& error) { job_->fail(error); }

  int64_t members() const;
  // Whether its outcome has come, or its job was cancelled: nobody can join it any more.
  bool ended() const;

 private:
  SharedWork() = default;
  void on_progress(const TaskProgress& progress);
  void on_done(const WorkResult* result, const Error* error);

  std::shared_ptr<Task> job_;
  OutcomeCallback on_outcome_;
  mutable std::mutex mutex_;
  std::map<MemberId, Member> members_;
  MemberId next_id_ = 0;
  bool ended_ = false;
};

}  // namespace cube3d
