// Jobs over the service: SubmitMeshJob starts a request on the service exactly as
// GenerateMesh does (same admission, validation, limits, queue, fairness, cache and request
// log) with the job store as its observer, so a client can go away and poll. What the service
// refuses at once (an invalid request, a full queue, a key over its limit) is the submit's own
// answer, never a FAILED job. The front doors translate these calls; nothing here knows a
// transport.
//
// With a shared store (jobs.store: redis) the job is written to Redis before its work starts
// (a store that cannot be reached refuses the submit UNAVAILABLE: a job no other replica could
// read is not made), and a job that another replica took over from a dead one runs here from
// its stored request, as its key and end user (CallContext::resumed), without the key's request
// and concurrency limits that it met at its submission.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cube3d/server/jobs/job_store.h"
#include "cube3d/server/service/service.h"
#include "cube3d/v1/mesh_service.pb.h"

namespace cube3d {

struct JobServiceOptions {
  // A job's whole time, queue included (jobs.deadline_ms).
  int64_t deadline_ms = 1'800'000;
};

// A job, or why not; `trailers` as CallOutcome's ("retry-after" over a key's limit).
struct JobAnswer {
  Status status;
  v1::MeshJob job;  // when status.ok()
  std::vector<std::pair<std::string, std::string>> trailers;
  // A submit's: the job its idempotency key named already (a retry: no new job), or the key
  // names a job of another request (status ALREADY_EXISTS).
  bool existing = false;
  bool key_conflict = false;
};

class JobService {
 public:
  // Both must outlive the service. Registers itself with the store for takeovers.
  JobService(Service& service, JobStore& store, JobServiceOptions options);

  // `call`: the submitting call's context (its deadline is not the job's: the job has
  // jobs.deadline_ms). `idempotency_key`: HTTP's Idempotency-Key (empty: the request's
  // request_id, if it has one, is the key, as Google's AIP-155 has it): a retry with the same
  // key and request answers the job made the first time (existing), whichever replica made it,
  // for as long as the job is kept. `done` runs once: on this thread (memory store) or on the
  // store's.
  void submit(const v1::GenerateMeshRequest& request, const CallContext& call,
              std::function<void(JobAnswer)> done, const std::string& idempotency_key = {});
  // The job for the caller that `authorization` names; with `wait`, when it ends or `wait`
  // passes (capped by jobs.max_wait_ms). `done` runs once, on this thread or later on the one
  // that ends the job, the timer thread or the store's.
  void get(const std::string& id, const std::string& authorization, std::chrono::milliseconds wait,
           std::function<void(JobAnswer)> done);
  void cancel(const std::string& id, const std::string& authorization,
              std::function<void(JobAnswer)> done);

  // Draining: no more takeovers here (another replica takes them).
  void set_draining(bool draining) { draining_ = draining; }

  JobStore& store() { return store_; }

 private:
  // Starts the job's work on the service; `answer` gets the submit's answer (a refusal at start,
  // or the job as the store then has it). `resumed`: a takeover (no answer goes anywhere).
  void start(const std::string& id, const std::string& owner, v1::GenerateMeshRequest request,
             CallContext call, std::function<void(JobAnswer)> answer);
  void take_over(TakenOverJob job);

  Service& service_;
  JobStore& store_;
  const JobServiceOptions options_;
  std::atomic<bool> draining_{false};
};

}  // namespace cube3d
