// The Redis client against a redis-server of the test's own (redis_test_server.h): pipelines,
// lanes, every wait bounded (a Redis that answers nothing, a Redis that is gone), the way back,
// passwords, TLS, and pub/sub.
#include "cube3d/server/redis/redis_client.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <future>
#include <mutex>
#include <thread>

#include "cube3d/server/redis/redis_subscriber.h"
#include "eventually.h"
#include "redis_test_server.h"

namespace cube3d::test_redis_client {

using cube3d::testing::eventually;
using cube3d::testing::RedisTestServer;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

#define SKIP_WITHOUT_REDIS() \
  if (!RedisTestServer::installed()) GTEST_SKIP() << RedisTestServer::skip_message()

RedisClientOptions options_for(const RedisTestServer& server, int64_t lanes = 2) {
  RedisClientOptions options;
  options.endpoint = server.endpoint();
  options.lanes = lanes;
  options.connect.connect_timeout = std::chrono::milliseconds(500);
  options.command_timeout = std::chrono::milliseconds(500);
  return options;
}

const std::vector<RedisReply>& replies_of(const RedisClient::Result& result) {
  if (const auto* status = std::get_if<Status>(&result)) {
    throw std::runtime_error("no replies: " + status->message());
  }
  return std::get<std::vector<RedisReply>>(result);
}

TEST(RedisClient, PipelineAnswersEachCommandInOrder) {
  SKIP_WITHOUT_REDIS();
  RedisTestServer server;
  RedisClient client(options_for(server));
  ASSERT_TRUE(client.check().ok());
  EXPECT_TRUE(client.up());
  const std::string binary("a\0b\r\n", 5);  // binary-safe values
  const auto result = client.run_sync(
      {{"SET", "k", binary}, {"GET", "k"}, {"INCRBY", "n", "5"}, {"GET", "missing"}, {"BOGUS"}});
  const auto& replies = replies_of(result);
  ASSERT_EQ(replies.size(), 5u);
  EXPECT_EQ(replies[0].text, "OK");
  EXPECT_EQ(replies[1].text, binary);
  EXPECT_EQ(replies[2].as_int(), 5);
  EXPECT_TRUE(replies[3].nil());
  EXPECT_TRUE(replies[4].error());  // an error reply is a reply, not a failure
}

TEST(RedisClient, OneLaneKeepsTheOrderOfItsCommands) {
  SKIP_WITHOUT_REDIS();
  RedisTestServer server;
  RedisClient client(options_for(server));
  std::mutex mutex;
  std::vector<int64_t> seen;
  std::atomic<int> answered{0};
  for (int i = 0; i < 200; ++i) {
    client.run(
        {{"RPUSH", "order", std::to_string(i)}},
        [&](RedisClient::Result result) {
          const std::lock_guard lock(mutex);
          seen.push_back(replies_of(result).front().as_int());
          ++answered;
        },
        RedisClient::lane_of("order"));
  }
  ASSERT_TRUE(eventually([&] { return answered.load() == 200; }));
  // The result is kept: replies_of() answers a reference into it.
  const RedisClient::Result listed = client.run_sync({{"LRANGE", "order", "0", "-1"}});
  const auto& list = replies_of(listed).front();
  ASSERT_EQ(list.elements.size(), 200u);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(list.elements[i].as_int(), i);
}

TEST(RedisClient, ARedisThatAnswersNothingCostsTheDeadlineNotMore) {
  SKIP_WITHOUT_REDIS();
  RedisTestServer server;
  RedisClient client(options_for(server));
  ASSERT_TRUE(client.check().ok());
  server.pause();  // SIGSTOP: connections stay open, nothing is answered
  const auto start = Clock::now();
  const auto result = client.run_sync({{"GET", "k"}});
  const auto took = Clock::now() - start;
  server.resume();
  ASSERT_TRUE(std::holds_alternative<Status>(result));
  EXPECT_EQ(std::get<Status>(result).code(), ErrorCode::kUnavailable);
  EXPECT_NE(std::get<Status>(result).message().find("redis"), std::string::npos);
  EXPECT_LT(took, std::chrono::milliseconds(2500));  // 500 ms asked, room for a loaded machine
}

TEST(RedisClient, AGoneRedisIsRefusedAtOnceAndTheClientComesBack) {
  SKIP_WITHOUT_REDIS();
  RedisTestServer server;
  std::atomic<int> downs{0}, ups{0};
  RedisObserver observer;
  observer.on_state = [&](bool up) { ++(up ? ups : downs); };
  RedisClient client(options_for(server), observer);
  ASSERT_TRUE(client.check().ok());
  server.stop();
  // The first command finds the connection closed; later ones are refused at once while the
  // reconnection backs off.
  const auto first = client.run_sync({{"GET", "k"}});
  ASSERT_TRUE(std::holds_alternative<Status>(first));
  const auto second = client.run_sync({{"GET", "k"}});
  ASSERT_TRUE(std::holds_alternative<Status>(second));
  EXPECT_FALSE(client.up());
  EXPECT_GE(downs.load(), 1);
  const auto start = Clock::now();
  for (int i = 0; i < 20; ++i) client.run_sync({{"GET", "k"}});
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));  // not 20 connect timeouts
  ASSERT_TRUE(server.start());
  ASSERT_TRUE(eventually([&] {
    return std::holds_alternative<std::vector<RedisReply>>(client.run_sync({{"PING"}}));
  }));
  EXPECT_TRUE(client.up());
  EXPECT_GE(ups.load(), 2);
}

