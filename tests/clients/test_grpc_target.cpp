// --server as a gRPC target: one address passes through, a list becomes a static address list
// of one family, and what cannot be an address is refused naming the flag and the entry.
#include "cube3d/clients/grpc_target.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "cube3d/core/error.h"
#include "expect_error.h"

namespace cube3d {
namespace test_grpc_target {

TEST(GrpcTarget, OneAddressIsTheTargetAsGiven) {
  for (const std::string target : {"localhost:50051", "[::1]:50051", "unix:/run/cube3d.sock",
                                   "dns:///cube3d-headless.cube3d.svc:50051"}) {
    SCOPED_TRACE(target);
    EXPECT_EQ(grpc_target(target), target);
  }
  EXPECT_EQ(grpc_target("  10.0.0.7:50051 "), "10.0.0.7:50051");  // trimmed
}

TEST(GrpcTarget, SeveralAddressesAreOneStaticListOfOneFamily) {
  EXPECT_EQ(grpc_target("127.0.0.1:5001,127.0.0.2:5002"), "ipv4:127.0.0.1:5001,127.0.0.2:5002");
  EXPECT_EQ(grpc_target("127.0.0.1:5001, 127.0.0.1:5001"), "ipv4:127.0.0.1:5001");  // once
  EXPECT_EQ(grpc_target("[::1]:5001,[::1]:5002"), "ipv6:[::1]:5001,[::1]:5002");
  // A name is resolved now; localhost has an IPv4 address everywhere this runs.
  const std::string target = grpc_target("localhost:5001,127.0.0.1:5002");
  EXPECT_EQ(target.rfind("ipv4:", 0), 0u) << target;
  EXPECT_NE(target.find("127.0.0.1:5001"), std::string::npos) << target;
  EXPECT_NE(target.find("127.0.0.1:5002"), std::string::npos) << target;
}

TEST(GrpcTarget, WhatIsNotAnAddressIsRefusedNamingTheFlagAndTheEntry) {
  // Each --server value with a part of the message that refuses it.
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"", "--server: empty address"},
      {"http://localhost:50051", "not a URL"},
      {"127.0.0.1:1,https://x:2", "not a URL"},
      {"127.0.0.1:1,,127.0.0.1:2", "an empty entry"},
      {"127.0.0.1:1,127.0.0.1", "'127.0.0.1' needs :PORT"},
      {"127.0.0.1:1,127.0.0.1:99999", "port in 1..65535"},
      {"127.0.0.1:1,::1:5", "IPv6 address goes in [ ]"},
      {"127.0.0.1:1,unix:/x", "HOST:PORT entries only"},
      {"127.0.0.1:1,no-such-host.invalid:5", "cannot resolve 'no-such-host.invalid'"},
      {"127.0.0.1:1,[::1]:2", "one family"},
  };
  for (const auto& [server, message] : refused) {
    SCOPED_TRACE(server);
    testing::expect_error([&] { (void)grpc_target(server); }, ErrorCode::kInvalidArgument, message);
  }
  testing::expect_error([&] { (void)grpc_target("a:1,b", "--servers"); },
                        ErrorCode::kInvalidArgument, "--servers a:1,b");
}

}  // namespace test_grpc_target
}  // namespace cube3d
