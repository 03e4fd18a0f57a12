// cube3d-loadgen over gRPC: MeshService.GenerateMeshStream on the server's gRPC listener, with
// the deadline as the call's deadline and the API key as `authorization: Bearer <key>`
// metadata. All senders of a factory share its channel (one HTTP/2 connection per server;
// calls are multiplexed on it, so a sender is cheap and holds no connection of its own).
// Several servers (--server a,b or a name with several addresses) are balanced round robin over
// those whose health is SERVING (grpc_channel.h), and a call that fails UNAVAILABLE is tried
// again within its deadline (call_retry.h);
// `attempts` in the record says how many it took.
//
// A record: ttft at the first STAGE_DECODING progress event, e2e at the call's final status,
// the status's code name (NO_RESULT for an OK stream without a result), queue_ms from the
// result's timings (OK only).
#pragma once

#include <memory>

#include "cube3d/clients/request_sender.h"

namespace cube3d {

std::unique_ptr<SenderFactory> make_grpc_sender_factory(const SenderOptions& options);

}  // namespace cube3d
