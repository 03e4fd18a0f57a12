// Why a listener cannot start, in words an operator acts on, said only when the bind says so: a
// busy port is "in use by another process" only when the kernel answered EADDRINUSE. gRPC's
// ServerBuilder answers a failed start with no reason at all, so the server binds the address
// itself once more (probe_listen) to learn it; the HTTP server has the bind's own error.
#pragma once

#include <string>

#include "cube3d/core/net_address.h"

namespace cube3d {

// The errno of binding a TCP socket to `address` (with SO_REUSEADDR, as both servers bind) and
// listening on it, the socket closed again; 0 when that works now. A host that does not resolve
// is EADDRNOTAVAIL (names are resolved: give an address where a resolver may be slow).
int probe_listen(const HostPort& address);

// The reason for a bind or listen errno: "the port is in use by another process (is another
// cube3d-server running?)" for EADDRINUSE, "the host is not an address of this machine" for
// EADDRNOTAVAIL, "permission denied (ports below 1024 need CAP_NET_BIND_SERVICE)" for EACCES,
// strerror's text otherwise.
std::string listen_failure_reason(int error_number);

}  // namespace cube3d
