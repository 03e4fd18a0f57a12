// The Open Inference Protocol's REST API (KServe "v2", as Triton serves it) on the HTTP door,
// over the one service through inference/inference_endpoint.h: same listener, TLS, API keys,
// quotas, end users, prompt policy, cache and metrics as /v1.
//
//   GET  /v2                              server metadata
//   GET  /v2/health/live                  200 while the process runs
//   GET  /v2/health/ready                 200 when ready, 400 (the protocol's false) otherwise
//   GET  /v2/models/{m}[/versions/{v}]    model metadata
//   GET  .../ready                        200 ready, 400 not (404 for a model not served)
//   GET  .../config                       Triton's model configuration as JSON
//   GET  .../stats, /v2/models/stats      Triton's statistics extension
//   POST .../infer                        inference: JSON, or the binary tensor data extension
//                                         (infer_json.h)
//   POST /v2/repository/index             the models, as Triton's repository index
//
// Errors are the protocol's body, {"error": "..."}, with the HTTP status of the service's code
// (http_status.h): 400 for a request the model cannot take (naming the tensor or parameter),
// 401 without a known key, 404 for a model the server does not serve, 429 with Retry-After, 503
// while loading, 504 past the deadline. The deadline is X-Request-Timeout-Ms (or ?timeout_ms=)
// or the request's `timeout` parameter (microseconds), whichever ends first; Cache-Control:
// no-cache computes afresh. Inference calls take the gateway's generate slots (429 beyond).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "cube3d/server/httpd/router.h"
#include "cube3d/server/inference/inference_endpoint.h"
#include "cube3d/server/observability/metrics.h"

namespace cube3d::http {

struct InferenceRouteOptions {
  int64_t retry_after_seconds = 1;  // Retry-After of a 429 for a full gateway
  // One of the gateway's generate slots, released when the pointer goes; null: none free.
  std::function<std::shared_ptr<void>()> take_slot;
  int64_t max_generating = 16;  // for the message of a 429
};

// Whether a path is one of the protocol's (its errors then take the protocol's body).
bool is_inference_path(std::string_view path);
// The protocol's error answer for a status (its HTTP status, Retry-After, WWW-Authenticate, and
// `trailers` as headers).
Response inference_error(const Status& status, int64_t retry_after,
                         const std::vector<std::pair<std::string, std::string>>& trailers = {});

class InferenceRoutes {
 public:
  // `endpoint` and `metrics` must outlive the routes.
  InferenceRoutes(inference::InferenceEndpoint& endpoint, Metrics& metrics,
                  InferenceRouteOptions options);
  void add_to(Router& router);

 private:
  template <typename Handler>
  void guarded(const std::shared_ptr<Exchange>& ex, Handler handler);
  void server_metadata(const std::shared_ptr<Exchange>& ex);
  void health_ready(const std::shared_ptr<Exchange>& ex);
  // The model the route's path names, for the caller's key (NOT_FOUND for another model).
  inference::ModelDescription described(const std::shared_ptr<Exchange>& ex) const;
  void model_metadata(const std::shared_ptr<Exchange>& ex);
  void model_ready(const std::shared_ptr<Exchange>& ex);
  void model_config(const std::shared_ptr<Exchange>& ex);
  void model_stats(const std::shared_ptr<Exchange>& ex);
  void infer(const std::shared_ptr<Exchange>& ex);
  void repository_index(const std::shared_ptr<Exchange>& ex);

  inference::InferenceEndpoint& endpoint_;
  Metrics& metrics_;
  const InferenceRouteOptions options_;
};

}  // namespace cube3d::http
