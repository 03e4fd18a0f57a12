#include "cube3d/core/listen_probe.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "cube3d/core/unique_fd.h"

namespace cube3d {

int probe_listen(const HostPort& address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(address.port);
  if (::getaddrinfo(address.host.c_str(), port.c_str(), &hints, &found) != 0 || !found) {
    return EADDRNOTAVAIL;
  }
  const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owned(found, ::freeaddrinfo);
  const UniqueFd fd(
      ::socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, found->ai_protocol));
  if (!fd.valid()) return errno;
  const int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), found->ai_addr, found->ai_addrlen) != 0) return errno;
  if (::listen(fd.get(), 1) != 0) return errno;
  return 0;
}

std::string listen_failure_reason(int error_number) {
  switch (error_number) {
    case EADDRINUSE:
      return "the port is in use by another process (is another cube3d-server running?)";
    case EADDRNOTAVAIL:
      return "the host is not an address of this machine";
    case EACCES:
      return "permission denied (ports below 1024 need CAP_NET_BIND_SERVICE)";
    default:
      return std::strerror(error_number);
  }
}

}  // namespace cube3d
