#include "cube3d/server/grpc/grpc_options.h"

#include <climits>

#include "cube3d/core/error.h"

namespace cube3d {

void validate_grpc_options(const GrpcOptions& o) {
  // Every value becomes a C int channel argument.
  constexpr int64_t kIntMax = INT_MAX;
  require_in_range("grpc.max_threads", o.max_threads, 2, 65'536);
  require_in_range("grpc.max_calls_awaiting_message", o.max_calls_awaiting_message, 1, 1'000'000);
  require_in_range("grpc.max_concurrent_streams", o.max_concurrent_streams, 1, kIntMax);
  require_in_range("grpc.keepalive_time_ms", o.keepalive_time_ms, 1'000, kIntMax);
  require_in_range("grpc.keepalive_timeout_ms", o.keepalive_timeout_ms, 1'000, kIntMax);
  require_in_range("grpc.min_client_ping_interval_ms", o.min_client_ping_interval_ms, 0, kIntMax);
  require_in_range("grpc.max_ping_strikes", o.max_ping_strikes, 0, 1'000);
  require_in_range("grpc.max_connection_age_ms", o.max_connection_age_ms, 1'000, kIntMax);
  require_in_range("grpc.max_connection_age_grace_ms", o.max_connection_age_grace_ms, 0, kIntMax);
  require_in_range("grpc.max_connection_idle_ms", o.max_connection_idle_ms, 1'000, kIntMax);
  require_in_range("grpc.write_timeout_ms", o.write_timeout_ms, 100, kIntMax);
  require_in_range("grpc.handshake_timeout_ms", o.handshake_timeout_ms, 100, kIntMax);
}

}  // namespace cube3d
