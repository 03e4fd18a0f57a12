// The result cache's shared tier (cache.redis): entries in the Redis that every replica uses
// (redis.url), so that a prompt computed on one replica is a hit on the others, and a claim on
// each key being computed, so that two replicas do not compute one prompt twice.
//
// Entries: <prefix>cache:<64 hex of the key>, the disk tier's entry format (entry_files.h: the
// 84-byte header with the key, the payload's length and its SHA-256, then the payload), with a
// TTL of cache.redis_ttl_s. A read checks the header against the key asked for and the payload
// against its checksum; an entry that fails is deleted, counted and answered as a miss, never
// served. Redis bounds the tier's memory (its maxmemory and eviction policy: volatile-lru evicts
// these entries, which carry a TTL, and never the job records, which carry none while open).
//
// Claims: <prefix>cache-claim:<hex> holds the replica computing the key, with a lease of
// claim_ms that the replica renews while the work lives. A lookup that misses while another
// replica holds the claim waits, holding no thread, until that replica stores the result (a
// message on <prefix>cache-ready wakes it: a hit), or gives the claim up (the work failed or
// every caller left), or its lease lapses (the replica died), or the lookup's own deadline comes:
// then it answers a miss and the caller computes (and claims). A claim is best-effort: two
// replicas that miss at the same instant may both compute.
//
// Redis unreachable: every lookup is a miss (the caller computes), stores and claims are
// dropped; nothing waits past redis.timeout_ms (redis_client.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "cube3d/server/cache/cache_key.h"
#include "cube3d/server/redis/redis_client.h"
#include "cube3d/server/redis/redis_subscriber.h"
#include "cube3d/server/timing/timer_queue.h"

namespace cube3d {

struct RedisResultTierOptions {
  std::string key_prefix = "cube3d:";           // redis.key_prefix
  int64_t ttl_s = 86'400;                       // cache.redis_ttl_s
  int64_t claim_ms = 10'000;                    // a claim's lease (jobs.lease_ms)
  int64_t max_entry_bytes = int64_t{64} << 20;  // larger payloads are not shared
  std::string replica;                          // this replica's id, in the claims it holds
};

// What the tier tells the metrics (each may be empty), from the Redis client's threads.
struct RedisResultTierObserver {
  // A lookup's end: "hit", "miss", "corrupt" (deleted, then a miss) or "error" (Redis could not
  // be asked: a miss).
  std::function<void(const char* result)> on_lookup;
  // A lookup that waited for another replica's computation, and whether it ended in a hit.
  std::function<void(bool hit)> on_waited;
};

class RedisResultTier {
 public:
  using Value = std::shared_ptr<const std::string>;
  using Clock = TimerQueue::Clock;

  // All three must outlive the tier. Subscribes to <prefix>cache-ready.
  RedisResultTier(RedisClient& client, RedisSubscriber& subscriber, TimerQueue& timers,
                  RedisResultTierOptions options, RedisResultTierObserver observer = {});
  // Answers the lookups still waiting with a miss and gives up this replica's claims.
  ~RedisResultTier();
  RedisResultTier(const RedisResultTier&) = delete;
  RedisResultTier& operator=(const RedisResultTier&) = delete;

  // done(value) on a hit, done(nullptr) on a miss (see above for the wait), exactly once, on a
  // Redis client thread or the timer thread.
  void lookup(const CacheKey& key, Clock::time_point wait_until, std::function<void(Value)> done);
  // Stores the entry (and gives up this replica's claim on the key, waking the lookups waiting on
  // it); fire and forget.
  void store(const CacheKey& key, const Value& value);
  // Deletes the entry (its payload passed its checks but was no answer the service could read).
  void erase(const CacheKey& key);

  // This replica computes `key` while the returned handle lives (renewed every claim_ms / 3).
  class Claim;
  std::shared_ptr<Claim> claim(const CacheKey& key);

  const RedisResultTierOptions& options() const;

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace cube3d
