#include "cube3d/server/redis/redis_sentinel.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/server/redis/redis_client.h"
#include "redis_test_server.h"

namespace cube3d {
namespace {

using testing::RedisTestServer;
using Clock = std::chrono::steady_clock;

constexpr const char* kMaster = "jobs-primary";
// A primary that starts its replica's first sync at once (Redis waits 5 s by default).
const std::vector<std::string> kQuickSync = {"--repl-diskless-sync-delay", "0"};

RedisTestServer sentinel_over(const RedisTestServer& primary) {
  return RedisTestServer(
      {"--sentinel", "monitor", kMaster, "127.0.0.1", std::to_string(primary.port()), "1"},
      /*sentinel=*/true);
}

// A client of one lane that finds its primary through `sentinel` alone (the endpoint is unused).
RedisClientOptions through(const RedisTestServer& sentinel) {
  RedisClientOptions options;
  options.endpoint = parse_redis_url("redis://unused.invalid");
  options.sentinels = {{"127.0.0.1:" + std::to_string(sentinel.port())}, kMaster};
  options.lanes = 1;
  return options;
}

RedisReply command_on(const RedisTestServer& server, const std::vector<std::string>& argv) {
  RedisConnection connection(server.endpoint(), {});
  return connection.command(argv, Clock::now() + std::chrono::seconds(2));
}

// Waits until the replica has finished its first sync (writes would otherwise lag the test).
void wait_in_sync(const RedisTestServer& replica) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < deadline) {
    const RedisReply info = command_on(replica, {"INFO", "replication"});
    if (info.text.find("master_link_status:up") != std::string::npos) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  FAIL() << "the replica did not sync with its primary";
}

TEST(RedisSentinelTest, ValidateNamesTheSettingAtFault) {
  EXPECT_NO_THROW(validate_sentinels({}));
  EXPECT_NO_THROW(validate_sentinels({{"10.0.0.1:26379", "[::1]:26379", "sentinel-0:26379"}, "m"}));
  try {
    validate_sentinels({{"10.0.0.1:26379"}, ""});
    FAIL() << "sentinels without a master name were taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("redis.master_name"), std::string::npos) << e.what();
  }
  for (const char* bad : {"10.0.0.1", "host:0", "host:99999", "a b:1", ""}) {
    try {
      validate_sentinels({{bad}, "m"});
      FAIL() << "took \"" << bad << "\"";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("redis.sentinels"), std::string::npos) << e.what();
    }
  }
}

TEST(RedisSentinelTest, ReadOnlyRepliesAreTheReplicas) {
  EXPECT_TRUE(read_only_replica_reply("READONLY You can't write against a read only replica."));
  EXPECT_TRUE(read_only_replica_reply(
      "ERR Error running script (call to f_1): @user_script:1: READONLY You can't write"));
  EXPECT_FALSE(read_only_replica_reply("ERR unknown command"));
  EXPECT_FALSE(read_only_replica_reply("NOSCRIPT No matching script"));
}

TEST(RedisSentinelTest, ResolvesThePrimaryAndKeepsTheUrlsCredentials) {
  if (!RedisTestServer::installed()) GTEST_SKIP() << RedisTestServer::skip_message();
  const RedisTestServer primary;
  const RedisTestServer sentinel = sentinel_over(primary);
  RedisEndpoint base = parse_redis_url("rediss://:pw@unused.example:1/3");
  base.tls = false;  // the test's sentinel is plaintext; credentials and db must carry over
  base.password.clear();
  const RedisEndpoint found =
      resolve_primary(base,
                      {{"127.0.0.1:" + std::to_string(testing::free_loopback_port()),
                        "127.0.0.1:" + std::to_string(sentinel.port())},
                       kMaster},
                      {}, Clock::now() + std::chrono::seconds(5));
  EXPECT_EQ(found.host, "127.0.0.1");
  EXPECT_EQ(found.port, primary.port());
  EXPECT_EQ(found.db, 3);

  try {
    resolve_primary(base, {{"127.0.0.1:" + std::to_string(sentinel.port())}, "no-such-master"}, {},
                    Clock::now() + std::chrono::seconds(5));
    FAIL() << "an unknown master resolved";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_NE(std::string(e.what()).find("no-such-master"), std::string::npos) << e.what();
  }
  const int nobody = testing::free_loopback_port();
  try {
    resolve_primary(base, {{"127.0.0.1:" + std::to_string(nobody)}, kMaster}, {},
                    Clock::now() + std::chrono::seconds(5));
    FAIL() << "a sentinel that is not there answered";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(nobody)), std::string::npos) << e.what();
  }
}

