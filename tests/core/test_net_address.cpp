#include "cube3d/core/net_address.h"

#include <gtest/gtest.h>

#include <string>

#include "cube3d/core/error.h"

namespace cube3d {
namespace test_net_address {

// The message of the invalid_argument that parsing `text` throws; "" (and a failure) for none.
std::string error_of(const std::string& text) {
  try {
    (void)parse_host_port(text, "listen");
    ADD_FAILURE() << "no error for '" << text << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.what();
  }
  return "";
}

TEST(NetAddress, ParsesHostPortAndBracketedIpv6) {
  HostPort address = parse_host_port("0.0.0.0:50051");
  EXPECT_EQ(address.host, "0.0.0.0");
  EXPECT_EQ(address.port, 50051);
  address = parse_host_port("[::1]:1");
  EXPECT_EQ(address.host, "::1");
  EXPECT_EQ(address.port, 1);
  address = parse_host_port("localhost:65535");
  EXPECT_EQ(address.host, "localhost");
  EXPECT_EQ(address.port, 65535);
}

TEST(NetAddress, ErrorsNameTheSettingAndQuoteTheText) {
  EXPECT_EQ(error_of(""), "listen: must not be empty (expected host:port)");
  EXPECT_EQ(error_of("localhost"), "listen: 'localhost': expected host:port");
  EXPECT_EQ(error_of(":50051"), "listen: ':50051': the host is empty");
  EXPECT_EQ(error_of("0.0.0.0:0"), "listen: '0.0.0.0:0': port 0 is out of range (1..65535)");
  EXPECT_EQ(error_of("0.0.0.0:70000"),
            "listen: '0.0.0.0:70000': port 70000 is out of range (1..65535)");
  EXPECT_EQ(error_of("0.0.0.0:http"), "listen: '0.0.0.0:http': the port 'http' is not a number");
  EXPECT_EQ(error_of("0.0.0.0:"), "listen: '0.0.0.0:': the port '' is not a number");
  EXPECT_EQ(error_of("0.0.0.0:123456"),
            "listen: '0.0.0.0:123456': the port '123456' is not a number");
  EXPECT_EQ(error_of("::1:50051"),
            "listen: '::1:50051': an IPv6 address goes in brackets, as in [::1]:50051");
  EXPECT_EQ(error_of("[::1"), "listen: '[::1': '[' without a closing ']'");
  EXPECT_EQ(error_of("[::1]50051"), "listen: '[::1]50051': expected [ipv6-address]:port");
  EXPECT_EQ(error_of("[]:1"), "listen: '[]:1': the host is empty");
  EXPECT_EQ(error_of("a b:1"),
            "listen: 'a b:1': the host holds characters no host name or "
            "address has");
  // Unix sockets are not listening addresses here.
  EXPECT_EQ(error_of("unix:/tmp/s"), "listen: 'unix:/tmp/s': the port '/tmp/s' is not a number");
}

TEST(NetAddress, WildcardsCollideWithEveryHostOnTheirPort) {
  EXPECT_TRUE(is_wildcard_host("0.0.0.0"));
  EXPECT_TRUE(is_wildcard_host("::"));
  EXPECT_FALSE(is_wildcard_host("127.0.0.1"));
  const HostPort any{"0.0.0.0", 7000};
  const HostPort loopback{"127.0.0.1", 7000};
  EXPECT_TRUE(listeners_collide(any, loopback));
  EXPECT_TRUE(listeners_collide(loopback, HostPort{"::", 7000}));
  EXPECT_TRUE(listeners_collide(loopback, loopback));
  EXPECT_FALSE(listeners_collide(loopback, HostPort{"10.0.0.1", 7000}));
  EXPECT_FALSE(listeners_collide(any, HostPort{"0.0.0.0", 7001}));
}

}  // namespace test_net_address
}  // namespace cube3d
