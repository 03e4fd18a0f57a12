// Listening addresses as gRPC and the metrics exposer take them: "host:port" or "[ipv6]:port".
// Checked when a config is loaded, so that a typo fails at start-up with a message naming the
// setting rather than as a bind error. Torch-free.
#pragma once

#include <string>
#include <string_view>

namespace cube3d {

struct HostPort {
  std::string host;  // without brackets
  int port = 0;      // 1..65535
};

// Parses `text`; invalid_argument otherwise, with a message that starts with `what` (the
// setting's name, "listen") and quotes the text: "listen: '0.0.0.0:0': port 0 is out of range
// (1..65535)". Host names are not resolved: only the characters no name or address has are
// refused.
HostPort parse_host_port(std::string_view text, std::string_view what = "address");

// "0.0.0.0" or "::": a listener there takes the port on every interface.
bool is_wildcard_host(std::string_view host);

// Whether two listeners would ask for the same port on an interface they share, so that the
// second bind would fail.
bool listeners_collide(const HostPort& a, const HostPort& b);

}  // namespace cube3d
