// gRPC's own log lines: a peer's failed TLS handshake (one [error] line each in gRPC 1.51, issue
// 58) goes to the rate-limited peer log, any other line through as it is.
#include "cube3d/server/grpc/grpc_log.h"

#include <grpc/grpc.h>
#include <grpc/support/log.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>
#include <string>

#include "cube3d/core/logging.h"
#include "cube3d/core/peer_log.h"

namespace cube3d {
namespace test_grpc_log {

TEST(GrpcLog, HandshakeFailuresAreThePeersDoing) {
  for (const char* line :
       {"Handshake failed with fatal error SSL_ERROR_SSL: error:0A0000C1:SSL routines::no shared "
        "cipher.",
        "Security handshake failed: {\"created\":\"@1\",\"description\":\"Handshake failed\"}",
        "Handshake read failed"}) {
    EXPECT_EQ(grpc_line_peer_kind(line), "tls_handshake") << line;
  }
  EXPECT_EQ(grpc_line_peer_kind("Failed to add :: listener"), std::nullopt);
  EXPECT_EQ(grpc_line_peer_kind("Invalid private key."), std::nullopt);  // the server's own
}

TEST(GrpcLog, AFloodOfFailedHandshakesWritesOneLine) {
  std::ostringstream out;
  setup_logging_to(std::make_shared<spdlog::sinks::ostream_sink_mt>(out), "info", LogFormat::kText);
  grpc_init();  // what reads GRPC_VERBOSITY: before it gpr_log writes nothing
  route_grpc_log_lines();
  const PeerLog::Counts before = peer_log().counts("grpc", "tls_handshake");
  for (int i = 0; i < 50; ++i) {
    gpr_log(GPR_ERROR,
            "Handshake failed with fatal error SSL_ERROR_SSL: error:0A0000C1:SSL routines::no "
            "shared cipher.");
  }
  gpr_log(GPR_ERROR, "something of gRPC's own");
  grpc_shutdown();
  setup_logging("warn");
  const std::string text = out.str();
  size_t lines = 0;
  for (size_t at = text.find("no shared cipher"); at != std::string::npos;
       at = text.find("no shared cipher", at + 1)) {
    ++lines;
  }
  EXPECT_LE(lines, 1u) << text;
  EXPECT_EQ(text.find("[error] grpc: Handshake"), std::string::npos) << text;  // info, not error
  EXPECT_NE(text.find("[error] grpc: something of gRPC's own"), std::string::npos) << text;
  EXPECT_EQ(peer_log().counts("grpc", "tls_handshake").events - before.events, 50);
}

}  // namespace test_grpc_log
}  // namespace cube3d
