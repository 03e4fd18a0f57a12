#include "cube3d/server/grpc/grpc_log.h"

#include <grpc/support/log.h>
#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <array>

#include "cube3d/core/peer_log.h"

namespace cube3d {
namespace {

// What gRPC 1.51 writes when a peer's TLS handshake fails (ssl_transport_security.cc,
// security_handshaker.cc): "Handshake failed with fatal error SSL_ERROR_SSL: error:0A0000C1:SSL
// routines::no shared cipher.", "Security handshake failed: ...", "Handshake read failed".
constexpr std::array<std::string_view, 3> kHandshakeFailures = {
    "Handshake failed", "Security handshake failed", "Handshake read failed"};

void log_grpc_line(gpr_log_func_args* args) {
  const std::string_view message = args->message != nullptr ? args->message : "";
  if (const auto kind = grpc_line_peer_kind(message)) {
    peer_log().report("grpc", *kind, spdlog::level::info, fmt::format("grpc: {}", message));
    return;
  }
  const spdlog::level::level_enum level =
      args->severity == GPR_LOG_SEVERITY_ERROR  ? spdlog::level::err
      : args->severity == GPR_LOG_SEVERITY_INFO ? spdlog::level::info
                                                : spdlog::level::debug;
  spdlog::log(level, "grpc: {}", message);
}

}  // namespace

std::optional<std::string_view> grpc_line_peer_kind(std::string_view message) {
  for (const std::string_view failure : kHandshakeFailures) {
    if (message.starts_with(failure)) return "tls_handshake";
  }
  return std::nullopt;
}

void route_grpc_log_lines() { gpr_set_log_function(log_grpc_line); }

}  // namespace cube3d