// The primary is demoted under a client's open connection (as a failover does to a primary that
// comes back): its next write answers READONLY there, and the client sends it again to the
// primary the sentinel names now, with no error for its caller.
TEST(RedisSentinelTest, AWriteAnsweredReadOnlyGoesToTheNewPrimary) {
  if (!RedisTestServer::installed()) GTEST_SKIP() << RedisTestServer::skip_message();
  const RedisTestServer old_primary(kQuickSync);
  const RedisTestServer new_primary(
      {"--replicaof", "127.0.0.1", std::to_string(old_primary.port())});
  wait_in_sync(new_primary);
  const RedisTestServer sentinel = sentinel_over(old_primary);

  RedisClient client(through(sentinel));
  auto before = client.run_sync({{"SET", "k", "before"}});
  ASSERT_TRUE(std::holds_alternative<std::vector<RedisReply>>(before));
  EXPECT_EQ(std::get<std::vector<RedisReply>>(before).front().text, "OK");

  // The roles swap; the sentinel is told (a real one finds it out, or runs the failover).
  command_on(new_primary, {"REPLICAOF", "NO", "ONE"});
  command_on(old_primary, {"REPLICAOF", "127.0.0.1", std::to_string(new_primary.port())});
  command_on(sentinel, {"SENTINEL", "REMOVE", kMaster});
  command_on(sentinel, {"SENTINEL", "MONITOR", kMaster, "127.0.0.1",
                        std::to_string(new_primary.port()), "1"});

  auto after = client.run_sync({{"SET", "k", "after"}, {"GET", "k"}});
  ASSERT_TRUE(std::holds_alternative<std::vector<RedisReply>>(after))
      << std::get<Status>(after).message();
  const auto& replies = std::get<std::vector<RedisReply>>(after);
  EXPECT_EQ(replies[0].text, "OK");
  EXPECT_EQ(replies[1].text, "after");
  EXPECT_EQ(command_on(new_primary, {"GET", "k"}).text, "after");
  EXPECT_TRUE(client.up());
}

// The sentinels name another primary while the old one still takes writes (cut off from them,
// as in a partition): the client moves there within a poll or two, so that no write goes where
// the rejoin would throw it away.
TEST(RedisSentinelTest, TheClientFollowsThePrimaryTheSentinelsName) {
  if (!RedisTestServer::installed()) GTEST_SKIP() << RedisTestServer::skip_message();
  const RedisTestServer old_primary;
  const RedisTestServer new_primary;
  const RedisTestServer sentinel = sentinel_over(old_primary);
  RedisClient client(through(sentinel));
  ASSERT_TRUE(
      std::holds_alternative<std::vector<RedisReply>>(client.run_sync({{"SET", "k", "1"}})));
  EXPECT_EQ(command_on(old_primary, {"GET", "k"}).text, "1");

  command_on(sentinel, {"SENTINEL", "REMOVE", kMaster});
  command_on(sentinel, {"SENTINEL", "MONITOR", kMaster, "127.0.0.1",
                        std::to_string(new_primary.port()), "1"});
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  int writes = 0;
  while (Clock::now() < deadline && command_on(new_primary, {"GET", "k"}).text != "2") {
    client.run_sync({{"SET", "k", "2"}});
    ++writes;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(command_on(new_primary, {"GET", "k"}).text, "2");
  EXPECT_LE(writes, 30) << "the client took over 3 s to follow the sentinels";
}

// With nothing to send it to (a replica is all the URL reaches), a write is answered UNAVAILABLE
// naming READONLY, and Redis counts as down until a connection reaches a primary.
TEST(RedisSentinelTest, AReplicaAloneAnswersUnavailableUntilItIsPromoted) {
  if (!RedisTestServer::installed()) GTEST_SKIP() << RedisTestServer::skip_message();
  const RedisTestServer primary(kQuickSync);
  const RedisTestServer replica({"--replicaof", "127.0.0.1", std::to_string(primary.port())});
  wait_in_sync(replica);
  RedisClientOptions options;
  options.endpoint = replica.endpoint();
  options.lanes = 1;
  RedisClient client(options);
  const auto refused = client.run_sync({{"SET", "k", "v"}});
  ASSERT_TRUE(std::holds_alternative<Status>(refused));
  EXPECT_EQ(std::get<Status>(refused).code(), ErrorCode::kUnavailable);
  EXPECT_NE(std::get<Status>(refused).message().find("READONLY"), std::string::npos)
      << std::get<Status>(refused).message();
  EXPECT_FALSE(client.up());

  command_on(replica, {"REPLICAOF", "NO", "ONE"});
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  RedisClient::Result written = Status(ErrorCode::kUnavailable, "not tried");
  while (Clock::now() < deadline) {
    written = client.run_sync({{"SET", "k", "v"}});
    if (std::holds_alternative<std::vector<RedisReply>>(written)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(std::holds_alternative<std::vector<RedisReply>>(written))
      << std::get<Status>(written).message();
  EXPECT_TRUE(client.up());
}

}  // namespace
}  // namespace cube3d
