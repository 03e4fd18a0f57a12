// probe_listen and listen_failure_reason: a port another socket listens on is EADDRINUSE (and
// only then "in use"), a free one probes clean, a host that is not this machine's is
// EADDRNOTAVAIL.
#include "cube3d/core/listen_probe.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>

#include "cube3d/core/unique_fd.h"

namespace cube3d {
namespace test_listen_probe {

// A socket listening on a free loopback port, and the port.
std::pair<UniqueFd, int> listening_socket() {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  EXPECT_EQ(::listen(fd.get(), 1), 0);
  socklen_t length = sizeof(address);
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &length);
  return {std::move(fd), ntohs(address.sin_port)};
}

TEST(ListenProbeTest, ABusyPortIsInUseAndAFreeOneIsNot) {
  auto [fd, port] = listening_socket();
  EXPECT_EQ(probe_listen({"127.0.0.1", port}), EADDRINUSE);
  EXPECT_NE(listen_failure_reason(EADDRINUSE).find("in use by another process"), std::string::npos);
  fd.close();
  EXPECT_EQ(probe_listen({"127.0.0.1", port}), 0);
}

TEST(ListenProbeTest, AHostOfAnotherMachineIsNotInUse) {
  // TEST-NET-1 (RFC 5737): never an address of this machine.
  const int error = probe_listen({"192.0.2.1", 50051});
  EXPECT_EQ(error, EADDRNOTAVAIL);
  EXPECT_EQ(listen_failure_reason(error).find("in use"), std::string::npos);
  EXPECT_NE(listen_failure_reason(error).find("not an address of this machine"), std::string::npos);
}

}  // namespace test_listen_probe
}  // namespace cube3d
