#include "cube3d/server/grpc/grpc_server_options.h"

#include <grpc/grpc.h>
#include <grpcpp/resource_quota.h>

#include <algorithm>
#include <climits>

namespace cube3d {
namespace {

int as_int(int64_t value) { return static_cast<int>(std::min<int64_t>(value, INT_MAX)); }

}  // namespace

void apply_grpc_options(grpc::ServerBuilder& builder, const GrpcOptions& o,
                        int64_t max_message_bytes) {
  grpc::ResourceQuota quota("cube3d-grpc");
  quota.SetMaxThreads(as_int(o.max_threads));
  builder.SetResourceQuota(quota);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, as_int(o.max_concurrent_streams));
  // Keepalive: the server's own pings find dead peers; clients' pings are held to a rate.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, as_int(o.keepalive_time_ms));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, as_int(o.keepalive_timeout_ms));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             as_int(o.min_client_ping_interval_ms));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, as_int(o.max_ping_strikes));
  // Connection lifetime (clients reconnect and spread over replicas).
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, as_int(o.max_connection_age_ms));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                             as_int(o.max_connection_age_grace_ms));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, as_int(o.max_connection_idle_ms));
  // A connection's TLS handshake and HTTP/2 preface and SETTINGS are due within this (gRPC's
  // default is 120 s: a client that connects and stalls would hold its socket that long).
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, as_int(o.handshake_timeout_ms));
  builder.SetMaxReceiveMessageSize(as_int(max_message_bytes));
  // Responses are checked against the limit by the service (with a helpful message); the
  // transport limit leaves room for the envelope.
  builder.SetMaxSendMessageSize(as_int(max_message_bytes + (1 << 20)));
}

}  // namespace cube3d
