// Jobs over the service core: SubmitMeshJob starts a request on the core exactly as
// GenerateMesh does (same admission, validation, limits, queue, fairness, cache and request
// log) with the job store as its observer, so a client can go away and poll. What the core
// refuses at once (an invalid request, a full queue, a key over its limit) is the submit's own
// answer, never a FAILED job. The front doors translate these calls; nothing here knows a
// transport.
#pragma once

#include <grpcpp/support/status.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cube3d/server/core/mesh_service_core.h"
#include "cube3d/server/jobs/job_store.h"
#include "cube3d/v1/mesh_service.pb.h"

namespace cube3d {

struct JobServiceOptions {
  // A job's whole time, queue included (jobs.deadline_ms).
  int64_t deadline_ms = 1'800'000;
};

// A job, or why not; `trailers` as CallOutcome's ("retry-after" over a key's limit).
struct JobAnswer {
  grpc::Status status;
  v1::MeshJob job;  // when status.ok()
  std::vector<std::pair<std::string, std::string>> trailers;
};

class JobService {
 public:
  // Both must outlive the service.
  JobService(MeshServiceCore& core, JobStore& store, JobServiceOptions options);

  // `call`: the submitting call's context (its deadline is not the job's: the job has
  // jobs.deadline_ms). `done` runs once, on this thread (every submit answers at once).
  JobAnswer submit(const v1::wire::GenerateMeshRequest& request, const CallContext& call);
  // The job for the caller that `authorization` names; with `wait`, when it ends or `wait`
  // passes (capped by jobs.max_wait_ms). `done` runs once, on this thread or later on the one
  // that ends the job or the timer thread.
  void get(const std::string& id, const std::string& authorization, std::chrono::milliseconds wait,
           std::function<void(JobAnswer)> done);
  JobAnswer cancel(const std::string& id, const std::string& authorization);

  JobStore& store() { return store_; }

 private:
  MeshServiceCore& core_;
  JobStore& store_;
  const JobServiceOptions options_;
};

}  // namespace cube3d
