// The one gRPC channel the clients open to a server: cube3d-client (its mesh call and --health)
// and cube3d-loadgen's gRPC sender (grpc_sender.h). In one place so that the two tools reach a
// server the same way:
//   - the target from --server (grpc_target.h: one address, a name with several, or a list);
//   - calls balanced round robin over the addresses whose health is SERVING: the channel
//     watches each one's grpc.health.v1 status for cube3d.v1.MeshService (gRPC's client-side
//     health checking) and sends no call to a replica that is loading its model, draining or
//     out after a device fault, so that a retry after UNAVAILABLE goes to one that can answer
//     (a server without the health service counts as SERVING);
//   - no limit on a reply's size (gRPC's default is 4 MiB, and a mesh can be larger);
//   - TLS as --tls / --ca / --server-name say (client_tls.h): the system's roots or the --ca
//     root, the certificate checked for --server-name when given; plaintext without --tls.
#pragma once

#include <grpcpp/channel.h>

#include <chrono>
#include <memory>
#include <string_view>

#include "cube3d/clients/client_tls.h"

namespace cube3d {

enum class ChannelPurpose {
  kCalls,        // MeshService calls: only to replicas whose health is SERVING
  kHealthProbe,  // cube3d-client --health: asks the health itself, so it must reach a replica
                 // that is not SERVING to hear it say so
};

// Throws invalid_argument naming --server (grpc_target) for a server that is not an address.
// gRPC connects lazily: a server that is down fails the first call UNAVAILABLE, not this.
std::shared_ptr<grpc::Channel> open_grpc_channel(std::string_view servers, const ClientTls& tls,
                                                 ChannelPurpose purpose = ChannelPurpose::kCalls);

// Connects `channel` if it is idle and waits until one of its replicas reports SERVING (a
// kCalls channel is READY only then: the health watch keeps a loading replica out), or until
// `deadline`: false then. For a kHealthProbe channel, READY means only connected.
bool wait_for_a_serving_replica(grpc::Channel& channel,
                                std::chrono::system_clock::time_point deadline);

}  // namespace cube3d
