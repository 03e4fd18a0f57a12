// The server's commands to Redis, on threads of the client's own: a caller (an HTTP I/O thread,
// a gRPC callback, the scheduler's or a mesh thread, the timer thread) queues a pipeline of
// commands and returns at once; the answer comes back by callback on one of the client's
// threads. Nothing that serves requests ever waits on Redis.
//
// Lanes: `lanes` connections, each with its thread and its FIFO. Commands on one lane run in the
// order they were queued (the job store puts every command of a job on the lane of its id), the
// lanes side by side (a large result being written does not hold up another job's poll).
//
// Every command has a deadline (redis.timeout_ms from when it is queued, unless the caller gives
// one): a command still queued or running then is answered UNAVAILABLE "timed out" by the
// client's watchdog, whatever its connection is doing, and its late reply is dropped. A failed
// connection is replaced; while Redis cannot be reached the client retries the connection with
// backoff (100 ms doubling to 2 s, or to redis.connect_timeout_ms when shorter) and answers what
// comes meanwhile UNAVAILABLE at once, naming the last error, instead of letting each command wait
// out a connect. More than `max_pending` commands queued: UNAVAILABLE at once (a Redis that stalls
// costs bounded memory).
//
// Failover: a pipeline answered READONLY reached a replica (the primary was demoted, or a
// managed endpoint still points at the old one): none of its writes ran there, so the
// connection is dropped and the pipeline sent once more on a new one, to the primary the
// sentinels (redis.sentinels) or the DNS name now give; READONLY again answers UNAVAILABLE and
// counts as Redis being down, until a connection reaches a primary. With sentinels the client
// also asks them every second which the primary is, and moves its connections when it changes
// (a failover whose old primary is cut off but still takes writes, which a rejoin would lose).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "cube3d/core/status.h"
#include "cube3d/server/redis/redis_connection.h"
#include "cube3d/server/redis/redis_reply.h"
#include "cube3d/server/redis/redis_sentinel.h"
#include "cube3d/server/redis/redis_url.h"

namespace cube3d {

struct RedisClientOptions {
  RedisEndpoint endpoint;
  // redis.sentinels: each new connection goes to the primary they name (endpoint's host and
  // port unused then).
  RedisSentinels sentinels;
  RedisConnectOptions connect;
  std::chrono::milliseconds command_timeout{1000};  // redis.timeout_ms
  int64_t lanes = 2;                                // redis.connections
  int64_t max_pending = 10'000;                     // commands queued, all lanes together
};

// What the client tells the metrics (each may be empty); from the client's threads.
struct RedisObserver {
  // One pipeline's end: its first command's name (GET, EVAL, ...), for how long it was out
  // (queued included) and whether it was answered (an error reply of a script counts as
  // answered; a timeout, a refused or broken connection does not).
  std::function<void(const std::string& command, double seconds, bool ok)> on_call;
  // Whether Redis can be reached: after the first connection and at every change.
  std::function<void(bool up)> on_state;
};

class RedisClient {
 public:
  using Clock = std::chrono::steady_clock;
  using Command = std::vector<std::string>;
  using Commands = std::vector<Command>;
  // One reply per command (an error reply is a reply), or why none came (UNAVAILABLE).
  using Result = std::variant<std::vector<RedisReply>, Status>;
  using Done = std::function<void(Result)>;

  // Starts the lanes' threads; connects lazily (check() connects at once).
  RedisClient(RedisClientOptions options, RedisObserver observer = {});
  // Answers what is still queued UNAVAILABLE ("shutting down") and joins the threads; a thread
  // held in a Redis call returns by that call's deadline.
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  // Queues `commands` as one pipeline on lane `lane % lanes`; `done` runs exactly once: on a
  // client thread, or inline when refused at once (queue full, shutting down, Redis known to be
  // down). `deadline`: default now + command_timeout.
  void run(Commands commands, Done done, uint64_t lane = 0,
           std::optional<Clock::time_point> deadline = std::nullopt);

  // Waits for the answer (start-up checks, tests, shutdown): never on a thread that serves
  // requests.
  Result run_sync(Commands commands, uint64_t lane = 0);

  // Connects now (a PING within the connect timeout); OK, or UNAVAILABLE naming the endpoint
  // and the error: the start-up check of redis.url.
  Status check();

  bool up() const;
  std::string last_error() const;
  const RedisClientOptions& options() const;
  // A lane for a key (its hash), so that one key's commands keep their order.
  static uint64_t lane_of(std::string_view key);

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace cube3d
