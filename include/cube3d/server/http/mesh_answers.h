// The HTTP front door's answers in JSON and as mesh files, shared by its routes (the mesh calls
// in http_gateway.cpp, the jobs in job_routes.cpp): the error body with its status, the JSON
// mapping of the API's messages, and a mesh response as its file (or a PNG picture of it) with
// the headers that carry the rest.
#pragma once

#include <google/protobuf/message.h>
#include <grpcpp/support/status.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cube3d/server/core/mesh_service_core.h"
#include "cube3d/server/http/http_message.h"
#include "cube3d/v1/mesh_service.pb.h"

namespace cube3d::http {

inline constexpr const char* kJsonType = "application/json";
inline constexpr const char* kRequestIdHeader = "X-Request-Id";

// The error body (http_status.h) with `http_status`; Retry-After when retry_after_seconds > 0,
// WWW-Authenticate for UNAUTHENTICATED.
Response error_response(int http_status, grpc::StatusCode code, const std::string& message,
                        int64_t retry_after_seconds = 0);
// A status from the core: its HTTP status and body; Retry-After `retry_after` for a full queue;
// `trailers` as headers (they win).
Response status_response(const grpc::Status& status, int64_t retry_after,
                         const std::vector<std::pair<std::string, std::string>>& trailers);

// Every field written, defaults included (HTTP clients have no generated defaults).
std::string to_json(const google::protobuf::Message& message);
// A GenerateMeshRequest in the JSON mapping; HttpError 400 naming what is wrong (unknown
// fields included).
v1::GenerateMeshRequest parse_request(const std::string& body);

// "queue;dur=1.0, text;dur=..., total;dur=..." (ms).
std::string server_timing(const v1::Timings& timings);
// X-Cache's value: hit, miss, coalesced, bypass; null for none.
const char* cache_header(v1::CacheStatus status);

// A mesh call's outcome: the error, the JSON response (file_format unset), or the file with
// X-Request-Id, Server-Timing, X-Cache, X-Vertex-Count, X-Face-Count, X-Batch-Bucket,
// X-Occupancy-Points and one X-Warning per warning.
Response mesh_answer(CallOutcome outcome, std::optional<v1::MeshFormat> file_format,
                     int64_t retry_after_seconds);

// A PNG picture of a RAW mesh response (mesh_preview.h: the 3/4 product view, `size` x `size`
// pixels, the prompt as its Description), with the file answer's headers, Server-Timing's
// `preview` (the drawing and encoding), and an X-Warning for a body's format set aside; a mesh it
// cannot draw is a 500 (INTERNAL). Drawn on the calling thread: 20k faces at 512 x 512 take some
// 30 ms of one core.
struct PngAnswer {
  int size = 512;
  std::optional<v1::MeshFormat> ignored_format;  // Negotiated::ignored_format
  std::string description;                       // the prompt
};
Response mesh_png_answer(CallOutcome outcome, const PngAnswer& png, int64_t retry_after_seconds);

}  // namespace cube3d::http
