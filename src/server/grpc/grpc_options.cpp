#include "cube3d/server/grpc/grpc_options.h"

#include <climits>
#include <string>

#include "cube3d/core/error.h"

namespace cube3d {
namespace {

void check_grpc_range(const char* key, int64_t value, int64_t min, int64_t max) {
  require_in_range(std::string("grpc.") + key, value, min, max);
}

}  // namespace

void validate_grpc_options(const GrpcOptions& o) {
  // Every value becomes a C int channel argument.
  constexpr int64_t kIntMax = INT_MAX;
  check_grpc_range("max_threads", o.max_threads, 2, 65'536);
  check_grpc_range("max_calls_awaiting_message", o.max_calls_awaiting_message, 1, 1'000'000);
  check_grpc_range("max_concurrent_streams", o.max_concurrent_streams, 1, kIntMax);
  check_grpc_range("keepalive_time_ms", o.keepalive_time_ms, 1'000, kIntMax);
  check_grpc_range("keepalive_timeout_ms", o.keepalive_timeout_ms, 1'000, kIntMax);
  check_grpc_range("min_client_ping_interval_ms", o.min_client_ping_interval_ms, 0, kIntMax);
  check_grpc_range("max_ping_strikes", o.max_ping_strikes, 0, 1'000);
  check_grpc_range("max_connection_age_ms", o.max_connection_age_ms, 1'000, kIntMax);
  check_grpc_range("max_connection_age_grace_ms", o.max_connection_age_grace_ms, 0, kIntMax);
  check_grpc_range("max_connection_idle_ms", o.max_connection_idle_ms, 1'000, kIntMax);
  check_grpc_range("write_timeout_ms", o.write_timeout_ms, 100, kIntMax);
}

}  // namespace cube3d
