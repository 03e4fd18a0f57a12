// The HTTP door's statuses and error bodies: the one map from the service's codes to HTTP
// statuses (the one Google's API gateways use for the same codes), and the error body every HTTP
// error answer carries:
//   {"error": {"code": 400, "status": "INVALID_ARGUMENT", "message": "..."}}
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/core/status.h"
#include "cube3d/server/httpd/http_message.h"

namespace cube3d {

// OK 200; INVALID_ARGUMENT, FAILED_PRECONDITION 400; UNAUTHENTICATED 401; PERMISSION_DENIED 403;
// NOT_FOUND 404; ALREADY_EXISTS 409; RESOURCE_EXHAUSTED 429; CANCELLED 499 (nginx's "client
// closed request"); UNIMPLEMENTED 501; UNAVAILABLE 503; DEADLINE_EXCEEDED 504; INTERNAL 500.
int http_status_of(ErrorCode code);

// The service's code for an answer the HTTP server made itself (a malformed head, a body over
// the limit, an unknown route): 400, 414, 431 INVALID_ARGUMENT; 403 PERMISSION_DENIED; 404
// NOT_FOUND; 405, 501, 505 UNIMPLEMENTED; 408 DEADLINE_EXCEEDED; 413 RESOURCE_EXHAUSTED; 417
// FAILED_PRECONDITION; any other 4xx INVALID_ARGUMENT, 5xx INTERNAL.
ErrorCode code_of_http_status(int http_status);

// The error body; `message` may hold any bytes (invalid UTF-8 is replaced, as JSON must be
// UTF-8).
std::string http_error_body(int http_status, ErrorCode code, std::string_view message);

// The same for a status, with its own HTTP status.
std::string http_error_body(const Status& status);

namespace http {

// An error answer: the error body with `http_status`; Retry-After when retry_after_seconds > 0,
// and on every 429 (1 s when no figure is given); WWW-Authenticate for UNAUTHENTICATED.
Response error_response(int http_status, ErrorCode code, const std::string& message,
                        int64_t retry_after_seconds = 0);
// A header name in HTTP's usual spelling, each word capitalised ("retry-after" -> "Retry-After"):
// the service's trailers are gRPC metadata, which is lower case.
std::string header_case(std::string_view name);

// A status from the service: its HTTP status and body; Retry-After `retry_after` for a full queue;
// `trailers` as headers (they win), in header_case.
Response status_response(const Status& status, int64_t retry_after,
                         const std::vector<std::pair<std::string, std::string>>& trailers);

}  // namespace http
}  // namespace cube3d
