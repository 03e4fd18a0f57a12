// The result cache's shared Redis tier against a redis-server of the test's own
// (redis_test_server.h), two tiers on it as two replicas: an entry stored by one is a hit on the
// other, the disk tier's integrity checks, claims that make a replica wait for another's
// computation (ended by its result, its release, its lapse or the caller's deadline), the tier
// under the result cache, and a Redis that goes away.
#include "cube3d/server/cache/redis_result_tier.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "cube3d/core/sha256.h"
#include "cube3d/server/cache/entry_files.h"
#include "cube3d/server/cache/result_cache.h"
#include "eventually.h"
#include "redis_test_server.h"
#include "server/redis_replica_test.h"

namespace cube3d::test_redis_result_tier {

using cube3d::testing::eventually;
using cube3d::testing::RedisTestServer;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
using Value = RedisResultTier::Value;

CacheKey key_of(const std::string& text) { return sha256(text); }

struct Counted {
  std::mutex mutex;
  std::map<std::string, int> lookups;
  int waited_hits = 0, waited_misses = 0;
  RedisResultTierObserver observer() {
    RedisResultTierObserver o;
    o.on_lookup = [this](const char* result) {
      const std::lock_guard lock(mutex);
      ++lookups[result];
    };
    o.on_waited = [this](bool hit) {
      const std::lock_guard lock(mutex);
      ++(hit ? waited_hits : waited_misses);
    };
    return o;
  }
  int of(const std::string& result) {
    const std::lock_guard lock(mutex);
    return lookups[result];
  }
};

// One replica's tier over the shared Redis.
struct Replica
    : testing::RedisReplica<RedisResultTier, RedisResultTierOptions, RedisResultTierObserver> {
  Replica(const RedisTestServer& server, TimerQueue& timers, RedisResultTierOptions options,
          RedisResultTierObserver observer = {})
      : RedisReplica(server, timers, std::move(options), std::move(observer)) {
    // Claims and results are announced on the channel: a test waits until it listens.
    const bool listening = eventually([this] { return subscriber.connected(); });
    EXPECT_TRUE(listening);
  }
  std::unique_ptr<RedisResultTier>& tier = built;
};

Value lookup(RedisResultTier& tier, const CacheKey& key, milliseconds wait = milliseconds(0)) {
  auto promise = std::make_shared<std::promise<Value>>();
  std::future<Value> future = promise->get_future();
  tier.lookup(key, Clock::now() + wait, [promise](Value v) { promise->set_value(std::move(v)); });
  if (future.wait_for(wait + milliseconds(10'000)) != std::future_status::ready) {
    ADD_FAILURE() << "the lookup did not answer";
    return nullptr;
  }
  return future.get();
}

class RedisResultTierTest : public testing::RedisReplicaTest<RedisResultTierOptions> {
 protected:
  RedisResultTierTest() : RedisReplicaTest("c") { options_.claim_ms = 600; }
  RedisResultTierOptions options_for(const std::string& replica) {
    RedisResultTierOptions options = options_;
    options.replica = replica;
    return options;
  }
  std::string claim_key(const CacheKey& key) const {
    return options_.key_prefix + "cache-claim:" + to_hex(key);
  }
  // Sets a claim on `key` that `replica` does not hold and nobody renews (`holder` for
  // `lease_ms`), then times `replica`'s lookup, which waits at most `wait`, to its miss.
  Clock::duration miss_behind_foreign_claim(Replica& replica, const CacheKey& key,
                                            const char* holder, const char* lease_ms,
                                            milliseconds wait) {
    replica.client.run_sync({{"SET", claim_key(key), holder, "PX", lease_ms}});
    const auto start = Clock::now();
    EXPECT_EQ(lookup(*replica.tier, key, wait), nullptr);
    return Clock::now() - start;
  }
};

TEST_F(RedisResultTierTest, AnEntryStoredByOneReplicaIsAHitOnAnother) {
  Counted counted;
  Replica a(*server_, timers_, options_for("a")),
      b(*server_, timers_, options_for("b"), counted.observer());
  const CacheKey key = key_of("a chair");
  EXPECT_EQ(lookup(*b.tier, key), nullptr);
  const std::string payload("mesh\0bytes", 10);
  a.tier->store(key, std::make_shared<const std::string>(payload));
  Value hit;
  ASSERT_TRUE(eventually([&] { return (hit = lookup(*b.tier, key)) != nullptr; }));
  EXPECT_EQ(*hit, payload);
  EXPECT_GE(counted.of("hit"), 1);
  EXPECT_GE(counted.of("miss"), 1);
  // The entry is the disk tier's format, with a TTL.
  const auto entry = a.client.run_sync({{"GET", options_.key_prefix + "cache:" + to_hex(key)},
                                        {"TTL", options_.key_prefix + "cache:" + to_hex(key)}});
  const auto& replies = std::get<std::vector<RedisReply>>(entry);
  EXPECT_EQ(replies[0].text.substr(0, 8), kEntryMagic);
  EXPECT_EQ(replies[0].text.size(), kEntryHeaderBytes + payload.size());
  EXPECT_GT(replies[1].as_int(), 0);
  EXPECT_LE(replies[1].as_int(), options_.ttl_s);
}

TEST_F(RedisResultTierTest, ADamagedOrMisplacedEntryIsDeletedNotServed) {
  Counted counted;
  Replica a(*server_, timers_, options_for("a"), counted.observer());
  const CacheKey key = key_of("a sword");
  const std::string redis_key = options_.key_prefix + "cache:" + to_hex(key);
  std::string entry = encode_entry_header(key, "payload!") + "payload!";
  entry.back() = '?';  // a flipped byte: the checksum no longer holds
  a.client.run_sync({{"SET", redis_key, entry}});
  EXPECT_EQ(lookup(*a.tier, key), nullptr);
  EXPECT_EQ(counted.of("corrupt"), 1);
  // The tier deletes a damaged entry after answering: wait for it (a SET before that DEL would
  // be deleted by it).
  const auto deleted = [&] {
    return eventually([&] {
      return std::get<std::vector<RedisReply>>(a.client.run_sync({{"EXISTS", redis_key}}))
                 .front()
                 .as_int() == 0;
    });
  };
  ASSERT_TRUE(deleted());
  // Another key's entry under this key's name: its header names the other key.
  const CacheKey other = key_of("a boat");
  a.client.run_sync({{"SET", redis_key, encode_entry_header(other, "x") + "x"}});
  EXPECT_EQ(lookup(*a.tier, key), nullptr);
  EXPECT_EQ(counted.of("corrupt"), 2);
  ASSERT_TRUE(deleted());
  // Shorter than a header.
  a.client.run_sync({{"SET", redis_key, "C3D"}});
  EXPECT_EQ(lookup(*a.tier, key), nullptr);
  EXPECT_EQ(counted.of("corrupt"), 3);
}

TEST_F(RedisResultTierTest, ALookupWaitsForTheReplicaThatClaimedTheKey) {
  Counted counted;
  Replica a(*server_, timers_, options_for("a")),
      b(*server_, timers_, options_for("b"), counted.observer());
  const CacheKey key = key_of("a creature");
  const auto claim = a.tier->claim(key);
  // The claim is in place once a's own lookup reads it as ours.
  ASSERT_TRUE(eventually([&] {
    return std::get<std::vector<RedisReply>>(a.client.run_sync({{"GET", claim_key(key)}}))
               .front()
               .text == "a";
  }));
  std::thread storer([&] {
    std::this_thread::sleep_for(milliseconds(1500));  // longer than the claim's lease: renewed
    a.tier->store(key, std::make_shared<const std::string>("the mesh"));
  });
  const auto start = Clock::now();
  const Value value = lookup(*b.tier, key, milliseconds(20'000));
  const auto took = Clock::now() - start;
  storer.join();
  ASSERT_NE(value, nullptr);
  EXPECT_EQ(*value, "the mesh");
  EXPECT_GE(took, milliseconds(1000));
  EXPECT_LT(took, milliseconds(8'000));
  EXPECT_EQ(counted.waited_hits, 1);
  // The claim went with the result.
  EXPECT_TRUE(std::get<std::vector<RedisReply>>(a.client.run_sync({{"GET", claim_key(key)}}))
                  .front()
                  .nil());
}

TEST_F(RedisResultTierTest, AReleasedClaimWakesTheWaitersToComputeThemselves) {
  Counted counted;
  Replica a(*server_, timers_, options_for("a")),
      b(*server_, timers_, options_for("b"), counted.observer());
  const CacheKey key = key_of("a lamp");
  auto claim = a.tier->claim(key);
  ASSERT_TRUE(eventually([&] {
    return !std::get<std::vector<RedisReply>>(a.client.run_sync({{"GET", claim_key(key)}}))
                .front()
                .nil();
  }));
  std::thread releaser([&] {
    std::this_thread::sleep_for(milliseconds(300));
    claim.reset();  // the work failed, or every caller left it
  });
  const auto start = Clock::now();
  EXPECT_EQ(lookup(*b.tier, key, milliseconds(20'000)), nullptr);
  releaser.join();
  EXPECT_LT(Clock::now() - start, milliseconds(5'000));
  EXPECT_EQ(counted.waited_misses, 1);
}

TEST_F(RedisResultTierTest, AClaimOfADeadReplicaLapses) {
  Replica b(*server_, timers_, options_for("b"));
  // As a replica killed while computing leaves it: a claim nobody renews.
  const auto took =
      miss_behind_foreign_claim(b, key_of("a table"), "dead", "500", milliseconds(20'000));
  EXPECT_GE(took, milliseconds(300));
  EXPECT_LT(took, milliseconds(5'000));
}

TEST_F(RedisResultTierTest, AWaitEndsAtTheCallersDeadline) {
  Replica b(*server_, timers_, options_for("b"));
  const auto took =
      miss_behind_foreign_claim(b, key_of("a tent"), "busy", "60000", milliseconds(400));
  EXPECT_GE(took, milliseconds(350));
  EXPECT_LT(took, milliseconds(5'000));
}

TEST_F(RedisResultTierTest, OurOwnClaimIsAMissAtOnce) {
  Replica a(*server_, timers_, options_for("a"));
  const CacheKey key = key_of("a cup");
  const auto claim = a.tier->claim(key);
  const auto start = Clock::now();
  EXPECT_EQ(lookup(*a.tier, key, milliseconds(20'000)), nullptr);  // coalesced locally instead
  EXPECT_LT(Clock::now() - start, milliseconds(3'000));
}

TEST_F(RedisResultTierTest, UnderTheResultCacheAHitIsKeptInMemory) {
  Replica a(*server_, timers_, options_for("a")), b(*server_, timers_, options_for("b"));
  ResultCache cache_a({}, {}, a.tier.get());
  ResultCache cache_b({}, {}, b.tier.get());
  const CacheKey key = key_of("a ship");
  cache_a.insert(key, "computed on a");
  ResultCache::Value value;
  ASSERT_TRUE(eventually([&] {
    auto promise = std::make_shared<std::promise<ResultCache::Value>>();
    cache_b.lookup(key, [promise](ResultCache::Value v) { promise->set_value(std::move(v)); });
    value = promise->get_future().get();
    return value != nullptr;
  }));
  EXPECT_EQ(*value, "computed on a");
  ASSERT_NE(cache_b.find_in_memory(key), nullptr);  // promoted
  EXPECT_EQ(cache_b.stats().memory_entries, 1);
}

TEST_F(RedisResultTierTest, WithRedisGoneEveryLookupIsAQuickMiss) {
  RedisTestServer own;
  Counted counted;
  Replica a(own, timers_, options_for("a"), counted.observer());
  const CacheKey key = key_of("a kite");
  a.tier->store(key, std::make_shared<const std::string>("bytes"));
  ASSERT_TRUE(eventually([&] { return lookup(*a.tier, key) != nullptr; }));
  own.stop();
  const auto start = Clock::now();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(lookup(*a.tier, key, milliseconds(10'000)), nullptr);
  EXPECT_LT(Clock::now() - start, milliseconds(5'000));
  EXPECT_GE(counted.of("error"), 5);
  a.tier->store(key, std::make_shared<const std::string>("dropped"));  // no throw, no wait
  const auto claim = a.tier->claim(key);
}

}  // namespace cube3d::test_redis_result_tier
