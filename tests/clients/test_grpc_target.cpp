// --server as a gRPC target: one address passes through, a list becomes a static address list
// of one family, and what cannot be an address is refused naming the flag and the entry.
#include "cube3d/clients/grpc_target.h"

#include <gtest/gtest.h>

#include <string>

#include "cube3d/core/error.h"
#include "expect_error.h"

namespace cube3d {
namespace test_grpc_target {

TEST(GrpcTarget, OneAddressIsTheTargetAsGiven) {
  EXPECT_EQ(grpc_target("localhost:50051"), "localhost:50051");
  EXPECT_EQ(grpc_target("  10.0.0.7:50051 "), "10.0.0.7:50051");
  EXPECT_EQ(grpc_target("[::1]:50051"), "[::1]:50051");
  EXPECT_EQ(grpc_target("unix:/run/cube3d.sock"), "unix:/run/cube3d.sock");
  EXPECT_EQ(grpc_target("dns:///cube3d-headless.cube3d.svc:50051"),
            "dns:///cube3d-headless.cube3d.svc:50051");
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
  testing::expect_error([&] { (void)grpc_target(""); }, ErrorCode::kInvalidArgument,
                        "--server: empty address");
  testing::expect_error([&] { (void)grpc_target("http://localhost:50051"); },
                        ErrorCode::kInvalidArgument, "not a URL");
  testing::expect_error([&] { (void)grpc_target("127.0.0.1:1,https://x:2"); },
                        ErrorCode::kInvalidArgument, "not a URL");
  testing::expect_error([&] { (void)grpc_target("127.0.0.1:1,,127.0.0.1:2"); },
                        ErrorCode::kInvalidArgument, "an empty entry");
  testing::expect_error([&] { (void)grpc_target("127.0.0.1:1,127.0.0.1"); },
                        ErrorCode::kInvalidArgument, "'127.0.0.1' needs :PORT");
  testing::expect_error([&] { (void)grpc_target("127.0.0.1:1,127.0.0.1:99999"); },
                        ErrorCode::kInvalidArgument, "port in 1..65535");
  testing::expect_error([&] { (void)grpc_target("127.0.0.1:1,::1:5"); },
                        ErrorCode::kInvalidArgument, "IPv6 address goes in [ ]");
  testing::expect_error([&] { (void)grpc_target("127.0.0.1:1,unix:/x"); },
                        ErrorCode::kInvalidArgument, "HOST:PORT entries only");
  testing::expect_error([&] { (void)grpc_target("127.0.0.1:1,no-such-host.invalid:5"); },
                        ErrorCode::kInvalidArgument, "cannot resolve 'no-such-host.invalid'");
  testing::expect_error([&] { (void)grpc_target("127.0.0.1:1,[::1]:2"); },
                        ErrorCode::kInvalidArgument, "one family");
  testing::expect_error([&] { (void)grpc_target("a:1,b", "--servers"); },
                        ErrorCode::kInvalidArgument, "--servers a:1,b");
}

}  // namespace test_grpc_target
}  // namespace cube3d
