// The Open Inference Protocol's model side, which both doors call (HTTP: http/inference_routes.h,
// gRPC: grpc/inference_service.h): readiness, the model's description (metadata, Triton's model
// configuration), its statistics, and inference on the one service. A door only translates its
// transport: it reads a request into an InferRequest, calls infer(), and renders the outcome or
// the error (cube3d::Error / Status, which it maps to its transport once).
//
// Credentials: infer() takes the caller's like any call (API keys, end users, quotas); the
// descriptions and statistics ask the caller's key (describe_for) as GET /v1/model does; the
// health answers (live, ready) ask none.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cube3d/server/inference/infer_messages.h"
#include "cube3d/server/inference/infer_run.h"
#include "cube3d/server/inference/model_description.h"
#include "cube3d/server/observability/inference_statistics.h"
#include "cube3d/server/service/service.h"

namespace cube3d::inference {

class InferenceEndpoint {
 public:
  // `service` must outlive the endpoint.
  InferenceEndpoint(Service& service, InferenceOptions options);

  // Ready for inference: the model loaded and warmed up, and not draining nor failed.
  bool ready() const;
  // What makes ready() false besides loading: the server drains, or its device failed.
  void set_draining(bool draining) { draining_ = draining; }

  // The server's version ("0.1.0 (abc1234)") and the protocol extensions it serves.
  std::string server_version() const;
  static std::vector<std::string> extensions();

  // The model, for a caller with `authorization` (UNAUTHENTICATED without a known key when the
  // server has keys); UNAVAILABLE while it loads. Throws cube3d::Error.
  ModelDescription describe_for(const std::string& authorization) const;
  // The same, checking that `name` and `version` are this model's (NOT_FOUND otherwise).
  ModelDescription describe_for(const std::string& authorization, const std::string& name,
                                const std::string& version) const;
  // Whether model `name` (and `version`: empty is any) is ready; false for a model the server
  // does not have.
  bool model_ready(const std::string& name, const std::string& version) const;

  InferenceStatistics::Snapshot statistics() const { return service_.statistics().snapshot(); }
  // T, the shape tokens of one mesh (progress reports).
  int64_t tokens_per_shape() const { return service_.options().tokens_per_shape; }

  // Starts an inference: throws cube3d::Error for what is refused before any work (a model the
  // server does not have, loading, the request's tensors and parameters: infer_plan.h), else
  // returns the running call, whose outcome and progress go to `observer`. `door`: what the door
  // reads itself and answers as text (infer_plan.h); `bypass_cache` the door's Cache-Control.
  std::shared_ptr<InferRun> infer(InferRequest request, CallContext call, InferObserver observer,
                                  const DoorRules& door = {}, bool bypass_cache = false);

 private:
  // The description once the model is loaded (made once).
  const ModelDescription& loaded_model() const;

  Service& service_;
  const InferenceOptions options_;
  std::atomic<bool> draining_{false};
  mutable std::once_flag described_;
  mutable std::optional<ModelDescription> model_;
};

}  // namespace cube3d::inference
