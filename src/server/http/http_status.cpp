#include "cube3d/server/http/http_status.h"

#include <nlohmann/json.hpp>

#include "cube3d/server/http/json_codec.h"

namespace cube3d {
namespace {

// The scheduler's refusal when max_queue_size requests wait (scheduler.h): worth a retry soon,
// unlike a response over the message limit, which is RESOURCE_EXHAUSTED too.
bool is_queue_full(const Status& status) { return status.reason() == ErrorReason::kQueueFull; }

}  // namespace

int http_status_of(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk:
      return 200;
    case ErrorCode::kInvalidArgument:
      return 400;
    case ErrorCode::kFailedPrecondition:
      // The state of what was asked for does not allow the call (a job's mesh before the job
      // succeeded): the request may succeed later as it is, so not 400 (which says "fix it").
      return 409;
    case ErrorCode::kUnauthenticated:
      return 401;
    case ErrorCode::kPermissionDenied:
      return 403;
    case ErrorCode::kNotFound:
      return 404;
    case ErrorCode::kAlreadyExists:
      return 409;
    case ErrorCode::kResourceExhausted:
      return 429;
    case ErrorCode::kCancelled:
      return 499;
    case ErrorCode::kUnimplemented:
      return 501;
    case ErrorCode::kUnavailable:
      return 503;
    case ErrorCode::kDeadlineExceeded:
      return 504;
    case ErrorCode::kInternal:
      return 500;
  }
  return 500;
}

ErrorCode code_of_http_status(int http_status) {
  switch (http_status) {
    case 400:
    case 414:
    case 431:
      return ErrorCode::kInvalidArgument;
    case 403:
      return ErrorCode::kPermissionDenied;
    case 404:
      return ErrorCode::kNotFound;
    case 405:
    case 501:
    case 505:
      return ErrorCode::kUnimplemented;
    case 408:
      return ErrorCode::kDeadlineExceeded;
    case 413:
      return ErrorCode::kResourceExhausted;
    case 417:
      return ErrorCode::kFailedPrecondition;
    default:
      return http_status >= 500 ? ErrorCode::kInternal : ErrorCode::kInvalidArgument;
  }
}

std::string http_error_body(int http_status, ErrorCode code, std::string_view message) {
  // Ordered: code, status, message read best in that order (as Google's APIs write them).
  const nlohmann::ordered_json body = {
      {"error",
       {{"code", http_status}, {"status", std::string(to_string(code))}, {"message", message}}}};
  // Messages can quote what a client sent (a JSON parse error shows the offending bytes).
  return body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string http_error_body(const Status& status) {
  return http_error_body(http_status_of(status.code()), status.code(), status.message());
}

namespace http {

Response error_response(int http_status, ErrorCode code, const std::string& message,
                        int64_t retry_after_seconds) {
  Response response =
      make_response(http_status, http_error_body(http_status, code, message), kJsonType);
  // Every 429 says when to try again (RFC 6585): the caller's figure, else a second, the
  // shortest that is not an invitation to spin (a limit's own answer, such as an API key's, sets
  // its own through the service's trailers, which win).
  if (retry_after_seconds <= 0 && http_status == 429) retry_after_seconds = 1;
  if (retry_after_seconds > 0) {
    response.headers.set("Retry-After", std::to_string(retry_after_seconds));
  }
  if (code == ErrorCode::kUnauthenticated) {
    response.headers.set("WWW-Authenticate", "Bearer");  // RFC 6750: how to authenticate
  }
  return response;
}

std::string header_case(std::string_view name) {
  std::string out(name);
  bool word_start = true;
  for (char& c : out) {
    if (word_start && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    word_start = c == '-';
  }
  return out;
}

Response status_response(const Status& status, int64_t retry_after,
                         const std::vector<std::pair<std::string, std::string>>& trailers) {
  Response response = error_response(http_status_of(status.code()), status.code(), status.message(),
                                     is_queue_full(status) ? retry_after : 0);
  // Headers the service asked for ("retry-after" over an API key's limit) win, in the spelling
  // HTTP answers use elsewhere ("Retry-After"): names compare case-insensitively, but a client
  // that reads headers as a plain table (a Roblox script's RequestAsync) looks up one spelling.
  for (const auto& [key, value] : trailers) response.headers.set(header_case(key), value);
  return response;
}

}  // namespace http
}  // namespace cube3d
