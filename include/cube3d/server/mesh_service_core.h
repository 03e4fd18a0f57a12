// The one service core behind every front door (gRPC, HTTP/JSON): validates a request, hands it
// to the scheduler as a Job, waits for its outcome while watching the caller's deadline and
// whether the caller went away, and answers with the mesh or a status. Validation, deadlines,
// cancellation, queue limits, metrics and the request log are therefore the same whichever way
// a request came in; a front door only translates its transport to and from this.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <grpcpp/support/status.h>

#include "cube3d/core/clock.h"
#include "cube3d/scheduler/job.h"
#include "cube3d/scheduler/scheduler.h"
#include "cube3d/server/api_keys.h"
#include "cube3d/server/metrics.h"
#include "cube3d/server/request_policy.h"
#include "cube3d/v1/mesh_service.pb.h"
#include "cube3d/v1/wire/request_wire.pb.h"

namespace cube3d {

struct ServiceOptions {
  // Also the deadline for requests without one and the largest response (policy.limits).
  RequestPolicy policy;
  bool log_prompts = false;
  int64_t tokens_per_shape = 0;  // T, for progress events
};

// What the core needs to know about the call a front door serves.
struct CallContext {
  // The caller's deadline (steady clock); time_point::max() for none (the core then applies
  // limits.default_deadline_ms).
  SteadyClock::time_point deadline = SteadyClock::time_point::max();
  // Polled while the request waits: a status when the caller went away (gRPC: CANCELLED, or
  // DEADLINE_EXCEEDED when its deadline passed; HTTP: the connection closed). The job is
  // cancelled and the status is what the core answers and counts.
  std::function<std::optional<grpc::Status>()> gone;
  const char* transport = "grpc";  // for the request log
  // The front door counts the outcome itself (gRPC: GrpcCallCounter, which knows the code the
  // client finally saw); false: the core counts the status it answers.
  bool outcome_counted_by_front_door = false;
  // The `authorization` metadata or header ("Bearer <key>"); empty when absent.
  std::string authorization;
  // The W3C `traceparent` metadata or header, as the client sent it (parsed, and ignored when
  // invalid, for the log's trace_id); empty when absent.
  std::string traceparent;
  // Sets a trailing metadata entry or response header ("retry-after" over a key's limit).
  std::function<void(const std::string& key, const std::string& value)> add_trailer;
};

// The request as the gRPC service reads it (prompt as bytes), from the client's message (HTTP
// parses JSON into the latter; the conversion cannot fail, the wire format being the same).
v1::wire::GenerateMeshRequest to_wire(const v1::GenerateMeshRequest& request);

// One progress event as a client sees it (stream and Server-Sent Events alike).
v1::Progress to_progress_event(const JobProgress& progress, int64_t tokens_per_shape);

class MeshServiceCore {
 public:
  using ProgressSink = std::function<void(const JobProgress&)>;

  // The core answers UNAVAILABLE ("loading") until a scheduler is attached: the server
  // listens (and reports NOT_SERVING) while the model loads and warms up.
  MeshServiceCore(ServiceOptions options, Metrics& metrics);
  void attach(Scheduler* scheduler) { scheduler_.store(scheduler); }
  // With keys, every call must bring a known API key (auth.api_keys_file); null: open.
  void use_api_keys(ApiKeys* keys) { api_keys_.store(keys); }
  bool ready() const { return scheduler_.load() != nullptr; }
  const ServiceOptions& options() const { return options_; }

  // Runs one request to its end: OK with `response` filled, or an error status (every error a
  // client can cause maps to a status, never to a crash). `on_progress` (may be empty) gets
  // the job's progress on the calling thread, in order, before the result.
  grpc::Status generate(const v1::wire::GenerateMeshRequest& request, const CallContext& call,
                        v1::GenerateMeshResponse* response, const ProgressSink& on_progress);

 private:
  grpc::Status fill_response(const JobResult& result, v1::GenerateMeshResponse* response) const;

  ServiceOptions options_;
  std::atomic<Scheduler*> scheduler_{nullptr};
  std::atomic<ApiKeys*> api_keys_{nullptr};
  Metrics& metrics_;
};

}  // namespace cube3d