TEST(RedisClient, ARedisRestartedWhileTheClientWasIdleCostsNoCommand) {
  SKIP_WITHOUT_REDIS();
  RedisTestServer server;
  RedisClient client(options_for(server, 2));
  ASSERT_TRUE(client.check().ok());
  for (uint64_t lane = 0; lane < 2; ++lane) {  // each lane holds a connection
    ASSERT_TRUE(std::holds_alternative<std::vector<RedisReply>>(client.run_sync({{"PING"}}, lane)));
  }
  server.stop();
  ASSERT_TRUE(server.start());  // answers again before any command found the old connections
  for (uint64_t lane = 0; lane < 2; ++lane) {
    const auto result = client.run_sync({{"SET", "k", "v"}, {"GET", "k"}}, lane);
    ASSERT_TRUE(std::holds_alternative<std::vector<RedisReply>>(result))
        << "lane " << lane << ": " << std::get<Status>(result).message();
    EXPECT_EQ(std::get<std::vector<RedisReply>>(result)[1].text, "v");
  }
  EXPECT_TRUE(client.up());
}

// How often Redis ran `command` ("eval", "evalsha"), from INFO commandstats.
int64_t calls_of(const RedisTestServer& server, const std::string& command) {
  RedisConnection connection(server.endpoint(), {});
  const RedisReply info = connection.command({"INFO", "commandstats"}, Clock::now() + 2s);
  const std::string key = "cmdstat_" + command + ":calls=";
  const size_t at = info.text.find(key);
  return at == std::string::npos ? 0 : std::stoll(info.text.substr(at + key.size()));
}

void flush_scripts(const RedisTestServer& server) {
  RedisConnection connection(server.endpoint(), {});
  ASSERT_EQ(connection.command({"SCRIPT", "FLUSH"}, Clock::now() + 2s).text, "OK");
}

TEST(RedisClient, AScriptCrossesTheWireOncePerConnection) {
  SKIP_WITHOUT_REDIS();
  RedisTestServer server;
  RedisClient client(options_for(server, 1));
  for (const std::string value : {"a", "b", "c"}) {
    const auto result = client.run_sync({{"EVAL", "return ARGV[1]", "0", value}});
    EXPECT_EQ(replies_of(result).at(0).text, value);
  }
  EXPECT_EQ(calls_of(server, "eval"), 1);  // in full once, then by its SHA-1
  EXPECT_EQ(calls_of(server, "evalsha"), 2);
  // A script answered with an error (it does not compile) is not taken for held.
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(replies_of(client.run_sync({{"EVAL", "return +", "0"}})).at(0).error());
  }
  EXPECT_EQ(calls_of(server, "eval"), 3);
}

