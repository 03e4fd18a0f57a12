// The result cache's store bounds (the `cache:` section's max_bytes, dir and max_dir_bytes):
// their own header so that the server config embeds them (config/server_config.h) without the
// cache's machinery, and the defaults live in one place.
#pragma once

#include <cstdint>
#include <string>

namespace cube3d {

struct ResultCacheOptions {
  int64_t max_bytes = int64_t{512} << 20;    // memory tier (payload bytes); 0 = no memory tier
  std::string dir;                           // empty: no disk tier
  int64_t max_dir_bytes = int64_t{4} << 30;  // disk tier bound (file bytes), LRU by last use
  // Writes queued for the I/O thread (payload bytes); an insert beyond it is not written to disk
  // (dropped, counted): a slow disk must not hold the server's memory.
  int64_t max_pending_write_bytes = int64_t{256} << 20;
  bool operator==(const ResultCacheOptions&) const = default;
};

}  // namespace cube3d
