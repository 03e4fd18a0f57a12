#include "cube3d/core/net_address.h"

#include <algorithm>

#include "cube3d/core/error.h"

namespace cube3d {
namespace {

[[noreturn]] void fail(const std::string& what, std::string_view text, const std::string& problem) {
  throw invalid_argument(what + ": '" + std::string(text) + "': " + problem);
}

}  // namespace

HostPort parse_host_port(std::string_view text, std::string_view what) {
  const std::string name(what);
  if (text.empty()) throw invalid_argument(name + ": must not be empty (expected host:port)");
  HostPort address;
  std::string_view port;
  if (text.front() == '[') {
    const std::size_t close = text.find(']');
    if (close == std::string_view::npos) fail(name, text, "'[' without a closing ']'");
    address.host = text.substr(1, close - 1);
    if (close + 1 >= text.size() || text[close + 1] != ':')
      fail(name, text, "expected [ipv6-address]:port");
    port = text.substr(close + 2);
  } else {
    const std::size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) fail(name, text, "expected host:port");
    address.host = text.substr(0, colon);
    port = text.substr(colon + 1);
    // Without brackets the last colon of an IPv6 address would pass for the port's.
    if (address.host.find(':') != std::string::npos) {
      fail(name, text, "an IPv6 address goes in brackets, as in [::1]:50051");
    }
  }
  if (address.host.empty()) fail(name, text, "the host is empty");
  if (address.host.find_first_of(" \t\r\n/[]") != std::string::npos) {
    fail(name, text, "the host holds characters no host name or address has");
  }
  // Digits only, and few enough that the number cannot overflow before the range check.
  const bool digits =
      !port.empty() && port.size() <= 5 &&
      std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits) fail(name, text, "the port '" + std::string(port) + "' is not a number");
  address.port = std::stoi(std::string(port));
  if (address.port < 1 || address.port > 65535) {
    fail(name, text, "port " + std::to_string(address.port) + " is out of range (1..65535)");
  }
  return address;
}

bool is_wildcard_host(std::string_view host) { return host == "0.0.0.0" || host == "::"; }

bool listeners_collide(const HostPort& a, const HostPort& b) {
  return a.port == b.port &&
         (a.host == b.host || is_wildcard_host(a.host) || is_wildcard_host(b.host));
}

}  // namespace cube3d
