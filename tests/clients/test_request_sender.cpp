// --protocol's names, and the factory each one makes.
#include "cube3d/clients/request_sender.h"

#include <gtest/gtest.h>

#include "cube3d/core/error.h"

namespace cube3d {
namespace test_request_sender {

TEST(RequestSenderTest, ProtocolNames) {
  EXPECT_EQ(parse_protocol("grpc"), Protocol::kGrpc);
  EXPECT_EQ(parse_protocol("http"), Protocol::kHttp);
  EXPECT_STREQ(protocol_name(Protocol::kGrpc), "grpc");
  EXPECT_STREQ(protocol_name(Protocol::kHttp), "http");
}

TEST(RequestSenderTest, AnUnknownProtocolNamesTheFlag) {
  for (const char* bad : {"x", "", "HTTP", "grpcs", "https"}) {
    try {
      parse_protocol(bad);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_EQ(std::string(e.what()),
                std::string("--protocol: expected grpc or http, got '") + bad + "'");
    }
  }
}

TEST(RequestSenderTest, FactoriesOfBothProtocols) {
  SenderOptions options;
  options.server = "127.0.0.1:1";
  EXPECT_NE(make_sender_factory(Protocol::kGrpc, options)->make_sender(), nullptr);
  EXPECT_NE(make_sender_factory(Protocol::kHttp, options)->make_sender(), nullptr);
  // HTTP needs host:port; gRPC takes any target (dns:///..., unix:...) and says so at the call.
  options.server = "unix:/tmp/socket";
  EXPECT_THROW(make_sender_factory(Protocol::kHttp, options), Error);
  EXPECT_NE(make_sender_factory(Protocol::kGrpc, options), nullptr);
}

}  // namespace test_request_sender
}  // namespace cube3d
