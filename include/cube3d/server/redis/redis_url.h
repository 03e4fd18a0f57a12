// Where the shared job store and result-cache tier live (redis.url): a Redis URL, as Redis'
// own clients read it.
//
//   redis://[[user]:password@]host[:port][/db]     plaintext (port 6379 by default)
//   rediss://[[user]:password@]host[:port][/db]    TLS (the server's certificate is checked
//                                                  against redis.tls_ca_file, else the system's
//                                                  roots, and must name the host)
//
// The user and password are percent-decoded (a password holding '@' or ':' is written %40,
// %3A); an empty user with a password is the classic `AUTH password` (requirepass), a user
// with a password is ACL's `AUTH user password`. The host may be a name, an IPv4 address or an
// IPv6 address in brackets ([::1]). Anything else (a query, a fragment, a path that is not a
// database number) is refused with a message naming redis.url.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cube3d {

struct RedisEndpoint {
  std::string host;
  int port = 6379;
  std::string user;      // empty: the default user
  std::string password;  // empty: no AUTH
  int64_t db = 0;        // SELECT db when not 0
  bool tls = false;      // rediss://
  bool operator==(const RedisEndpoint&) const = default;
};

// Redis Sentinel (redis_sentinel.h finds the primary through them): checked with the config.
struct RedisSentinels {
  std::vector<std::string> addresses;  // redis.sentinels: host:port, [v6]:port
  std::string master_name;             // redis.master_name
  bool enabled() const { return !addresses.empty(); }
  bool operator==(const RedisSentinels&) const = default;
};

// Throws invalid_argument naming redis.sentinels or redis.master_name for an address that is not
// host:port, or sentinels without a master name.
void validate_sentinels(const RedisSentinels& sentinels);

// Throws invalid_argument naming `key` (redis.url) and what is wrong; the message never holds
// the password.
RedisEndpoint parse_redis_url(std::string_view url, std::string_view key = "redis.url");

// The URL with its password replaced by "***" (logs, --print-config's comment, errors).
std::string redact_redis_url(std::string_view url);

// "host:port" (brackets around an IPv6 host), for messages.
std::string endpoint_text(const RedisEndpoint& endpoint);

}  // namespace cube3d
