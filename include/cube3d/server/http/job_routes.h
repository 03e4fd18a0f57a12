// The HTTP face of jobs (jobs/job_service.h), for clients that cannot hold a request open for a
// whole generation (a live Roblox game server):
//
//   POST   /v1/jobs                 body: GenerateMeshRequest (as POST /v1/meshes:generate)
//       -> 202, MeshJob as JSON, Location: /v1/jobs/{id}, Retry-After (seconds to the next
//          poll). What the service refuses at once is its HTTP status, as for generate.
//          Idempotency-Key: "<key>" (else the body's requestId) makes the submit safe to retry:
//          the same key and request answer 200 with the job the first made (as it is now),
//          another request under the same key 422; a bad key 400.
//   GET    /v1/jobs/{id}[?wait_ms=N] -> 200, MeshJob (its result, when SUCCEEDED, included);
//          wait_ms: answer when the job ends or N ms pass (capped by jobs.max_wait_ms).
//          Retry-After while it is open.
//   GET    /v1/jobs/{id}/mesh[?wait_ms=N] -> the mesh file (Content-Type by format; JSON for
//          RAW, or when Accept takes JSON and not the file's type), with generate's headers;
//          409 while the job is open (Retry-After) or when it ended without one (naming why).
//   DELETE /v1/jobs/{id}            -> 200, MeshJob: cancelled if it was open, else as it was.
//
// A job is visible only to the API key that submitted it: any other key gets 404, as for an
// unknown id. These calls are not counted in cube3d_requests_total (a job's outcome is, by the
// service); refusals of the HTTP layer itself are, as for generate.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cube3d/server/httpd/http_server.h"
#include "cube3d/server/jobs/job_service.h"
#include "cube3d/server/service/service.h"

namespace cube3d::http {

inline constexpr const char* kJobsPath = "/v1/jobs";
inline constexpr const char* kJobPath = "/v1/jobs/{id}";
inline constexpr const char* kJobMeshPath = "/v1/jobs/{id}/mesh";
// The IETF httpapi draft's header: a key that makes POST /v1/jobs safe to retry.
inline constexpr const char* kIdempotencyKeyHeader = "Idempotency-Key";

class JobRoutes {
 public:
  JobRoutes(JobService& jobs, int64_t retry_after_seconds)
      : jobs_(jobs), retry_after_seconds_(retry_after_seconds) {}

  // The request as the gateway prepared it (parsed body, request id, auth, traceparent).
  void submit(const std::shared_ptr<Exchange>& ex, const v1::GenerateMeshRequest& request,
              const CallContext& call);
  // GET and DELETE /v1/jobs/{id}.
  void job(const std::shared_ptr<Exchange>& ex);
  void mesh(const std::shared_ptr<Exchange>& ex);

 private:
  JobService& jobs_;
  const int64_t retry_after_seconds_;
};

}  // namespace cube3d::http
