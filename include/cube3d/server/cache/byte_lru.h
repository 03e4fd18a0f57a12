// Least-recently-used bookkeeping bounded by bytes, for both tiers of the result cache: the
// memory tier keeps the values in it, the disk tier's index keeps only the files' sizes. Not
// thread-safe: the cache calls it under its lock. The caller decides when to evict (pop_oldest
// until bytes() fits its bound), so that it can report and delete what leaves.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <unordered_map>
#include <utility>

#include "cube3d/server/cache/cache_key.h"

namespace cube3d {

template <typename T>
class ByteLru {
 public:
  struct Entry {
    CacheKey key;
    T value;
    int64_t bytes;
  };

  // The value under `key`, made the most recent; nullptr when absent. The pointer is valid until
  // the entry is erased or replaced.
  T* touch(const CacheKey& key) {
    const auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return &it->second->value;
  }

  bool contains(const CacheKey& key) const { return index_.count(key) != 0; }

  // Stores `value` as the most recent entry, replacing any under `key`.
  void put(const CacheKey& key, T value, int64_t bytes) {
    erase(key);
    order_.push_front(Entry{key, std::move(value), bytes});
    index_.emplace(key, order_.begin());
    bytes_ += bytes;
  }

  // Whether there was an entry to erase.
  bool erase(const CacheKey& key) {
    const auto it = index_.find(key);
    if (it == index_.end()) return false;
    bytes_ -= it->second->bytes;
    order_.erase(it->second);
    index_.erase(it);
    return true;
  }

  // Removes and returns the least recently used entry; nullopt when empty.
  std::optional<Entry> pop_oldest() {
    if (order_.empty()) return std::nullopt;
    Entry oldest = std::move(order_.back());
    order_.pop_back();
    index_.erase(oldest.key);
    bytes_ -= oldest.bytes;
    return oldest;
  }

  int64_t bytes() const { return bytes_; }
  int64_t entries() const { return static_cast<int64_t>(index_.size()); }

 private:
  std::list<Entry> order_;  // most recent first
  std::unordered_map<CacheKey, typename std::list<Entry>::iterator, CacheKeyHash> index_;
  int64_t bytes_ = 0;
};

}  // namespace cube3d
