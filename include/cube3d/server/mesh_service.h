// The gRPC MeshService: validates each request, hands it to the scheduler as a Job, waits for
// its outcome (watching the client's deadline and cancellation), and answers with the mesh or
// a status. Every error a client can cause maps to a status here, never to a crash.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>

#include "cube3d/scheduler/job.h"
#include "cube3d/scheduler/scheduler.h"
#include "cube3d/server/metrics.h"
#include "cube3d/server/request_validation.h"
#include "cube3d/v1/mesh_service.grpc.pb.h"

namespace cube3d {

struct ServiceOptions {
  // Also the deadline for requests without one and the largest response (policy.limits).
  RequestPolicy policy;
  bool log_prompts = false;
  int64_t tokens_per_shape = 0;  // T, for progress events
};

class MeshServiceImpl final : public v1::MeshService::Service {
 public:
  // The service answers UNAVAILABLE ("loading") until a scheduler is attached: the server
  // listens (and reports NOT_SERVING) while the model loads and warms up.
  MeshServiceImpl(ServiceOptions options, Metrics& metrics);
  void attach(Scheduler* scheduler) { scheduler_.store(scheduler); }

  grpc::Status GenerateMesh(grpc::ServerContext* context, const v1::GenerateMeshRequest* request,
                            v1::GenerateMeshResponse* response) override;
  grpc::Status GenerateMeshStream(grpc::ServerContext* context,
                                  const v1::GenerateMeshRequest* request,
                                  grpc::ServerWriter<v1::GenerateMeshEvent>* writer) override;

 private:
  using ProgressSink = std::function<void(const JobProgress&)>;
  grpc::Status run(grpc::ServerContext* context, const v1::GenerateMeshRequest& request,
                   v1::GenerateMeshResponse* response, const ProgressSink& on_progress);
  grpc::Status fill_response(const JobResult& result, v1::GenerateMeshResponse* response) const;

  ServiceOptions options_;
  std::atomic<Scheduler*> scheduler_{nullptr};
  Metrics& metrics_;
};

}  // namespace cube3d
