#include "cube3d/server/http/http_status.h"

#include <nlohmann/json.hpp>

#include "cube3d/api/grpc_status.h"

namespace cube3d {

int http_status_of(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return 200;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE:
      return 400;
    case grpc::StatusCode::UNAUTHENTICATED:
      return 401;
    case grpc::StatusCode::PERMISSION_DENIED:
      return 403;
    case grpc::StatusCode::NOT_FOUND:
      return 404;
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::ABORTED:
      return 409;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return 429;
    case grpc::StatusCode::CANCELLED:
      return 499;
    case grpc::StatusCode::UNIMPLEMENTED:
      return 501;
    case grpc::StatusCode::UNAVAILABLE:
      return 503;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return 504;
    default:
      return 500;
  }
}

std::string http_error_body(int http_status, grpc::StatusCode code, std::string_view message) {
  // Ordered: code, status, message read best in that order (as Google's APIs write them).
  const nlohmann::ordered_json body = {
      {"error", {{"code", http_status}, {"status", grpc_code_name(code)}, {"message", message}}}};
  // Messages can quote what a client sent (a JSON parse error shows the offending bytes).
  return body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string http_error_body(const grpc::Status& status) {
  return http_error_body(http_status_of(status.error_code()), status.error_code(),
                         status.error_message());
}

}  // namespace cube3d
