// Where the primary of a Redis run the highly-available way is: Redis Sentinel's answer
// (SENTINEL get-master-addr-by-name), asked of each sentinel in turn. The client and the
// subscriber ask it at every new connection, so that after a failover (the primary died, or
// was demoted: its writes then answer READONLY, and the client drops the connection) they
// reconnect to whichever primary the sentinels elected, with no restart.
//
// The sentinels are reached with the redis.url's TLS and password (a Sentinel deployment
// usually shares them); the URL's host and port are not used with sentinels.
#pragma once

#include <chrono>
#include <string>

#include "cube3d/server/redis/redis_connection.h"
#include "cube3d/server/redis/redis_url.h"

namespace cube3d {

// The primary's endpoint: `base` (credentials, database, TLS) at the address the first sentinel
// that answers names. Throws unavailable naming every sentinel and why, when none answers or
// none knows the master, by `deadline`.
RedisEndpoint resolve_primary(const RedisEndpoint& base, const RedisSentinels& sentinels,
                              const RedisConnectOptions& connect,
                              std::chrono::steady_clock::time_point deadline);

// The endpoint a new connection goes to: the primary by the sentinels when they are set, else
// `base`.
RedisEndpoint connection_endpoint(const RedisEndpoint& base, const RedisSentinels& sentinels,
                                  const RedisConnectOptions& connect,
                                  std::chrono::steady_clock::time_point deadline);

// Whether an error reply says the connection reached a replica (a demoted primary, a managed
// endpoint mid-failover): READONLY.
bool read_only_replica_reply(const std::string& error_text);

}  // namespace cube3d
