// The result cache's store: the memory LRU, the disk tier across restarts, the checks that keep
// a corrupt entry from being served, the dir's bound, the write queue's bound, disk errors, and
// many threads at once.
#include "cube3d/server/cache/result_cache.h"

#include <dirent.h>
#include <ftw.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/server/cache/entry_files.h"
#include "eventually.h"
#include "expect_error.h"
#include "temp_dir.h"

namespace cube3d {
namespace test_result_cache {

using namespace std::chrono_literals;
using Value = ResultCache::Value;

constexpr auto kWait = 10s;
constexpr int64_t kPayload = 100;  // bytes of the payloads of most tests
constexpr int64_t kFile = kPayload + static_cast<int64_t>(kEntryHeaderBytes);

CacheKey key_of(int n) { return entry_sha256("request " + std::to_string(n)); }

// Deterministic per key, as the server's answers are.
std::string payload_of(int n, int64_t bytes = kPayload) {
  std::string out(static_cast<size_t>(bytes), '\0');
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<char>((n * 131 + i * 7) & 0xff);
  return out;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

int64_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A cache dir under /tmp that goes with everything the cache put in it (TempDir removes only
// what it made itself).
class CacheDir {
 public:
  CacheDir() : path_(temp_.path() + "/cache") {}
  ~CacheDir() {
    ::chmod(temp_.path().c_str(), 0755);
    ::chmod(path_.c_str(), 0755);
    ::nftw(
        temp_.path().c_str(),
        [](const char* path, const struct stat*, int, FTW*) { return ::remove(path); }, 16,
        FTW_DEPTH | FTW_PHYS);
  }
  CacheDir(const CacheDir&) = delete;
  CacheDir& operator=(const CacheDir&) = delete;

  const std::string& path() const { return path_; }
  const std::string& root() const { return temp_.path(); }
  std::string entry(int n) const { return path_ + "/" + entry_relative_path(key_of(n)); }
  // Writes a file below the cache dir, its folders made first.
  std::string put(const std::string& relative, const std::string& bytes) {
    std::string folder = path_;
    ::mkdir(folder.c_str(), 0755);
    for (size_t slash = relative.find('/'); slash != std::string::npos;
         slash = relative.find('/', slash + 1)) {
      folder = path_ + "/" + relative.substr(0, slash);
      ::mkdir(folder.c_str(), 0755);
    }
    write_bytes(path_ + "/" + relative, bytes);
    return path_ + "/" + relative;
  }
  // The entry files under the dir (its two levels).
  int64_t count_entries() const {
    int64_t count = 0;
    for (const std::string& folder : list(path_)) {
      for (const std::string& name : list(path_ + "/" + folder)) {
        count += name.size() > 6 && name.substr(name.size() - 6) == ".entry";
      }
    }
    return count;
  }

 private:
  static std::vector<std::string> list(const std::string& path) {
    std::vector<std::string> names;
    DIR* dir = ::opendir(path.c_str());
    if (dir == nullptr) return names;
    while (const dirent* item = ::readdir(dir)) {
      if (item->d_name[0] != '.') names.emplace_back(item->d_name);
    }
    ::closedir(dir);
    return names;
  }

  testing::TempDir temp_{"cube3d_result_cache"};
  std::string path_;
};

// What the observer heard. Callbacks come from the callers' threads and the I/O thread.
struct Heard {
  std::atomic<int> memory_evictions{0};
  std::atomic<int> disk_evictions{0};
  std::atomic<int> corrupt{0};
  std::atomic<int> dropped{0};
  std::atomic<int> disk_tier{-1};  // -1: never said (no dir)
  std::mutex mutex;
  std::vector<std::string> disk_errors;
  std::map<std::string, std::pair<int64_t, int64_t>> sizes;  // tier -> last (bytes, entries)

  ResultCacheObserver observer() {
    ResultCacheObserver o;
    o.on_size = [this](const char* tier, int64_t bytes, int64_t entries) {
      const std::lock_guard lock(mutex);
      sizes[tier] = {bytes, entries};
    };
    o.on_eviction = [this](const char* tier) {
      ++(std::string(tier) == "memory" ? memory_evictions : disk_evictions);
    };
    o.on_corrupt = [this] { ++corrupt; };
    o.on_write_dropped = [this] { ++dropped; };
    o.on_disk_error = [this](const std::string& what) {
      const std::lock_guard lock(mutex);
      disk_errors.push_back(what);
    };
    o.on_disk_tier = [this](bool up) { disk_tier = up ? 1 : 0; };
    return o;
  }
  std::pair<int64_t, int64_t> size(const std::string& tier) {
    const std::lock_guard lock(mutex);
    return sizes[tier];
  }
  std::vector<std::string> errors() {
    const std::lock_guard lock(mutex);
    return disk_errors;
  }
};

ResultCacheOptions memory_only(int64_t max_bytes) {
  ResultCacheOptions options;
  options.max_bytes = max_bytes;
  return options;
}

// Disk tier; no memory tier unless asked, so that lookups go to the files.
ResultCacheOptions on_disk(const CacheDir& dir, int64_t max_bytes = 0) {
  ResultCacheOptions options;
  options.max_bytes = max_bytes;
  options.dir = dir.path();
  return options;
}

// The lookup's answer, however it comes.
Value lookup_now(ResultCache& cache, const CacheKey& key) {
  auto answer = std::make_shared<std::promise<Value>>();
  std::future<Value> future = answer->get_future();
  cache.lookup(key, [answer](Value value) { answer->set_value(std::move(value)); });
  if (future.wait_for(kWait) != std::future_status::ready) {
    ADD_FAILURE() << "no answer to the lookup";
    return nullptr;
  }
  return future.get();
}

// Inserts entry `n`, waits until its write is done (or given up) and expects a lookup to answer
// it, from whichever tier kept it.
void expect_served_after_its_write(ResultCache& cache, int n) {
  cache.insert(key_of(n), payload_of(n));
  EXPECT_TRUE(cache.wait_for_writes(kWait));
  const Value value = lookup_now(cache, key_of(n));
  ASSERT_TRUE(value);
  EXPECT_EQ(*value, payload_of(n));
}

// Keeps the I/O thread busy in a lookup's callback until released, so that a test can queue
// work behind it deterministically. Key `n` must be on disk and not in memory.
class IoThreadBlocker {
 public:
  IoThreadBlocker(ResultCache& cache, int n) {
    // The callback owns what it touches: it may still be returning from wait() when the blocker
    // is gone.
    auto entered = std::make_shared<std::promise<void>>();
    std::future<void> entered_future = entered->get_future();
    cache.lookup(key_of(n), [entered, released = released_](Value) {
      entered->set_value();
      released.wait();
    });
    EXPECT_EQ(entered_future.wait_for(kWait), std::future_status::ready);
  }
  ~IoThreadBlocker() { release(); }
  IoThreadBlocker(const IoThreadBlocker&) = delete;
  IoThreadBlocker& operator=(const IoThreadBlocker&) = delete;
  void release() {
    if (!released_now_) release_.set_value();
    released_now_ = true;
  }

 private:
  std::promise<void> release_;
  std::shared_future<void> released_ = release_.get_future().share();
  bool released_now_ = false;
};

// Adds a sink to the default logger for the lifetime of the scope (no cache may log meanwhile
// from another thread when it is made or dropped: create it before the cache, drop it after).
class CapturedLog {
 public:
  CapturedLog() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)) {
    logger_ = spdlog::default_logger();
    level_ = logger_->level();
    if (level_ > spdlog::level::warn) logger_->set_level(spdlog::level::warn);
    logger_->sinks().push_back(sink_);
  }
  ~CapturedLog() {
    auto& sinks = logger_->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
    logger_->set_level(level_);
  }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;
  std::string text() {
    logger_->flush();
    return out_.str();
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
  std::shared_ptr<spdlog::logger> logger_;
  spdlog::level::level_enum level_{};
};

// --- memory tier ----------------------------------------------------------------------------

TEST(ResultCache, HitRunsInline) {
  ResultCache cache(memory_only(1000));
  cache.insert(key_of(1), payload_of(1));
  bool answered = false;
  const std::thread::id caller = std::this_thread::get_id();
  cache.lookup(key_of(1), [&](Value value) {
    answered = true;
    EXPECT_EQ(std::this_thread::get_id(), caller);
    ASSERT_TRUE(value);
    EXPECT_EQ(*value, payload_of(1));
  });
  EXPECT_TRUE(answered);
  ASSERT_TRUE(cache.find_in_memory(key_of(1)));
  EXPECT_EQ(*cache.find_in_memory(key_of(1)), payload_of(1));
}

TEST(ResultCache, MissRunsInlineWithNull) {
  ResultCache cache(memory_only(1000));
  bool answered = false;
  cache.lookup(key_of(1), [&](Value value) {
    answered = true;
    EXPECT_FALSE(value);
  });
  EXPECT_TRUE(answered);
  EXPECT_FALSE(cache.find_in_memory(key_of(1)));
}

TEST(ResultCache, MemoryEvictsLeastRecentlyUsedByBytes) {
  Heard heard;
  ResultCache cache(memory_only(3 * kPayload), heard.observer());
  cache.insert(key_of(1), payload_of(1));
  cache.insert(key_of(2), payload_of(2));
  cache.insert(key_of(3), payload_of(3));
  EXPECT_EQ(heard.memory_evictions, 0);
  ASSERT_TRUE(cache.find_in_memory(key_of(1)));  // 1 is now newer than 2
  cache.insert(key_of(4), payload_of(4));
  EXPECT_EQ(heard.memory_evictions, 1);
  EXPECT_FALSE(cache.find_in_memory(key_of(2)));
  EXPECT_TRUE(cache.find_in_memory(key_of(1)));
  EXPECT_TRUE(cache.find_in_memory(key_of(3)));
  EXPECT_TRUE(cache.find_in_memory(key_of(4)));
  const ResultCache::Stats stats = cache.stats();
  EXPECT_EQ(stats.memory_bytes, 3 * kPayload);
  EXPECT_EQ(stats.memory_entries, 3);
  EXPECT_EQ(heard.size("memory"), std::make_pair(3 * kPayload, int64_t{3}));

  // A bigger value makes room for itself: two go.
  cache.insert(key_of(5), payload_of(5, 2 * kPayload));
  EXPECT_EQ(heard.memory_evictions, 3);
  EXPECT_EQ(cache.stats().memory_entries, 2);
  EXPECT_EQ(cache.stats().memory_bytes, 3 * kPayload);
}

TEST(ResultCache, OversizedValueIsNotKeptInMemory) {
  ResultCache cache(memory_only(kPayload));
  cache.insert(key_of(1), payload_of(1, kPayload / 2));
  cache.insert(key_of(2), payload_of(2, kPayload + 1));
  EXPECT_FALSE(cache.find_in_memory(key_of(2)));
  EXPECT_TRUE(cache.find_in_memory(key_of(1)));  // nothing was evicted for it
  EXPECT_EQ(cache.stats().memory_bytes, kPayload / 2);
  cache.insert(key_of(3), payload_of(3, kPayload));  // exactly the bound fits
  EXPECT_TRUE(cache.find_in_memory(key_of(3)));
}

TEST(ResultCache, NoMemoryTierKeepsNothing) {
  ResultCache cache(memory_only(0));
  cache.insert(key_of(1), payload_of(1));
  EXPECT_FALSE(cache.find_in_memory(key_of(1)));
  EXPECT_FALSE(lookup_now(cache, key_of(1)));
  EXPECT_EQ(cache.stats().memory_entries, 0);
  EXPECT_TRUE(cache.wait_for_writes(1ms));
}

TEST(ResultCache, OptionsOutOfRangeNameTheirKey) {
  ResultCacheOptions options;
  options.max_bytes = -1;
  testing::expect_error([&] { ResultCache cache(options); }, ErrorCode::kInvalidArgument,
                        "cache.max_bytes");
  options = {};
  options.max_pending_write_bytes = -1;
  testing::expect_error([&] { ResultCache cache(options); }, ErrorCode::kInvalidArgument,
                        "cache.max_pending_write_bytes");
}

// --- disk tier --------------------------------------------------------------------------------

TEST(ResultCacheDisk, EntrySurvivesARestart) {
  CacheDir dir;
  {
    ResultCache cache(on_disk(dir, 1000));
    cache.insert(key_of(1), payload_of(1));
    ASSERT_TRUE(cache.wait_for_writes(kWait));
    EXPECT_EQ(cache.stats().disk_entries, 1);
    EXPECT_EQ(cache.stats().disk_bytes, kFile);
  }
  EXPECT_EQ(file_size(dir.entry(1)), kFile);
  EXPECT_EQ(read_bytes(dir.entry(1)).substr(0, 8), kEntryMagic);

  Heard heard;
  ResultCache cache(on_disk(dir, 1000), heard.observer());
  EXPECT_EQ(heard.size("disk"), std::make_pair(kFile, int64_t{1}));  // reported at start
  EXPECT_FALSE(cache.find_in_memory(key_of(1)));
  std::promise<std::pair<Value, std::thread::id>> answer;
  cache.lookup(key_of(1), [&](Value value) {
    answer.set_value({value, std::this_thread::get_id()});
  });
  auto future = answer.get_future();
  ASSERT_EQ(future.wait_for(kWait), std::future_status::ready);
  const auto [value, thread] = future.get();
  ASSERT_TRUE(value);
  EXPECT_EQ(*value, payload_of(1));
  EXPECT_NE(thread, std::this_thread::get_id());  // read on the I/O thread
  // Promoted: the next lookup is a memory hit, inline.
  ASSERT_TRUE(cache.find_in_memory(key_of(1)));
  EXPECT_EQ(*cache.find_in_memory(key_of(1)), payload_of(1));
  EXPECT_EQ(heard.corrupt, 0);
}

TEST(ResultCacheDisk, DestructorFinishesQueuedWrites) {
  CacheDir dir;
  {
    ResultCache cache(on_disk(dir));
    for (int n = 0; n < 20; ++n) cache.insert(key_of(n), payload_of(n));
  }
  ResultCache cache(on_disk(dir));
  EXPECT_EQ(cache.stats().disk_entries, 20);
  EXPECT_EQ(dir.count_entries(), 20);
}

TEST(ResultCacheDisk, ValueTooBigForMemoryIsStillServedFromDisk) {
  CacheDir dir;
  ResultCache cache(on_disk(dir, kPayload / 2));
  expect_served_after_its_write(cache, 1);
  EXPECT_EQ(cache.stats().memory_entries, 0);
}

TEST(ResultCacheDisk, EraseRemovesBothTiers) {
  CacheDir dir;
  {
    ResultCache cache(on_disk(dir, 1000));
    cache.insert(key_of(1), payload_of(1));
    cache.insert(key_of(2), payload_of(2));
    ASSERT_TRUE(cache.wait_for_writes(kWait));
    cache.erase(key_of(1));
    EXPECT_FALSE(cache.find_in_memory(key_of(1)));
    EXPECT_FALSE(lookup_now(cache, key_of(1)));
    ASSERT_TRUE(cache.wait_for_writes(kWait));
    EXPECT_FALSE(exists(dir.entry(1)));
    EXPECT_TRUE(exists(dir.entry(2)));
    EXPECT_EQ(cache.stats().disk_entries, 1);
    // Erased before its write ran: never reaches the disk.
    cache.insert(key_of(3), payload_of(3));
    cache.erase(key_of(3));
    ASSERT_TRUE(cache.wait_for_writes(kWait));
    EXPECT_FALSE(exists(dir.entry(3)));
  }
  ResultCache cache(on_disk(dir));
  EXPECT_EQ(cache.stats().disk_entries, 1);
}

// Writes entry 1 (and 2) through a cache, then lets `damage` at the files; a fresh cache must
// detect it, delete the file, count it and answer nullptr.
void expect_detected(const std::function<void(CacheDir&)>& damage, int looked_up = 1) {
  CacheDir dir;
  {
    ResultCache cache(on_disk(dir));
    cache.insert(key_of(1), payload_of(1));
    cache.insert(key_of(2), payload_of(2));
    ASSERT_TRUE(cache.wait_for_writes(kWait));
  }
  damage(dir);
  Heard heard;
  ResultCache cache(on_disk(dir, 1000), heard.observer());
  const int64_t indexed = cache.stats().disk_entries;
  EXPECT_FALSE(lookup_now(cache, key_of(looked_up)));
  EXPECT_EQ(heard.corrupt, 1);
  EXPECT_FALSE(exists(dir.entry(looked_up)));
  EXPECT_EQ(cache.stats().disk_entries, indexed - 1);
  EXPECT_EQ(heard.size("disk").second, indexed - 1);
  EXPECT_FALSE(cache.find_in_memory(key_of(looked_up)));
  // Not indexed any more: the next lookup misses inline.
  bool answered = false;
  cache.lookup(key_of(looked_up), [&](Value value) {
    answered = true;
    EXPECT_FALSE(value);
  });
  EXPECT_TRUE(answered);
  // The other entry is unharmed.
  const int other = looked_up == 1 ? 2 : 1;
  const Value value = lookup_now(cache, key_of(other));
  ASSERT_TRUE(value);
  EXPECT_EQ(*value, payload_of(other));
}

TEST(ResultCacheDisk, CorruptPayloadByteIsDetected) {
  expect_detected([](CacheDir& dir) {
    std::string bytes = read_bytes(dir.entry(1));
    bytes.back() ^= 0x01;
    write_bytes(dir.entry(1), bytes);
  });
}

TEST(ResultCacheDisk, TruncatedFileIsDetected) {
  expect_detected([](CacheDir& dir) { ASSERT_EQ(::truncate(dir.entry(1).c_str(), kFile - 1), 0); });
}

TEST(ResultCacheDisk, FileShorterThanTheHeaderIsDroppedAtStart) {
  CacheDir dir;
  dir.put(entry_relative_path(key_of(1)), "short");
  Heard heard;
  ResultCache cache(on_disk(dir), heard.observer());
  EXPECT_EQ(heard.corrupt, 1);
  EXPECT_FALSE(exists(dir.entry(1)));
  EXPECT_EQ(cache.stats().disk_entries, 0);
}

TEST(ResultCacheDisk, WrongKeyInHeaderIsDetected) {
  // Entry 1's file under entry 3's name.
  expect_detected(
      [](CacheDir& dir) { dir.put(entry_relative_path(key_of(3)), read_bytes(dir.entry(1))); }, 3);
}

TEST(ResultCacheDisk, BadMagicIsDetected) {
  expect_detected([](CacheDir& dir) {
    std::string bytes = read_bytes(dir.entry(1));
    bytes[0] = 'X';
    write_bytes(dir.entry(1), bytes);
  });
}

// A special file or a link put in an entry's place while the server runs (after the index was
// made): the read neither follows nor waits; the entry counts as corrupt, goes, and the other
// entries are served as before.
void expect_replacement_detected(const std::function<void(const std::string& path)>& replace) {
  CacheDir dir;
  Heard heard;
  ResultCache cache(on_disk(dir), heard.observer());  // no memory tier: every hit reads the disk
  cache.insert(key_of(1), payload_of(1));
  cache.insert(key_of(2), payload_of(2));
  ASSERT_TRUE(cache.wait_for_writes(kWait));
  ASSERT_EQ(::unlink(dir.entry(1).c_str()), 0);
  replace(dir.entry(1));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(lookup_now(cache, key_of(1)));
  EXPECT_LT(std::chrono::steady_clock::now() - start, kWait);  // (lookup_now fails past it too)
  EXPECT_EQ(heard.corrupt, 1);
  struct stat st {};
  EXPECT_NE(::lstat(dir.entry(1).c_str(), &st), 0) << "the replacement was not deleted";
  EXPECT_EQ(cache.stats().disk_entries, 1);
  const Value other = lookup_now(cache, key_of(2));
  ASSERT_TRUE(other);
  EXPECT_EQ(*other, payload_of(2));
}

TEST(ResultCacheDisk, ANamedPipeInAnEntrysPlaceNeitherHangsNorIsServed) {
  expect_replacement_detected(
      [](const std::string& path) { ASSERT_EQ(::mkfifo(path.c_str(), 0644), 0); });
}

TEST(ResultCacheDisk, ALinkInAnEntrysPlaceIsNotFollowed) {
  // Even a link to a good entry of the same key: the folder is the cache's, links are not.
  CacheDir elsewhere;
  {
    ResultCache cache(on_disk(elsewhere));
    cache.insert(key_of(1), payload_of(1));
    ASSERT_TRUE(cache.wait_for_writes(kWait));
  }
  const std::string target = elsewhere.entry(1);
  expect_replacement_detected(
      [&](const std::string& path) { ASSERT_EQ(::symlink(target.c_str(), path.c_str()), 0); });
  EXPECT_TRUE(exists(target));  // what the link pointed at is untouched
}

TEST(ResultCacheDisk, FileDeletedBehindTheCachesBackIsAMiss) {
  CacheDir dir;
  Heard heard;
  ResultCache cache(on_disk(dir), heard.observer());
  cache.insert(key_of(1), payload_of(1));
  ASSERT_TRUE(cache.wait_for_writes(kWait));
  ASSERT_EQ(::unlink(dir.entry(1).c_str()), 0);
  EXPECT_FALSE(lookup_now(cache, key_of(1)));
  EXPECT_EQ(heard.corrupt, 1);
  EXPECT_EQ(cache.stats().disk_entries, 0);
}

TEST(ResultCacheDisk, DirBoundEvictsLeastRecentlyUsedIncludingAcrossARestart) {
  CacheDir dir;
  {
    Heard heard;
    ResultCacheOptions options = on_disk(dir);
    options.max_dir_bytes = 3 * kFile;
    ResultCache cache(options, heard.observer());
    for (int n = 1; n <= 3; ++n) cache.insert(key_of(n), payload_of(n));
    ASSERT_TRUE(cache.wait_for_writes(kWait));
    ASSERT_TRUE(lookup_now(cache, key_of(1)));  // 1 is now newer than 2 and 3
    cache.insert(key_of(4), payload_of(4));
    ASSERT_TRUE(cache.wait_for_writes(kWait));
    EXPECT_EQ(heard.disk_evictions, 1);
    EXPECT_FALSE(exists(dir.entry(2)));
    EXPECT_TRUE(exists(dir.entry(1)));
    EXPECT_TRUE(exists(dir.entry(3)));
    EXPECT_TRUE(exists(dir.entry(4)));
    EXPECT_EQ(cache.stats().disk_bytes, 3 * kFile);
    EXPECT_EQ(heard.size("disk"), std::make_pair(3 * kFile, int64_t{3}));
  }
  // Use order now: 3, 1, 4. A smaller bound at start drops 3, the least recently used.
  Heard heard;
  ResultCacheOptions options = on_disk(dir);
  options.max_dir_bytes = 2 * kFile;
  ResultCache cache(options, heard.observer());
  EXPECT_EQ(heard.disk_evictions, 1);
  EXPECT_FALSE(exists(dir.entry(3)));
  EXPECT_TRUE(exists(dir.entry(1)));
  EXPECT_TRUE(exists(dir.entry(4)));
  EXPECT_EQ(cache.stats().disk_entries, 2);
}

TEST(ResultCacheDisk, ValueThatCanNeverFitTheDirIsNotWritten) {
  CacheDir dir;
  ResultCacheOptions options = on_disk(dir, 1000);
  options.max_dir_bytes = kFile - 1;
  ResultCache cache(options);
  cache.insert(key_of(1), payload_of(1));
  ASSERT_TRUE(cache.wait_for_writes(kWait));
  EXPECT_EQ(cache.stats().disk_entries, 0);
  EXPECT_EQ(dir.count_entries(), 0);
  EXPECT_TRUE(cache.find_in_memory(key_of(1)));
}

TEST(ResultCacheDisk, LeftoverTempFilesAreRemovedAtStart) {
  CacheDir dir;
  const std::string hex = to_hex(key_of(1));
  const std::string temp = dir.put(hex.substr(0, 2) + "/" + hex + ".entry.tmp-Ab12Cd", "partial");
  ResultCache cache(on_disk(dir));
  EXPECT_FALSE(exists(temp));
  EXPECT_EQ(cache.stats().disk_entries, 0);
}

TEST(ResultCacheDisk, ForeignFilesAreLeftAlone) {
  CacheDir dir;
  const std::string hex = to_hex(key_of(1));
  const std::string folder = hex.substr(0, 2);
  const std::string other_folder = folder == "00" ? "01" : "00";
  std::vector<std::string> foreign = {
      dir.put("README", "mine"),
      dir.put(folder + "/notes.txt", "mine"),
      dir.put("zz/" + hex + ".entry", "mine"),                     // not a hex folder
      dir.put(other_folder + "/" + hex + ".entry", "mine"),        // not its folder
      dir.put(folder + "/" + hex + ".entry.tmp-toolong", "mine"),  // not our temp pattern
      dir.put(folder + "/" + hex + ".entry.bak", "mine"),
  };
  {
    // A bound of 0 would evict anything it took for an entry.
    ResultCacheOptions options = on_disk(dir);
    options.max_dir_bytes = 0;
    ResultCache cache(options);
    EXPECT_EQ(cache.stats().disk_entries, 0);
  }
  for (const std::string& path : foreign) EXPECT_TRUE(exists(path)) << path;
}

TEST(ResultCacheDisk, WriteQueueBoundDropsAndCounts) {
  CacheDir dir;
  Heard heard;
  ResultCacheOptions options = on_disk(dir);
  options.max_pending_write_bytes = 2 * kPayload + kPayload / 2;
  ResultCache cache(options, heard.observer());
  cache.insert(key_of(0), payload_of(0));
  ASSERT_TRUE(cache.wait_for_writes(kWait));
  {
    const IoThreadBlocker blocker(cache, 0);
    cache.insert(key_of(1), payload_of(1));
    cache.insert(key_of(2), payload_of(2));
    EXPECT_EQ(heard.dropped, 0);
    cache.insert(key_of(3), payload_of(3));  // 300 bytes queued would be over 250
    EXPECT_EQ(heard.dropped, 1);
    cache.insert(key_of(4), payload_of(4, 3 * kPayload));  // over the bound on its own
    EXPECT_EQ(heard.dropped, 2);
    // A value waiting for its write is served from memory, inline.
    bool answered = false;
    cache.lookup(key_of(1), [&](Value value) {
      answered = true;
      ASSERT_TRUE(value);
      EXPECT_EQ(*value, payload_of(1));
    });
    EXPECT_TRUE(answered);
    EXPECT_FALSE(cache.wait_for_writes(1ms));
  }
  ASSERT_TRUE(cache.wait_for_writes(kWait));
  EXPECT_TRUE(exists(dir.entry(1)));
  EXPECT_TRUE(exists(dir.entry(2)));
  EXPECT_FALSE(exists(dir.entry(3)));
  EXPECT_FALSE(exists(dir.entry(4)));
  // With the queue empty again, a write fits.
  cache.insert(key_of(3), payload_of(3));
  ASSERT_TRUE(cache.wait_for_writes(kWait));
  EXPECT_TRUE(exists(dir.entry(3)));
  EXPECT_EQ(heard.dropped, 2);
}

TEST(ResultCacheDisk, ReadsGoBeforeQueuedWrites) {
  CacheDir dir;
  ResultCache cache(on_disk(dir));
  cache.insert(key_of(0), payload_of(0));
  cache.insert(key_of(1), payload_of(1));
  ASSERT_TRUE(cache.wait_for_writes(kWait));
  std::promise<std::pair<bool, int64_t>> seen;  // at the read: entry 2 on disk? entries indexed
  {
    IoThreadBlocker blocker(cache, 0);
    cache.insert(key_of(2), payload_of(2));
    cache.insert(key_of(3), payload_of(3));
    cache.lookup(key_of(1), [&](Value value) {
      EXPECT_TRUE(value);
      seen.set_value({exists(dir.entry(2)), cache.stats().disk_entries});
    });
    blocker.release();
    auto future = seen.get_future();
    ASSERT_EQ(future.wait_for(kWait), std::future_status::ready);
    const auto [written, indexed] = future.get();
    EXPECT_FALSE(written);
    EXPECT_EQ(indexed, 2);
  }
  ASSERT_TRUE(cache.wait_for_writes(kWait));
  EXPECT_EQ(cache.stats().disk_entries, 4);
}

// --- the dir's errors -------------------------------------------------------------------------

// An unusable cache.dir turns the disk tier off, with one error line naming it, and the memory
// tier serves alone.
void expect_disk_tier_off(const ResultCacheOptions& options, const std::string& why) {
  CapturedLog log;
  Heard heard;
  {
    ResultCacheOptions with_memory = options;
    with_memory.max_bytes = 1000;
    ResultCache cache(with_memory, heard.observer());
    EXPECT_EQ(heard.disk_tier, 0);
    expect_served_after_its_write(cache, 1);
    EXPECT_EQ(cache.stats().disk_entries, 0);
  }
  const std::string text = log.text();
  EXPECT_NE(text.find("cache.dir"), std::string::npos) << text;
  EXPECT_NE(text.find(options.dir), std::string::npos) << text;
  EXPECT_NE(text.find(why), std::string::npos) << text;
  EXPECT_NE(text.find("the disk tier is off"), std::string::npos) << text;
}

TEST(ResultCacheDisk, DirThatCannotBeMadeTurnsTheDiskTierOff) {
  CacheDir dir;
  const std::string file = dir.root() + "/a-file";
  write_bytes(file, "x");
  ResultCacheOptions options;
  options.dir = file + "/cache";
  expect_disk_tier_off(options, "cannot");
  options.dir = file;
  expect_disk_tier_off(options, "not a folder");
  Heard heard;
  ResultCache working(on_disk(dir), heard.observer());
  EXPECT_EQ(heard.disk_tier, 1);
}

TEST(ResultCacheDisk, UnwritableDirTurnsTheDiskTierOff) {
  if (::geteuid() == 0) GTEST_SKIP() << "root may write anywhere";
  CacheDir dir;
  ASSERT_EQ(::mkdir(dir.path().c_str(), 0555), 0);
  expect_disk_tier_off(on_disk(dir), "not writable");
  // A dir to be made below an unwritable one.
  ResultCacheOptions options;
  options.dir = dir.path() + "/sub";
  expect_disk_tier_off(options, "cannot");
}

TEST(ResultCacheDisk, DirMadeReadOnlyAfterStartIsLoggedNotThrown) {
  if (::geteuid() == 0) GTEST_SKIP() << "root may write anywhere";
  CacheDir dir;
  CapturedLog log;
  Heard heard;
  {
    ResultCache cache(on_disk(dir, 1000), heard.observer());
    ASSERT_EQ(::chmod(dir.path().c_str(), 0555), 0);
    cache.insert(key_of(1), payload_of(1));
    ASSERT_TRUE(cache.wait_for_writes(kWait));
    EXPECT_EQ(cache.stats().disk_entries, 0);
    ASSERT_TRUE(cache.find_in_memory(key_of(1)));  // memory still serves it
  }
  ASSERT_EQ(heard.errors().size(), 1u);
  EXPECT_NE(heard.errors()[0].find(dir.path()), std::string::npos) << heard.errors()[0];
  EXPECT_NE(log.text().find(dir.path()), std::string::npos) << log.text();
}

TEST(ResultCacheDisk, WriteErrorIsLoggedNotThrown) {
  // Something that is not a folder where the entry's folder must go: fails for root as well.
  CacheDir dir;
  const std::string folder = to_hex(key_of(1)).substr(0, 2);
  const std::string blocker = dir.put(folder, "not a folder");
  CapturedLog log;
  Heard heard;
  {
    ResultCache cache(on_disk(dir, 1000), heard.observer());
    EXPECT_NO_THROW(cache.insert(key_of(1), payload_of(1)));
    ASSERT_TRUE(cache.wait_for_writes(kWait));
    EXPECT_EQ(cache.stats().disk_entries, 0);
    ASSERT_TRUE(cache.find_in_memory(key_of(1)));
    cache.insert(key_of(2), payload_of(2));  // other folders still work
    ASSERT_TRUE(cache.wait_for_writes(kWait));
    if (to_hex(key_of(2)).substr(0, 2) != folder) {
      EXPECT_EQ(cache.stats().disk_entries, 1);
    }
  }
  ASSERT_GE(heard.errors().size(), 1u);
  EXPECT_NE(heard.errors()[0].find(dir.path() + "/" + folder), std::string::npos)
      << heard.errors()[0];
  EXPECT_NE(log.text().find(dir.path() + "/" + folder), std::string::npos) << log.text();
  EXPECT_EQ(read_bytes(blocker), "not a folder");
}

// --- threads ----------------------------------------------------------------------------------

TEST(ResultCacheDisk, ManyThreadsAtOnceKeepTheTiersConsistent) {
  CacheDir dir;
  constexpr int kKeys = 12;
  constexpr int kThreads = 4;
  constexpr int kOps = 300;
  ResultCacheOptions options = on_disk(dir, 4 * kPayload);
  options.max_dir_bytes = 6 * kFile;
  Heard heard;
  ResultCache cache(options, heard.observer());
  std::atomic<int> asked{0};
  std::atomic<int> answered{0};
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 random(static_cast<uint32_t>(t));
      for (int i = 0; i < kOps; ++i) {
        const int n = static_cast<int>(random() % kKeys);
        switch (random() % 8) {
          case 0:
            cache.erase(key_of(n));
            break;
          case 1:
          case 2:
            cache.insert(key_of(n), payload_of(n));
            break;
          case 3:
            if (const Value v = cache.find_in_memory(key_of(n)); v && *v != payload_of(n)) ++wrong;
            break;
          default:
            ++asked;
            cache.lookup(key_of(n), [&, n](Value v) {
              if (v && *v != payload_of(n)) ++wrong;
              ++answered;
            });
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_TRUE(testing::eventually([&] { return answered == asked; }));
  ASSERT_TRUE(cache.wait_for_writes(kWait));
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(heard.corrupt, 0);
  EXPECT_TRUE(heard.errors().empty());
  const ResultCache::Stats stats = cache.stats();
  EXPECT_LE(stats.memory_bytes, 4 * kPayload);
  EXPECT_LE(stats.disk_bytes, 6 * kFile);
  EXPECT_EQ(stats.disk_entries, dir.count_entries());
  EXPECT_EQ(stats.disk_bytes, stats.disk_entries * kFile);
  EXPECT_EQ(heard.size("disk"), std::make_pair(stats.disk_bytes, stats.disk_entries));
  EXPECT_EQ(heard.size("memory"), std::make_pair(stats.memory_bytes, stats.memory_entries));
}

}  // namespace test_result_cache
}  // namespace cube3d
