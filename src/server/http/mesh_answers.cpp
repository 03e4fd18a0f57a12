#include "cube3d/server/http/mesh_answers.h"

#include <google/protobuf/util/json_util.h>
#include <spdlog/fmt/fmt.h>

#include <algorithm>

#include "cube3d/core/error.h"
#include "cube3d/server/http/content_negotiation.h"
#include "cube3d/server/http/http_error.h"
#include "cube3d/server/http/http_status.h"

namespace cube3d::http {
namespace {

// The scheduler's refusal when max_queue_size requests wait (scheduler.h): worth a retry soon,
// unlike a response over the message limit, which is RESOURCE_EXHAUSTED too.
bool is_queue_full(const grpc::Status& status) {
  // The scheduler's refusals: the whole queue, or the batch priority's share of it.
  return status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
         (status.error_message().starts_with("queue full") ||
          status.error_message().starts_with("batch queue full"));
}

// Protobuf's parse errors span lines (the input and a caret): one line reads better in JSON.
std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

}  // namespace

Response error_response(int http_status, grpc::StatusCode code, const std::string& message,
                        int64_t retry_after_seconds) {
  Response response =
      make_response(http_status, http_error_body(http_status, code, message), kJsonType);
  if (retry_after_seconds > 0) {
    response.headers.set("Retry-After", std::to_string(retry_after_seconds));
  }
  if (code == grpc::StatusCode::UNAUTHENTICATED) {
    response.headers.set("WWW-Authenticate", "Bearer");  // RFC 6750: how to authenticate
  }
  return response;
}

Response status_response(const grpc::Status& status, int64_t retry_after,
                         const std::vector<std::pair<std::string, std::string>>& trailers) {
  Response response =
      error_response(http_status_of(status.error_code()), status.error_code(),
                     status.error_message(), is_queue_full(status) ? retry_after : 0);
  // Headers the core asked for ("retry-after" over an API key's limit) win.
  for (const auto& [key, value] : trailers) response.headers.set(key, value);
  return response;
}

std::string to_json(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  // Every field, defaults included: HTTP clients have no generated defaults to fall back on.
  options.always_print_primitive_fields = true;
  std::string json;
  const auto status = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) {
    throw internal_error("cannot write " + message.GetTypeName() +
                         " as JSON: " + std::string(status.message()));
  }
  return json;
}

v1::GenerateMeshRequest parse_request(const std::string& body) {
  v1::GenerateMeshRequest request;
  // Unknown fields are an error (a misspelt field must not be silently dropped); both the
  // lowerCamelCase and the proto field names are read, as protobuf's JSON mapping defines.
  const google::protobuf::util::JsonParseOptions options;
  const auto status = google::protobuf::util::JsonStringToMessage(body, &request, options);
  if (!status.ok()) {
    throw HttpError(400, grpc::StatusCode::INVALID_ARGUMENT,
                    "the body is not a cube3d.v1.GenerateMeshRequest in JSON: " +
                        one_line(std::string(status.message())));
  }
  return request;
}

std::string server_timing(const v1::Timings& t) {
  return fmt::format(
      "queue;dur={:.1f}, text;dur={:.1f}, prefill;dur={:.1f}, decode;dur={:.1f}, "
      "mesh;dur={:.1f}, total;dur={:.1f}",
      t.queue_ms(), t.text_encoding_ms(), t.prefill_ms(), t.decode_ms(), t.mesh_ms(), t.total_ms());
}

const char* cache_header(v1::CacheStatus status) {
  switch (status) {
    case v1::CACHE_STATUS_HIT:
      return "hit";
    case v1::CACHE_STATUS_MISS:
      return "miss";
    case v1::CACHE_STATUS_COALESCED:
      return "coalesced";
    case v1::CACHE_STATUS_BYPASS:
      return "bypass";
    default:
      return nullptr;
  }
}

Response mesh_answer(CallOutcome outcome, std::optional<v1::MeshFormat> file_format,
                     int64_t retry_after_seconds) {
  if (!outcome.status.ok()) {
    return status_response(outcome.status, retry_after_seconds, outcome.trailers);
  }
  const v1::GenerateMeshResponse& response = outcome.response;
  const MeshMediaType* const media = file_format ? media_type_of(*file_format) : nullptr;
  Response out;
  if (!media) {
    out = make_response(200, to_json(response), kJsonType);
  } else {
    out.status = 200;
    out.headers.set("Content-Type", media->type);
    out.headers.set("X-Vertex-Count", std::to_string(response.vertex_count()));
    out.headers.set("X-Face-Count", std::to_string(response.face_count()));
    out.headers.set("X-Batch-Bucket", std::to_string(response.batch_bucket()));
    out.headers.set("X-Occupancy-Points", std::to_string(response.occupancy_points()));
    for (const auto& warning : response.warnings()) out.headers.add("X-Warning", warning);
    out.headers.set("Content-Disposition", fmt::format("inline; filename=\"{}.{}\"",
                                                       response.request_id(), media->extension));
    out.body = std::move(*outcome.response.mutable_encoded());
  }
  out.headers.set(kRequestIdHeader, response.request_id());
  out.headers.set("Server-Timing", server_timing(response.timings()));
  if (const char* cache = cache_header(response.cache_status())) out.headers.set("X-Cache", cache);
  return out;
}

}  // namespace cube3d::http
