// Test support shared by the tests of the Redis-backed stores (the job store and the result
// cache's tier): several replicas over one redis-server of the test's own, each replica with its
// own client and subscriber as in the server, and a fixture that starts the redis-server once for
// its suite and gives every test keys of its own.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "cube3d/server/redis/redis_client.h"
#include "cube3d/server/redis/redis_subscriber.h"
#include "cube3d/server/timing/timer_queue.h"
#include "redis_test_server.h"

namespace cube3d::testing {

// Short timeouts: a test of a Redis that goes away must not wait the server's defaults out.
inline RedisClientOptions replica_client_options(const RedisTestServer& server) {
  RedisClientOptions options;
  options.endpoint = server.endpoint();
  options.connect.connect_timeout = std::chrono::milliseconds(500);
  options.command_timeout = std::chrono::milliseconds(1000);
  return options;
}

// One replica: its client, its subscriber and the `Component` built on them over the shared
// Redis. A test file derives its Replica from this to name `built` after what it tests.
template <typename Component, typename Options, typename Observer>
struct RedisReplica {
  RedisReplica(const RedisTestServer& server, TimerQueue& timers, Options options,
               Observer observer = {})
      : client(replica_client_options(server)),
        subscriber(replica_client_options(server)),
        built(std::make_unique<Component>(client, subscriber, timers, std::move(options),
                                          std::move(observer))) {}
  RedisClient client;
  RedisSubscriber subscriber;
  std::unique_ptr<Component> built;
};

// A suite's fixture: one redis-server for all its tests (skipped where none is installed), the
// timers the replicas share and the options a test adjusts before it builds its replicas.
template <typename Options>
class RedisReplicaTest : public ::testing::Test {
 protected:
  // `key_letter` starts every key of the suite, so that two suites never read each other's.
  explicit RedisReplicaTest(std::string key_letter) : key_letter_(std::move(key_letter)) {}

  static void SetUpTestSuite() {
    if (RedisTestServer::installed()) server_ = std::make_unique<RedisTestServer>();
  }
  static void TearDownTestSuite() { server_.reset(); }
  void SetUp() override {
    if (!server_) GTEST_SKIP() << RedisTestServer::skip_message();
    // Each test its own keys: the tests share one redis-server.
    options_.key_prefix = key_letter_ + std::to_string(++test_number_) + ":";
  }

  TimerQueue timers_;  // first: it outlives the replicas, as in the server
  Options options_;
  static inline std::unique_ptr<RedisTestServer> server_;
  static inline int test_number_ = 0;

 private:
  std::string key_letter_;
};

}  // namespace cube3d::testing
