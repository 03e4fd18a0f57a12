// The result cache's building blocks: the byte-bounded LRU and the entry file's names and header.
#include <gtest/gtest.h>

#include <cctype>
#include <string>

#include "cube3d/server/cache/byte_lru.h"
#include "cube3d/server/cache/cache_key.h"
#include "cube3d/server/cache/entry_files.h"

namespace cube3d {
namespace test_entry_files {

CacheKey key_of(int n) { return entry_sha256("key " + std::to_string(n)); }

TEST(ResultCacheLru, EvictsLeastRecentlyUsedFirst) {
  ByteLru<int> lru;
  lru.put(key_of(1), 1, 10);
  lru.put(key_of(2), 2, 20);
  lru.put(key_of(3), 3, 30);
  EXPECT_EQ(lru.bytes(), 60);
  EXPECT_EQ(lru.entries(), 3);
  ASSERT_NE(lru.touch(key_of(1)), nullptr);  // 1 is now the newest: 2 goes first
  EXPECT_EQ(lru.pop_oldest()->value, 2);
  EXPECT_EQ(lru.pop_oldest()->value, 3);
  EXPECT_EQ(lru.pop_oldest()->value, 1);
  EXPECT_FALSE(lru.pop_oldest());
  EXPECT_EQ(lru.bytes(), 0);
}

TEST(ResultCacheLru, ReplacingAndErasingKeepTheBytesRight) {
  ByteLru<int> lru;
  lru.put(key_of(1), 1, 10);
  lru.put(key_of(1), 11, 15);
  EXPECT_EQ(lru.bytes(), 15);
  EXPECT_EQ(lru.entries(), 1);
  EXPECT_EQ(*lru.touch(key_of(1)), 11);
  EXPECT_TRUE(lru.erase(key_of(1)));
  EXPECT_FALSE(lru.erase(key_of(1)));
  EXPECT_EQ(lru.touch(key_of(1)), nullptr);
  EXPECT_EQ(lru.bytes(), 0);
}

TEST(ResultCacheEntryFiles, KeysSpellAsLowercaseHex) {
  const CacheKey key = key_of(7);
  const std::string hex = to_hex(key);
  EXPECT_EQ(hex.size(), 64u);
  EXPECT_EQ(cache_key_from_hex(hex), key);
  std::string upper = hex;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (upper != hex) {
    EXPECT_FALSE(cache_key_from_hex(upper));
  }
  EXPECT_FALSE(cache_key_from_hex(hex.substr(1)));
  EXPECT_FALSE(cache_key_from_hex(hex.substr(1) + "g"));
}

TEST(ResultCacheEntryFiles, OnlyOurNamesInTheirFoldersAreOurs) {
  const CacheKey key = key_of(1);
  const std::string hex = to_hex(key);
  const std::string folder = hex.substr(0, 2);
  EXPECT_EQ(entry_relative_path(key), folder + "/" + hex + ".entry");
  EXPECT_EQ(entry_file_key(folder, hex + ".entry"), key);
  EXPECT_FALSE(entry_file_key(folder == "00" ? "01" : "00", hex + ".entry"));  // wrong folder
  EXPECT_FALSE(entry_file_key(folder, hex + ".entr"));
  EXPECT_FALSE(entry_file_key(folder, "notes.entry"));
  EXPECT_TRUE(is_entry_temp_name(folder, hex + ".entry.tmp-aB3xY9"));
  EXPECT_FALSE(is_entry_temp_name(folder, hex + ".entry.tmp-aB3xY"));
  EXPECT_FALSE(is_entry_temp_name(folder, hex + ".entry.tmp-aB3xY9z"));
  EXPECT_FALSE(is_entry_temp_name(folder, hex + ".entry.tmp-aB3x.9"));
  EXPECT_FALSE(is_entry_temp_name(folder, hex + ".entry"));
  EXPECT_FALSE(is_entry_temp_name(folder, "x.tmp-aB3xY9"));
}

TEST(ResultCacheEntryFiles, HeaderHoldsWhatItWasMadeFor) {
  const CacheKey key = key_of(1);
  const std::string payload = "a serialized answer";
  const std::string header = encode_entry_header(key, payload);
  ASSERT_EQ(header.size(), kEntryHeaderBytes);
  EXPECT_EQ(header.substr(0, 8), kEntryMagic);
  const EntryHeaderCheck check = check_entry_header(header, key, payload.size());
  EXPECT_EQ(check.problem, "");
  EXPECT_EQ(check.payload_sha256, entry_sha256(payload));
}

TEST(ResultCacheEntryFiles, HeaderChecksNameTheProblem) {
  const CacheKey key = key_of(1);
  const std::string payload = "payload";
  const std::string header = encode_entry_header(key, payload);
  const auto problem = [&](const std::string& h, const CacheKey& k, uint64_t n) {
    return check_entry_header(h, k, n).problem;
  };
  EXPECT_NE(problem(header, key_of(2), payload.size()).find("key"), std::string::npos);
  EXPECT_NE(problem(header, key, payload.size() - 1).find("payload bytes"), std::string::npos);
  std::string bad_magic = header;
  bad_magic[0] ^= 1;
  EXPECT_NE(problem(bad_magic, key, payload.size()).find("magic"), std::string::npos);
  std::string bad_version = header;
  bad_version[8] = 9;
  EXPECT_NE(problem(bad_version, key, payload.size()).find("version 9"), std::string::npos);
  EXPECT_NE(problem(header.substr(1), key, payload.size()).find("header"), std::string::npos);
}

}  // namespace test_entry_files
}  // namespace cube3d
