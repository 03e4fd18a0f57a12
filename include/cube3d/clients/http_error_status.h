// How cube3d-loadgen reads the HTTP front door's errors as statuses, so that a request that
// failed over HTTP counts under the same gRPC code name as it would over gRPC. Every error
// answer (a plain HTTP error status, or the data of an `event: error` frame) carries
//   {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "queue full ..."}}
// (server/http/http_status.h).
#pragma once

#include <string>
#include <string_view>

namespace cube3d {

// The gRPC code name an HTTP status stands for when the body names none: the server's map
// (http_status.h) read backwards, plus what a proxy in between may answer: 400
// INVALID_ARGUMENT, 401 UNAUTHENTICATED, 403 PERMISSION_DENIED, 404 NOT_FOUND, 408 and 504
// DEADLINE_EXCEEDED, 409 ABORTED, 413 and 429 RESOURCE_EXHAUSTED, 499 CANCELLED, 501
// UNIMPLEMENTED, 502 and 503 UNAVAILABLE, other 5xx INTERNAL, anything else UNKNOWN.
std::string grpc_code_name_of_http_status(int http_status);

// The status of an error answer with HTTP status `http_status` and body `body`: the body's
// error.status when it is a gRPC code name (other than OK), otherwise by the HTTP status.
// Any body is read: not JSON, another shape, empty.
std::string status_of_http_error(int http_status, std::string_view body);

// The status of an `event: error` frame's data (the same body, whose error.code stands in for
// the HTTP status): error.status, else by error.code, else UNKNOWN.
std::string status_of_error_event(std::string_view data);

}  // namespace cube3d
