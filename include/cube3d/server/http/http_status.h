// The HTTP/JSON front door's statuses and error bodies: one gRPC code -> HTTP status map (the
// one Google's API gateways use), and the error body every HTTP error answer carries:
//   {"error": {"code": 400, "status": "INVALID_ARGUMENT", "message": "..."}}
#pragma once

#include <grpcpp/support/status.h>

#include <string>
#include <string_view>

namespace cube3d {

// OK 200; INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE 400; UNAUTHENTICATED 401;
// PERMISSION_DENIED 403; NOT_FOUND 404; ALREADY_EXISTS, ABORTED 409; RESOURCE_EXHAUSTED 429;
// CANCELLED 499 (nginx's "client closed request"); UNIMPLEMENTED 501; UNAVAILABLE 503;
// DEADLINE_EXCEEDED 504; UNKNOWN, INTERNAL, DATA_LOSS (and anything else) 500.
int http_status_of(grpc::StatusCode code);

// The error body; `message` may hold any bytes (invalid UTF-8 is replaced, as JSON must be
// UTF-8).
std::string http_error_body(int http_status, grpc::StatusCode code, std::string_view message);

// The same for a status, with its own HTTP status.
std::string http_error_body(const grpc::Status& status);

}  // namespace cube3d
