#include "cube3d/server/redis/redis_sentinel.h"

#include <algorithm>

#include "cube3d/core/error.h"
#include "cube3d/core/net_address.h"

namespace cube3d {

RedisEndpoint resolve_primary(const RedisEndpoint& base, const RedisSentinels& sentinels,
                              const RedisConnectOptions& connect,
                              std::chrono::steady_clock::time_point deadline) {
  std::string why;
  for (const std::string& address : sentinels.addresses) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    RedisEndpoint sentinel = base;
    const HostPort hp = parse_host_port(address);
    sentinel.host = hp.host;
    sentinel.port = hp.port;
    sentinel.db = 0;  // a sentinel has no databases
    RedisConnectOptions options = connect;
    options.connect_timeout =
        std::min(options.connect_timeout,
                 std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now));
    try {
      RedisConnection connection(sentinel, options);
      const RedisReply reply = connection.command(
          {"SENTINEL", "get-master-addr-by-name", sentinels.master_name}, deadline);
      if (reply.type == RedisReply::Type::kArray && reply.elements.size() == 2) {
        RedisEndpoint primary = base;
        primary.host = reply.elements[0].text;
        primary.port = static_cast<int>(reply.elements[1].as_int());
        return primary;
      }
      why +=
          (why.empty() ? "" : "; ") + address + ": " +
          (reply.error() ? reply.text : "does not know master \"" + sentinels.master_name + "\"");
    } catch (const std::exception& e) {
      why += (why.empty() ? "" : "; ") + std::string(e.what());
    }
  }
  throw unavailable("redis.sentinels: no sentinel named the primary of \"" + sentinels.master_name +
                    "\" (" + (why.empty() ? "out of time" : why) + ")");
}

RedisEndpoint connection_endpoint(const RedisEndpoint& base, const RedisSentinels& sentinels,
                                  const RedisConnectOptions& connect,
                                  std::chrono::steady_clock::time_point deadline) {
  if (!sentinels.enabled()) return base;
  return resolve_primary(base, sentinels, connect, deadline);
}

bool read_only_replica_reply(const std::string& error_text) {
  return error_text.starts_with("READONLY") || error_text.find(" READONLY ") != std::string::npos;
}

}  // namespace cube3d
