// The HTTP/JSON front door of MeshService, in the server process, over the same service
// as gRPC (service/service.h): same validation, queue limits, deadlines, cancellation,
// metrics and request log (transport "http"). Also the metrics endpoint (metrics_listen), on a
// listener of its own in the same event-driven server (http_server.h).
//
//   POST /v1/meshes:generate        body: GenerateMeshRequest in protobuf's JSON mapping
//                                   (lowerCamelCase or proto field names; unknown fields 400).
//     Accept: model/gltf-binary | model/obj | application/x-ply | application/vnd.cube3d.mesh
//       (MESH_FORMAT_COMPACT, docs/mesh-encoding.md) -> the mesh file itself
//       (Content-Type that type; X-Request-Id, Server-Timing, X-Vertex-Count, X-Face-Count,
//       X-Batch-Bucket, X-Occupancy-Points, one X-Warning per warning). A `format` in the body
//       decides the format: when Accept names mesh types and not the body's, the answer is
//       JSON if Accept also takes application/json (or */*), 406 otherwise.
//     otherwise -> application/json, GenerateMeshResponse in the JSON mapping (every field
//       written; `encoded` base64; 64-bit integers as strings).
//   POST /v1/meshes:generateStream  the same body; text/event-stream: one `event: progress`
//       (data: Progress as JSON) per progress event, then `event: result` (GenerateMeshResponse)
//       or `event: error` (the error body). What fails before the job is queued (a bad
//       request, a full queue, loading, draining) is an HTTP error status instead.
//   GET /healthz  200 while the process runs.   GET /readyz  200 when the model is loaded and
//       warmed up and the server is not draining and its device has not failed (and, with
//       jobs.store redis, the shared job store can be reached), 503 otherwise, saying why.
//   GET /metrics  the Prometheus text of the server's registry (also on metrics_listen, where
//       it is the only path).
//   GET /v1/model  what the server serves and its request limits (http/model_route.h);
//       GET /v1/usage  the caller's key's usage (http/usage_route.h).
//   GET /  the browser playground, with http.playground (http/playground.h).
//
// Errors: http_status.h's map and body. Unknown path 404, known path with another method 405
// (with Allow), body over limits.max_message_bytes 413, a request the HTTP layer refuses
// itself (request line 414, head 431, malformed 400, ...) its status; more generate calls in
// flight than the gateway serves 429 (Retry-After), like a full queue. The gateway's own
// refusals count in cube3d_requests_total like the service's. Deadline: X-Request-Timeout-Ms
// header or ?timeout_ms= (milliseconds, > 0; the header wins); without one the service applies
// limits.default_deadline_ms; expiry answers 504. A client that closes its connection while
// its request waits cancels the job (counted CANCELLED; the answer, 499, goes nowhere), and so
// does one that stops reading its answer (http.write_timeout_ms). API keys
// (auth.api_keys_file): `Authorization: Bearer <key>` (the scheme in any case), as over gRPC; a
// missing or unknown key is 401 (WWW-Authenticate: Bearer), a key over its limit 429 with
// Retry-After. An X-Request-Id header is the request_id when the body has none;
// `Cache-Control: no-cache` (or no-store) sets bypass_cache. Mesh answers carry X-Cache (hit,
// miss, coalesced, bypass). Jobs: http/job_routes.h. The Open Inference Protocol (/v2):
// http/inference_routes.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cube3d/server/httpd/http_server.h"
#include "cube3d/server/httpd/static_site.h"
#include "cube3d/server/inference/inference_endpoint.h"
#include "cube3d/server/jobs/job_service.h"
#include "cube3d/server/observability/metrics.h"
#include "cube3d/server/service/service.h"

namespace cube3d {

struct HttpGatewayOptions {
  std::string listen;          // the API (http_listen); empty: none
  std::string metrics_listen;  // the metrics endpoint; empty: none
  // Generate calls in flight at once (a bound on the memory they hold; the service's limits, the
  // queue above all, are what refuse work first).
  int64_t max_generating = 16;
  int64_t retry_after_seconds = 1;  // Retry-After of a 429 for a full queue
  std::vector<std::string> cors_allowed_origins;
  // Jobs (http/job_routes.h: POST /v1/jobs, GET and DELETE /v1/jobs/{id}, GET
  // /v1/jobs/{id}/mesh); null: none. Must outlive the gateway.
  JobService* jobs = nullptr;
  // The Open Inference Protocol's REST API at /v2 (http/inference_routes.h); null: none. Must
  // outlive the gateway.
  inference::InferenceEndpoint* inference = nullptr;
  // jobs.store redis: whether the shared store can take jobs; /readyz answers 503 with its
  // message when not. Null: not asked (the memory store is always there).
  std::function<Status()> jobs_health;
  // The browser playground's files (http/playground.h), served at GET /; null: none (GET / is
  // then 404 like any unknown path).
  std::shared_ptr<const http::StaticSite> playground;
  // I/O threads, deadlines, connection and request limits (max_body_bytes =
  // limits.max_message_bytes), gzip.
  http::ServerOptions server;
  // HTTPS on `listen` (http.tls, with the tls: section's files); metrics_listen stays plain.
  std::optional<http::TlsOptions> tls;
};

class HttpGateway {
 public:
  // Listens on `options.listen` and `options.metrics_listen` (either may be empty) from here
  // on, on the server's I/O threads. Throws unavailable naming http_listen or metrics_listen
  // when an address cannot be bound (the port is busy, the host is not this machine's) and
  // invalid_argument when it is not host:port. `service` and `metrics` must outlive the gateway.
  HttpGateway(Service& service, Metrics& metrics, HttpGatewayOptions options);
  ~HttpGateway();  // stop()
  HttpGateway(const HttpGateway&) = delete;
  HttpGateway& operator=(const HttpGateway&) = delete;

  int port() const;          // the API's bound port
  int metrics_port() const;  // the metrics endpoint's
  // Draining: /readyz answers 503 and answers close their connections (the service itself refuses
  // new work once the scheduler drains).
  void set_draining(bool draining);
  // The device failed (core/device_fault.h): set_draining(true) for good, and /readyz says why.
  void set_device_failed();
  // Stops accepting, lets the answers in flight finish within `grace`, closes the rest and
  // joins the threads. Idempotent.
  void stop(std::chrono::milliseconds grace = std::chrono::seconds(5));

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cube3d