TEST(RedisClient, AFlushedScriptCacheIsRefilledWhereNothingCanRunTwice) {
  SKIP_WITHOUT_REDIS();
  RedisTestServer server;
  RedisClient client(options_for(server, 1));
  const RedisClient::Command incr = {"EVAL", "return redis.call('INCR', KEYS[1])", "1", "n"};
  EXPECT_EQ(replies_of(client.run_sync({incr})).at(0).as_int(), 1);

  // Beside reads only: none of it ran, so it is sent again in full and answers as if nothing
  // had happened.
  flush_scripts(server);
  const auto again = client.run_sync({incr, {"GET", "n"}});
  ASSERT_TRUE(std::holds_alternative<std::vector<RedisReply>>(again))
      << std::get<Status>(again).message();
  EXPECT_EQ(std::get<std::vector<RedisReply>>(again).at(0).as_int(), 2);
  EXPECT_EQ(std::get<std::vector<RedisReply>>(again).at(1).as_int(), 2);

  // Beside a write, which ran: the outcome is unknown, said as for a lost reply, and the next
  // pipeline goes on a new connection. The script itself did not run.
  flush_scripts(server);
  const auto unknown = client.run_sync({incr, {"SET", "w", "1"}});
  ASSERT_TRUE(std::holds_alternative<Status>(unknown));
  EXPECT_EQ(std::get<Status>(unknown).code(), ErrorCode::kUnavailable);
  EXPECT_NE(std::get<Status>(unknown).message().find("NOSCRIPT"), std::string::npos)
      << std::get<Status>(unknown).message();
  EXPECT_EQ(replies_of(client.run_sync({incr})).at(0).as_int(), 3);
}

TEST(RedisClient, AUserWithoutEvalshaIsSentEveryScriptInFull) {
  SKIP_WITHOUT_REDIS();
  RedisTestServer server;
  {
    RedisConnection admin(server.endpoint(), {});
    ASSERT_EQ(
        admin
            .command({"ACL", "SETUSER", "limited", "on", ">pw", "~*", "&*", "+@all", "-evalsha"},
                     Clock::now() + 2s)
            .text,
        "OK");
  }
  RedisClientOptions options = options_for(server, 1);
  options.endpoint =
      parse_redis_url("redis://limited:pw@127.0.0.1:" + std::to_string(server.port()));
  RedisClient client(options);
  for (const std::string value : {"a", "b", "c"}) {
    const auto result = client.run_sync({{"EVAL", "return ARGV[1]", "0", value}});
    EXPECT_EQ(replies_of(result).at(0).text, value);
  }
  // The first in full; the second refused by SHA-1 and sent again in full; then in full.
  EXPECT_EQ(calls_of(server, "eval"), 3);
}

TEST(RedisClient, StartUpCheckNamesTheEndpoint) {
  RedisClientOptions options;
  options.endpoint =
      parse_redis_url("redis://127.0.0.1:" + std::to_string(cube3d::testing::free_loopback_port()));
  options.connect.connect_timeout = std::chrono::milliseconds(300);
  RedisClient client(options);
  const Status status = client.check();
  EXPECT_EQ(status.code(), ErrorCode::kUnavailable);
  EXPECT_NE(status.message().find("127.0.0.1"), std::string::npos) << status.message();
}

TEST(RedisClient, PasswordFromTheUrl) {
  SKIP_WITHOUT_REDIS();
  RedisTestServer server({"--requirepass", "s3cr@t"});
  RedisClientOptions options = options_for(server);
  options.endpoint =
      parse_redis_url("redis://:s3cr%40t@127.0.0.1:" + std::to_string(server.port()));
  RedisClient client(options);
  EXPECT_TRUE(client.check().ok());
  options.endpoint.password = "wrong";
  RedisClient wrong(options);
  const Status refused = wrong.check();
  EXPECT_EQ(refused.code(), ErrorCode::kUnavailable);
  EXPECT_NE(refused.message().find("AUTH"), std::string::npos) << refused.message();
  EXPECT_EQ(refused.message().find("wrong"), std::string::npos) << refused.message();
}

