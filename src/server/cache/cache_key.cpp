#include "cube3d/server/cache/cache_key.h"

#include "cube3d/core/sha256.h"

namespace cube3d {
namespace {

int lower_hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

std::string to_hex(const CacheKey& key) { return hex_of(key); }

std::optional<CacheKey> cache_key_from_hex(std::string_view hex) {
  CacheKey key{};
  if (hex.size() != 2 * key.size()) return std::nullopt;
  for (size_t i = 0; i < key.size(); ++i) {
    const int hi = lower_hex_digit(hex[2 * i]);
    const int lo = lower_hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    key[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return key;
}

}  // namespace cube3d
