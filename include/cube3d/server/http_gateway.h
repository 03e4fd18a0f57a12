// The HTTP/JSON front door of MeshService, in the server process, over the same service core
// as gRPC (mesh_service_core.h): same validation, queue limits, deadlines, cancellation,
// metrics and request log (transport "http").
//
//   POST /v1/meshes:generate        body: GenerateMeshRequest in protobuf's JSON mapping
//                                   (lowerCamelCase or proto field names; unknown fields 400).
//     Accept: model/gltf-binary | model/obj | application/x-ply -> the mesh file itself
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
//       warmed up and the server is not draining, 503 otherwise.
//   GET /metrics  the Prometheus text of the server's registry.
//
// Errors: http_status.h's map and body. Unknown path 404, known path with another method 405
// (with Allow), body over max_body_bytes 413, more generate calls in flight than the gateway
// serves 429 (Retry-After), like a full queue. The gateway's own refusals of a generate call
// (JSON, Accept, timeout, too many calls) count in cube3d_requests_total like the core's. Deadline:
// X-Request-Timeout-Ms header or ?timeout_ms= (milliseconds, > 0; the header wins); without one the
// core applies limits.default_deadline_ms; expiry answers 504. A client that closes its connection
// while its request waits cancels the job (counted CANCELLED; the answer, 499, goes nowhere). API
// keys (auth.api_keys_file): `Authorization: Bearer <key>`, as over gRPC; a missing or unknown key
// is 401 (WWW-Authenticate: Bearer), a key over its limit 429 with Retry-After. An X-Request-Id
// header is the request_id when the body has none.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "cube3d/core/constants.h"
#include "cube3d/server/mesh_service_core.h"
#include "cube3d/server/metrics.h"
#include "cube3d/server/server_config.h"

namespace cube3d {

struct HttpGatewayOptions {
  int64_t max_body_bytes = kDefaultMaxMessageBytes;  // larger request bodies: 413
  // Connections served at once (cpp-httplib serves each on one pool thread, idle keep-alive
  // ones too) and how many of them may be generate calls: the rest stay free for /healthz,
  // /readyz and /metrics however long the generate calls wait.
  int64_t threads = 24;
  int64_t max_generating = 16;
  // A client that sends or reads nothing for this long is dropped (a slow client cannot hold
  // a thread forever); idle keep-alive connections are closed after keep_alive.
  std::chrono::seconds read_timeout{10};
  std::chrono::seconds write_timeout{30};
  std::chrono::seconds keep_alive{5};
  int64_t retry_after_seconds = 1;  // Retry-After of a 429 for a full queue
};

// max_body_bytes = limits.max_message_bytes; max_generating = max_queue_size + 4 x the largest
// bucket + 16 (every request the scheduler holds, waiting, decoding or meshing, and a burst the
// core refuses at once: the core's limits decide, not this); threads = that + 8 for probes,
// scrapes and idle connections, at least 16.
HttpGatewayOptions http_gateway_options(const ServerConfig& config);

class HttpGateway {
 public:
  // Listens on `listen` ("host:port", "[v6]:port"; port 0 picks a free one) from here on, on
  // its own threads. Throws unavailable naming http_listen when the address cannot be bound
  // (the port is busy, the host is not this machine's) and invalid_argument when it is not
  // host:port. `core` and `metrics` must outlive the gateway.
  HttpGateway(const std::string& listen, MeshServiceCore& core, Metrics& metrics,
              HttpGatewayOptions options = {});
  ~HttpGateway();  // stop()
  HttpGateway(const HttpGateway&) = delete;
  HttpGateway& operator=(const HttpGateway&) = delete;

  int port() const;  // the bound port
  // Draining: /readyz answers 503 (the core itself refuses new work once the scheduler
  // drains).
  void set_draining(bool draining);
  // Stops accepting, lets the calls in flight finish and joins the threads. Idempotent.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cube3d
