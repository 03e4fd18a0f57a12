// Applies the `grpc:` section (grpc_options.h says what each setting bounds) to a ServerBuilder.
#pragma once

#include <grpcpp/server_builder.h>

#include <cstdint>

#include "cube3d/server/grpc/grpc_options.h"

namespace cube3d {

// The ResourceQuota, the HTTP/2 and keepalive channel arguments, and the message size limits:
// `max_message_bytes` is limits.max_message_bytes (the receive limit; the send limit leaves room
// for the envelope).
void apply_grpc_options(grpc::ServerBuilder& builder, const GrpcOptions& options,
                        int64_t max_message_bytes);

}  // namespace cube3d
