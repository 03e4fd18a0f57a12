// The result cache's store: finished answers (opaque bytes, a serialized protobuf) by key, in a
// memory LRU and, optionally, in a folder that survives restarts and in a Redis that every
// replica shares (redis_result_tier.h: looked up after the memory and disk tiers, written beside
// them, with claims so that replicas do not compute one key twice). The server's meshes are
// deterministic, so a hit is the answer; the caller builds the key and decides when to look up
// and insert (and coalesces requests in flight).
//
// The cache is an optimisation: a disk failure (full disk, permission, a corrupt file) costs a
// recompute, never a failed request. Nothing here throws after construction; disk errors are
// logged (spdlog, with the path) and reported to the observer. A disk entry that fails its
// checks is deleted and counted, and the lookup answers nullptr (entry_files.h has the format).
//
// Threads: every method may be called from any thread. One I/O thread (when `dir` is set) does
// all file work: disk reads first, then the queued writes and deletions in order. `done`
// callbacks and observer calls never run under the cache's lock; observer callbacks may run on
// any thread, concurrently (metrics are thread-safe), and must not call back into the cache.
// One server process owns a dir.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "cube3d/server/cache/cache_key.h"
#include "cube3d/server/cache/redis_result_tier.h"
#include "cube3d/server/cache/result_cache_options.h"

namespace cube3d {

// What the cache tells the metrics (each may be empty).
struct ResultCacheObserver {
  // "memory" | "disk": the tier's size after a change (also once at construction).
  std::function<void(const char* tier, int64_t bytes, int64_t entries)> on_size;
  std::function<void(const char* tier)> on_eviction;  // an entry left to make room
  std::function<void()> on_corrupt;        // a disk entry failed its checks and was deleted
  std::function<void()> on_write_dropped;  // the write queue was over its bound (or shutdown)
  std::function<void(const std::string& what)> on_disk_error;  // also logged
  // With a dir configured, once at construction: whether the disk tier works (false: the dir
  // is missing and cannot be made, read-only or not a folder, and the memory tier serves alone).
  std::function<void(bool enabled)> on_disk_tier;
};

class ResultCache {
 public:
  using Value = std::shared_ptr<const std::string>;

  // Checks the options (invalid_argument naming cache.*), makes `dir`, indexes its entries (stat
  // only), deletes leftover temp files, evicts down to max_dir_bytes, and starts the I/O thread.
  // A dir that cannot be made, is no folder or is not writable turns the disk tier off (one
  // error line naming the path and cache.dir, observer.on_disk_tier(false)); the cache serves
  // from memory.
  // `shared`: the Redis tier (cache.redis), or null; it must outlive the cache.
  explicit ResultCache(ResultCacheOptions options, ResultCacheObserver observer = {},
                       RedisResultTier* shared = nullptr);
  // Finishes the queued writes, for at most ~2 s (then drops the rest, counted, and answers the
  // lookups still waiting for a disk read with nullptr), and joins the I/O thread; one that a
  // hung file system holds for ~3 s is left behind (logged), so that shutdown never waits on it.
  ~ResultCache();
  ResultCache(const ResultCache&) = delete;
  ResultCache& operator=(const ResultCache&) = delete;

  // A memory hit (or a value still waiting for its disk write): done(value) runs inline, before
  // lookup returns. A disk index hit: the file is read and checked on the I/O thread and done
  // runs there, with the value (promoted into memory) or with nullptr when the file was missing
  // or corrupt (then it is deleted and counted). Otherwise done(nullptr) inline.
  // Then the shared tier, when there is one (on its threads): a hit there is kept in memory too;
  // while another replica holds the key's claim the lookup waits for its result, up to
  // `wait_until` (the caller's deadline; the first overload waits for nobody).
  void lookup(const CacheKey& key, std::function<void(Value)> done);
  void lookup(const CacheKey& key, std::chrono::steady_clock::time_point wait_until,
              std::function<void(Value)> done);
  // This replica computes `key` while the handle lives: with a shared tier, the other replicas'
  // lookups wait for its result. Null without a shared tier.
  using Claim = RedisResultTier::Claim;
  std::shared_ptr<Claim> claim(const CacheKey& key);
  // The value when it is in memory (touching its recency), else nullptr; never reads the disk.
  Value find_in_memory(const CacheKey& key);
  // Keeps the value in memory at once (evicting least recently used entries; a value bigger than
  // max_bytes is not kept in memory) and queues its disk write, unless the disk holds it already
  // (same key, same bytes) or it could never fit max_dir_bytes; stores it in the shared tier.
  void insert(const CacheKey& key, std::string value);
  // Removes the entry from every tier (the file goes on the I/O thread, after writes queued
  // before).
  void erase(const CacheKey& key);

  struct Stats {
    int64_t memory_bytes = 0;
    int64_t memory_entries = 0;
    int64_t disk_bytes = 0;
    int64_t disk_entries = 0;
  };
  Stats stats() const;

  // Whether the writes and deletions queued so far are done within `timeout` (tests, shutdown).
  bool wait_for_writes(std::chrono::milliseconds timeout);

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;  // shared with the I/O thread
};

}  // namespace cube3d