TEST(RedisClient, TlsChecksTheServersCertificate) {
  SKIP_WITHOUT_REDIS();
  cube3d::testing::TempDir dir("cube3d_redis_tls");
  const std::string command = "openssl req -x509 -newkey rsa:2048 -nodes -keyout " + dir.path() +
                              "/key.pem -out " + dir.path() +
                              "/cert.pem -days 1 -subj /CN=localhost -addext "
                              "subjectAltName=DNS:localhost,IP:127.0.0.1 >/dev/null 2>&1";
  if (std::system(command.c_str()) != 0) GTEST_SKIP() << "openssl cannot make a certificate";
  const int tls_port = cube3d::testing::free_loopback_port();
  RedisTestServer server({"--tls-port", std::to_string(tls_port), "--tls-cert-file",
                          dir.path() + "/cert.pem", "--tls-key-file", dir.path() + "/key.pem",
                          "--tls-ca-cert-file", dir.path() + "/cert.pem", "--tls-auth-clients",
                          "no"});
  RedisClientOptions options = options_for(server);
  options.endpoint = parse_redis_url("rediss://127.0.0.1:" + std::to_string(tls_port));
  options.connect.tls_ca_file = dir.path() + "/cert.pem";
  RedisClient client(options);
  ASSERT_TRUE(client.check().ok()) << client.last_error();
  const RedisClient::Result result = client.run_sync({{"SET", "t", "v"}, {"GET", "t"}});
  const auto& replies = replies_of(result);
  EXPECT_EQ(replies[1].text, "v");
  // The system's roots do not know this certificate: the handshake fails, and says why.
  options.connect.tls_ca_file.clear();
  RedisClient untrusting(options);
  const Status refused = untrusting.check();
  EXPECT_EQ(refused.code(), ErrorCode::kUnavailable);
  EXPECT_NE(refused.message().find("TLS"), std::string::npos) << refused.message();
  // Plaintext to the TLS port: no answer a client can read, within the deadline.
  options.endpoint.tls = false;
  RedisClient plaintext(options);
  EXPECT_FALSE(plaintext.check().ok());
}

TEST(RedisSubscriber, DeliversMessagesAndResubscribesAfterARestart) {
  SKIP_WITHOUT_REDIS();
  RedisTestServer server;
  RedisClient client(options_for(server));
  // Before the subscriber, so that they outlive its thread: a "two" published by an earlier try
  // of the last wait below can still arrive while the test returns.
  std::mutex mutex;
  std::vector<std::string> got;
  std::atomic<int> connections{0};
  RedisSubscriber subscriber(options_for(server));
  subscriber.on_connected([&] { ++connections; });
  subscriber.subscribe("events", [&](const std::string& payload) {
    const std::lock_guard lock(mutex);
    got.push_back(payload);
  });
  // The first connection may come before on_connected() above: only reconnections are counted
  // for sure.
  ASSERT_TRUE(eventually([&] { return subscriber.connected(); }));
  // A subscription may land after the first connection: wait until a publish reaches one.
  ASSERT_TRUE(eventually([&] {
    client.run_sync({{"PUBLISH", "events", "one"}});
    const std::lock_guard lock(mutex);
    return !got.empty();
  }));
  const int before_restart = connections.load();
  server.stop();
  ASSERT_TRUE(eventually([&] { return !subscriber.connected(); }));
  ASSERT_TRUE(server.start());
  ASSERT_TRUE(
      eventually([&] { return connections.load() > before_restart; }, std::chrono::seconds(15)));
  ASSERT_TRUE(eventually([&] {
    client.run_sync({{"PUBLISH", "events", "two"}});
    const std::lock_guard lock(mutex);
    return std::find(got.begin(), got.end(), "two") != got.end();
  }));
}

}  // namespace cube3d::test_redis_client
