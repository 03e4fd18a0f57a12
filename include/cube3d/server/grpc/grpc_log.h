// gRPC's own log lines (gpr_log in gRPC 1.51) through the server's logger, in its format: a JSON
// log stays JSON. The lines a peer causes (a failed TLS handshake: one [error] line each in gRPC,
// 800 attempts made 804 lines) go through the rate-limited peer log instead
// (core/peer_log.h: one line a kind per interval, every one counted), at info level: a client's
// failed handshake is no error of the server's.
#pragma once

#include <optional>
#include <string_view>

namespace cube3d {

// The peer-log kind of a gRPC log line ("tls_handshake"), nullopt for a line of gRPC's own that
// is logged as it is.
std::optional<std::string_view> grpc_line_peer_kind(std::string_view message);

// Sends gRPC's log lines to spdlog (as gRPC's log function), peer-caused ones through
// peer_log().
void route_grpc_log_lines();

}  // namespace cube3d
