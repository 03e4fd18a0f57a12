// Redis pub/sub on a connection and a thread of its own: how a replica hears at once that a job
// ended (its long-polls answer), that a job it runs was cancelled through another replica, or
// that a result another replica computed is in the shared cache (no polling loop anywhere).
//
// The thread connects (with the client's backoff while Redis is away), subscribes to every
// channel asked for, and hands each message to its channel's handler, in order, on this
// thread; handlers must not block. Messages published while the connection was down are lost:
// after every (re)connection, once the subscriptions are in place, the reconnect handlers run,
// and whoever waits on a message checks again what it waits for. An idle connection is checked
// with a PING every few seconds, so that a silently dead one is replaced.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "cube3d/server/redis/redis_client.h"

namespace cube3d {

class RedisSubscriber {
 public:
  // Uses options.endpoint (or the primary options.sentinels name, asked again at each
  // reconnection), options.connect and options.command_timeout (for a PING's answer).
  explicit RedisSubscriber(RedisClientOptions options);
  // Stops the thread (woken at once) and joins it.
  ~RedisSubscriber();
  RedisSubscriber(const RedisSubscriber&) = delete;
  RedisSubscriber& operator=(const RedisSubscriber&) = delete;

  // Messages published on `channel` go to `handler` from now on (once the SUBSCRIBE is in
  // place). One handler a channel; any thread.
  void subscribe(const std::string& channel, std::function<void(const std::string&)> handler);
  // Runs after each connection once every subscription is in place (the first one included).
  void on_connected(std::function<void()> handler);
  // Subscribed and connected now.
  bool connected() const;

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace cube3d
