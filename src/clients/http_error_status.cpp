#include "cube3d/clients/http_error_status.h"

#include <grpcpp/support/status.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>

#include "cube3d/api/grpc_status.h"

namespace cube3d {
namespace {

// Whether `name` is the name of a gRPC code other than OK.
bool is_error_code_name(const std::string& name) {
  for (int code = grpc::StatusCode::CANCELLED; code <= grpc::StatusCode::UNAUTHENTICATED; ++code) {
    if (name == grpc_code_name(static_cast<grpc::StatusCode>(code))) return true;
  }
  return false;
}

// The "error" object of an error body, when the body is one.
std::optional<nlohmann::json> error_object(std::string_view body) {
  const nlohmann::json doc = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return std::nullopt;
  const auto it = doc.find("error");
  if (it == doc.end() || !it->is_object()) return std::nullopt;
  return *it;
}

std::optional<std::string> named_status(const nlohmann::json& error) {
  const auto it = error.find("status");
  if (it == error.end() || !it->is_string()) return std::nullopt;
  std::string name = it->get<std::string>();
  if (!is_error_code_name(name)) return std::nullopt;
  return name;
}

}  // namespace

std::string grpc_code_name_of_http_status(int http_status) {
  switch (http_status) {
    case 400:
      return "INVALID_ARGUMENT";
    case 401:
      return "UNAUTHENTICATED";
    case 403:
      return "PERMISSION_DENIED";
    case 404:
      return "NOT_FOUND";
    case 408:
    case 504:
      return "DEADLINE_EXCEEDED";
    case 409:
      return "ABORTED";
    case 413:
    case 429:
      return "RESOURCE_EXHAUSTED";
    case 499:
      return "CANCELLED";
    case 501:
      return "UNIMPLEMENTED";
    case 502:
    case 503:
      return "UNAVAILABLE";
    default:
      return http_status >= 500 && http_status <= 599 ? "INTERNAL" : "UNKNOWN";
  }
}

std::string status_of_http_error(int http_status, std::string_view body) {
  if (const auto error = error_object(body)) {
    if (auto name = named_status(*error)) return *std::move(name);
  }
  return grpc_code_name_of_http_status(http_status);
}

std::string status_of_error_event(std::string_view data) {
  const auto error = error_object(data);
  if (!error) return "UNKNOWN";
  if (auto name = named_status(*error)) return *std::move(name);
  const auto code = error->find("code");
  if (code != error->end() && code->is_number_integer()) {
    const auto http_status = code->get<int64_t>();
    if (http_status >= 100 && http_status <= 599) {
      return grpc_code_name_of_http_status(static_cast<int>(http_status));
    }
  }
  return "UNKNOWN";
}

}  // namespace cube3d
