// One connection to Redis, used by one thread at a time, every wait bounded: connect (TCP, then
// TLS for rediss://, then AUTH and SELECT) within the connect timeout, each command's write and
// reply within the deadline given. The wire format is hiredis' (its command encoder and reply
// parser, Debian's libhiredis); the socket and TLS (OpenSSL) are ours, because Debian 12's
// hiredis 0.14 has no TLS and because every read and write here waits in poll(2) with a
// deadline, never in a blocking call.
//
// Any failure (refused, timed out, closed, a protocol error, TLS) throws cube3d::Error
// kUnavailable with a message that names the endpoint (never the password) and what failed;
// the connection is then broken (broken() is true) and must be replaced. A Redis error reply
// (-ERR ...) is not a failure of the connection: it comes back as a reply of type kError.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cube3d/server/redis/redis_reply.h"
#include "cube3d/server/redis/redis_url.h"

namespace cube3d {

struct RedisConnectOptions {
  std::chrono::milliseconds connect_timeout{2000};
  // rediss://: PEM roots the server's certificate must chain to; empty: the system's defaults.
  std::string tls_ca_file;
  // CLIENT SETNAME, for CLIENT LIST on the Redis side (letters, digits, '-', '_'); empty: none.
  std::string client_name;
};

class RedisConnection {
 public:
  using Clock = std::chrono::steady_clock;

  // Connects, handshakes TLS, authenticates and selects the database; throws as above.
  RedisConnection(const RedisEndpoint& endpoint, const RedisConnectOptions& options);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Sends the commands at once (a pipeline) and reads one reply each, all by `deadline`. An
  // EVAL of a script that has run on this connection goes as EVALSHA (redis_scripts.h); a
  // NOSCRIPT answer sends the pipeline again in full when none of it ran but reads, and throws
  // (the connection broken) when part of it may have run.
  std::vector<RedisReply> pipeline(const std::vector<std::vector<std::string>>& commands,
                                   Clock::time_point deadline);
  RedisReply command(const std::vector<std::string>& argv, Clock::time_point deadline);

  // Pub/sub: sends without waiting for a reply, and reads the next message or reply. read()
  // answers nullopt when `deadline` passes with nothing read, or when `wake_fd` (an eventfd, or
  // -1) becomes readable: a subscriber's thread waits here and is woken to stop.
  void send(const std::vector<std::string>& argv, Clock::time_point deadline);
  std::optional<RedisReply> read(Clock::time_point deadline, int wake_fd = -1);

  bool broken() const;
  // Whether a request-reply connection can take the next command: not broken, and nothing
  // readable while it was idle. After Redis restarted (or closed an idle client), the end of the
  // stream waits to be read; a command sent on it would fail although a new connection would
  // answer. Marks the connection broken when not (one non-blocking peek, no wait).
  bool idle_and_open();
  const RedisEndpoint& endpoint() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cube3d
