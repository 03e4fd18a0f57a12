// --server for the gRPC clients (cube3d-client, cube3d-loadgen): one address or several, as
// the channel's target (grpc_channel.h balances the calls over its addresses).
//   HOST:PORT             gRPC's DNS resolver: every address the name resolves to (a
//                         Kubernetes headless Service's pods), re-resolved as they change
//   [IPV6]:PORT, unix:PATH, dns:///..., ipv4:..., ipv6:...   passed through
//   A:P,B:Q,...           several replicas: each resolved once, now, into one static list
//                         (IPv4 when every entry has an IPv4 address, else IPv6)
// A URL (http://...) is refused: gRPC would take "http" for a host name and fail later.
#pragma once

#include <string>
#include <string_view>

namespace cube3d {

// The target for `servers`; throws invalid_argument naming `flag` and the entry at fault.
std::string grpc_target(std::string_view servers, std::string_view flag = "--server");

}  // namespace cube3d
