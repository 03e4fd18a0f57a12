#include "cube3d/server/jobs/job_service.h"

#include <memory>
#include <mutex>
#include <variant>

#include "cube3d/api/grpc_status.h"
#include "cube3d/core/error.h"
#include "cube3d/server/core/request_validation.h"

namespace cube3d {
namespace {

JobAnswer from_store(JobStore::Answer answer) {
  JobAnswer out;
  if (auto* job = std::get_if<v1::MeshJob>(&answer)) {
    out.job = std::move(*job);
  } else {
    out.status = std::get<grpc::Status>(answer);
  }
  return out;
}

// The outcome of a job's call. The core may end a call inside start() (a refusal, or a cache
// hit): that outcome is the submit's, so it is held until start() returns and the submit
// knows whether it made a job.
struct Submission {
  std::mutex mutex;
  bool started = false;  // start() has returned: outcomes go to the store
  std::optional<CallOutcome> early;
};

}  // namespace

JobService::JobService(MeshServiceCore& core, JobStore& store, JobServiceOptions options)
    : core_(core), store_(store), options_(options) {}

JobAnswer JobService::submit(const v1::wire::GenerateMeshRequest& request_in,
                             const CallContext& call_in) {
  auto owner = core_.identify(call_in.authorization);
  if (auto* refused = std::get_if<grpc::Status>(&owner)) {
    core_.metrics().job_submitted(false);
    return {*refused, {}, {}};
  }
  // The request id is fixed now so that the job's record carries it from the start.
  v1::wire::GenerateMeshRequest request = request_in;
  if (request.request_id().empty()) request.set_request_id(make_request_id());

  std::string id;
  try {
    id = store_.create(std::get<std::string>(owner), request.request_id());
  } catch (const Error& e) {
    core_.metrics().job_submitted(false);
    return {to_grpc_status(e), {}, {}};
  }

  CallContext call = call_in;
  call.deadline = SteadyClock::now() + std::chrono::milliseconds(options_.deadline_ms);
  call.outcome_counted_by_front_door = false;  // the job's outcome is counted by the core
  auto submission = std::make_shared<Submission>();
  CallObserver observer;
  const int64_t tokens = core_.options().tokens_per_shape;
  observer.progress = [this, id, tokens](const JobProgress& p) {
    store_.progress(id, to_progress_event(p, tokens));
  };
  observer.done = [this, id, submission](CallOutcome outcome) {
    {
      const std::lock_guard lock(submission->mutex);
      if (!submission->started) {
        submission->early = std::move(outcome);
        return;
      }
    }
    store_.finish(id, outcome.status, std::move(outcome.response));
  };
  const std::shared_ptr<ActiveCall> active = core_.start(request, call, std::move(observer));

  std::optional<CallOutcome> early;
  {
    const std::lock_guard lock(submission->mutex);
    submission->started = true;
    early = std::move(submission->early);
  }
  if (early && !early->status.ok()) {
    // Refused at once: no job was made, as for the synchronous call.
    store_.discard(id);
    core_.metrics().job_submitted(false);
    return {early->status, {}, std::move(early->trailers)};
  }
  core_.metrics().job_submitted(true);
  if (early) {
    store_.finish(id, early->status, std::move(early->response));  // a cache hit: done at once
  } else {
    const std::weak_ptr<ActiveCall> weak = active;
    store_.set_canceller(id, [weak] {
      if (const auto running = weak.lock()) {
        running->cancel(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by CancelMeshJob"));
      }
    });
  }
  JobAnswer answer;
  store_.get(id, std::get<std::string>(owner), std::chrono::milliseconds(0),
             [&answer](JobStore::Answer a) { answer = from_store(std::move(a)); });
  return answer;
}

void JobService::get(const std::string& id, const std::string& authorization,
                     std::chrono::milliseconds wait, std::function<void(JobAnswer)> done) {
  auto owner = core_.identify(authorization);
  if (auto* refused = std::get_if<grpc::Status>(&owner)) return done({*refused, {}, {}});
  store_.get(id, std::get<std::string>(owner), wait,
             [done = std::move(done)](JobStore::Answer a) { done(from_store(std::move(a))); });
}

JobAnswer JobService::cancel(const std::string& id, const std::string& authorization) {
  auto owner = core_.identify(authorization);
  if (auto* refused = std::get_if<grpc::Status>(&owner)) return {*refused, {}, {}};
  return from_store(store_.cancel(id, std::get<std::string>(owner)));
}

}  // namespace cube3d
