#include "cube3d/server/jobs/job_service.h"

#include <spdlog/spdlog.h>

#include <memory>
#include <mutex>
#include <variant>

#include "cube3d/core/error.h"
#include "cube3d/server/admission/end_user.h"
#include "cube3d/server/service/request_validation.h"
#include "cube3d/server/wire/answer_codec.h"
#include "cube3d/server/wire/progress_codec.h"
#include "cube3d/server/wire/request_codec.h"

namespace cube3d {
namespace {

JobAnswer from_store(JobStore::Answer answer) {
  JobAnswer out;
  if (auto* job = std::get_if<v1::MeshJob>(&answer)) {
    out.job = std::move(*job);
  } else {
    out.status = std::get<Status>(answer);
  }
  return out;
}

// The outcome of a job's call. The service may end a call inside start() (a refusal, or a cache
// hit): that outcome is the submit's, so it is held until start() returns and the submit
// knows whether it made a job.
struct Submission {
  std::mutex mutex;
  bool started = false;  // start() has returned: outcomes go to the store
  std::optional<CallOutcome> early;
};

}  // namespace

JobService::JobService(Service& service, JobStore& store, JobServiceOptions options)
    : service_(service), store_(store), options_(options) {
  store_.on_takeover([this](TakenOverJob job) { take_over(std::move(job)); },
                     [this] { return service_.ready() && !draining_.load(); });
}

void JobService::submit(const v1::GenerateMeshRequest& request_in, const CallContext& call,
                        std::function<void(JobAnswer)> done, const std::string& idempotency_key) {
  auto owner = service_.identify(call.authorization);
  if (auto* refused = std::get_if<Status>(&owner)) {
    service_.metrics().job_submitted(false);
    return done({*refused, {}, {}});
  }
  NewJob job;
  job.owner = std::get<std::string>(owner);
  job.idempotency_key = idempotency_key.empty() ? request_in.request_id() : idempotency_key;
  if (!job.idempotency_key.empty()) job.request_digest = idempotency_digest(request_in);
  // The request id is fixed now so that the job's record carries it from the start.
  job.request = request_in;
  if (job.request.request_id().empty()) job.request.set_request_id(make_request_id());
  job.request_id = job.request.request_id();
  if (call.end_user) {
    // Only its pseudonym is kept (for a takeover); an invalid id is the service's refusal at
    // start, which discards the record.
    try {
      check_end_user_id(*call.end_user, call.end_user_count);
      job.end_user = end_user_pseudonym(job.owner, *call.end_user);
    } catch (const Error&) {
    }
  }
  v1::GenerateMeshRequest request = job.request;
  const std::string key = job.owner;
  store_.create(std::move(job), [this, key, request = std::move(request), call,
                                 done = std::move(done)](JobStore::Created created) mutable {
    if (auto* refused = std::get_if<Status>(&created)) {
      service_.metrics().job_submitted(false);
      JobAnswer answer{*refused, {}, {}};
      answer.key_conflict = refused->code() == ErrorCode::kAlreadyExists;
      return done(std::move(answer));
    }
    if (auto* existing = std::get_if<ExistingJob>(&created)) {
      // A retry of a submit that made its job: that job, as it is now; no new work.
      return store_.get(existing->id, key, std::chrono::milliseconds(0),
                        [done = std::move(done)](JobStore::Answer a) {
                          JobAnswer answer = from_store(std::move(a));
                          answer.existing = true;
                          done(std::move(answer));
                        });
    }
    start(std::get<std::string>(created), key, std::move(request), std::move(call),
          std::move(done));
  });
}

void JobService::start(const std::string& id, const std::string& owner,
                       v1::GenerateMeshRequest request, CallContext call,
                       std::function<void(JobAnswer)> answer) {
  const bool resumed = call.resumed.has_value();
  call.deadline = SteadyClock::now() + std::chrono::milliseconds(options_.deadline_ms);
  call.outcome_counted_by_front_door = false;  // the job's outcome is counted by the service
  auto submission = std::make_shared<Submission>();
  CallObserver observer;
  observer.progress = [this, id](const TaskProgress& p) {
    store_.progress(id, progress_message(p));
  };
  observer.done = [this, id, submission](CallOutcome outcome) {
    {
      const std::lock_guard lock(submission->mutex);
      if (!submission->started) {
        submission->early = std::move(outcome);
        return;
      }
    }
    store_.finish(
        id, outcome.status,
        outcome.status.ok() ? response_message(outcome.answer) : v1::GenerateMeshResponse());
  };
  const std::shared_ptr<ActiveCall> active =
      service_.start(client_request_of(request), call, std::move(observer));

  std::optional<CallOutcome> early;
  {
    const std::lock_guard lock(submission->mutex);
    submission->started = true;
    early = std::move(submission->early);
  }
  if (early && !early->status.ok()) {
    if (resumed) {
      // A job taken over that this replica cannot run ends with the reason, as any job.
      spdlog::warn("job {}: taken over but refused here: {}", id, early->status.message());
      store_.finish(id, early->status, {});
      return;
    }
    // Refused at once: no job was made, as for the synchronous call.
    store_.discard(id);
    service_.metrics().job_submitted(false);
    return answer({early->status, {}, std::move(early->trailers)});
  }
  if (!resumed) service_.metrics().job_submitted(true);
  if (early) {
    store_.finish(id, early->status, response_message(early->answer));  // a cache hit: done at once
  } else {
    const std::weak_ptr<ActiveCall> weak = active;
    store_.set_canceller(id, [weak] {
      if (const auto running = weak.lock()) {
        running->cancel(Status(ErrorCode::kCancelled, std::string(kJobCancelledByClient)));
      }
    });
  }
  if (!answer) return;
  store_.get(
      id, owner, std::chrono::milliseconds(0),
      [answer = std::move(answer)](JobStore::Answer a) { answer(from_store(std::move(a))); });
}

void JobService::take_over(TakenOverJob job) {
  spdlog::info("job {}: taken over from a replica that stopped renewing its lease (takeover {})",
               job.id, job.takeover);
  CallContext call;
  call.transport = "job takeover";
  call.resumed = ResumedIdentity{job.job.owner, job.job.end_user};
  start(job.id, job.job.owner, std::move(job.job.request), std::move(call), nullptr);
}

void JobService::get(const std::string& id, const std::string& authorization,
                     std::chrono::milliseconds wait, std::function<void(JobAnswer)> done) {
  auto owner = service_.identify(authorization);
  if (auto* refused = std::get_if<Status>(&owner)) return done({*refused, {}, {}});
  store_.get(id, std::get<std::string>(owner), wait,
             [done = std::move(done)](JobStore::Answer a) { done(from_store(std::move(a))); });
}

void JobService::cancel(const std::string& id, const std::string& authorization,
                        std::function<void(JobAnswer)> done) {
  auto owner = service_.identify(authorization);
  if (auto* refused = std::get_if<Status>(&owner)) return done({*refused, {}, {}});
  store_.cancel(id, std::get<std::string>(owner),
                [done = std::move(done)](JobStore::Answer a) { done(from_store(std::move(a))); });
}

}  // namespace cube3d
