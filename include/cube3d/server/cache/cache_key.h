// The result cache's key: a SHA-256 digest of the canonical request and the model's identity
// (built by the caller), and its spelling in file names and logs.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace cube3d {

using CacheKey = std::array<uint8_t, 32>;

// 64 lowercase hex digits.
std::string to_hex(const CacheKey& key);

// The key that to_hex spelled: 64 lowercase hex digits exactly (file names are case-sensitive,
// so "AB…" names another file than "ab…"); nullopt for anything else.
std::optional<CacheKey> cache_key_from_hex(std::string_view hex);

// A digest is uniformly distributed already: its first bytes are a good hash.
struct CacheKeyHash {
  size_t operator()(const CacheKey& key) const noexcept {
    size_t hash = 0;
    std::memcpy(&hash, key.data(), sizeof hash);
    return hash;
  }
};

}  // namespace cube3d
