#include "cube3d/server/cache/result_cache.h"

#include <spdlog/spdlog.h>
#include <time.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cube3d/core/clock.h"
#include "cube3d/core/error.h"
#include "cube3d/server/cache/byte_lru.h"
#include "cube3d/server/cache/entry_files.h"

namespace cube3d {
namespace {

// How long the destructor lets queued writes finish: a shutdown must not wait on a slow disk.
constexpr auto kShutdownWriteBudget = std::chrono::seconds(2);
// And how long it waits for the I/O thread at all: a call that a hung file system holds cannot
// be interrupted, so past this the thread is left behind and the process goes on exiting.
constexpr auto kShutdownJoinBudget = std::chrono::seconds(3);
// A full or read-only disk fails every write: one log line per interval, with a count.
constexpr auto kErrorLogInterval = std::chrono::seconds(10);
// Successive stamps differ by at least this much, so that entries touched within one clock tick
// (or on a file system with microsecond timestamps) still keep their order across a restart.
constexpr int64_t kMinStampStepNs = 1000;

int64_t realtime_ns() {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

}  // namespace

// Owned by the ResultCache and by its I/O thread: a thread that a hung file system holds past
// the shutdown's budget is left behind (detached) with the state it uses, instead of holding the
// process's exit.
class ResultCache::Impl : public std::enable_shared_from_this<ResultCache::Impl> {
 public:
  struct OnDisk {};  // the disk index keeps only each file's size and recency

  Impl(ResultCacheOptions options, ResultCacheObserver observer, RedisResultTier* shared);
  // Starts the I/O thread (after construction: it holds a reference to this).
  void start();
  // Finishes the queued writes for at most kShutdownWriteBudget and joins the I/O thread, or,
  // when a file system call holds it past kShutdownJoinBudget, leaves it behind (logged).
  void stop();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  void lookup(const CacheKey& key, SteadyClock::time_point wait_until,
              std::function<void(Value)> done);
  std::shared_ptr<Claim> claim(const CacheKey& key) {
    return shared_ ? shared_->claim(key) : nullptr;
  }
  Value find_in_memory(const CacheKey& key);
  void insert(const CacheKey& key, std::string value);
  void erase(const CacheKey& key);
  Stats stats() const;
  bool wait_for_writes(std::chrono::milliseconds timeout);

 private:
  struct Read {
    CacheKey key;
    std::function<void(Value)> done;
    SteadyClock::time_point wait_until;  // for the shared tier
  };
  struct FileOp {
    bool write;  // else a deletion (erase)
    CacheKey key;
    uint64_t seq;  // a write: which insert it writes (unwritten_), so that an erase cancels it
  };
  struct Unwritten {
    Value value;
    uint64_t seq;
  };

  bool has_disk() const { return !options_.dir.empty() && !disk_disabled_; }
  // Memory or a queued write (mutex_ held).
  Value find_held(const CacheKey& key);
  // Puts the value into the memory tier (mutex_ held); returns what was evicted for it, to be
  // released outside the lock.
  std::vector<Value> keep_in_memory(const CacheKey& key, const Value& value);
  void load_index();
  void run();
  void serve(Read& read);
  void write(const FileOp& op);
  void report_sizes(bool memory, bool disk);
  void report_evictions(const char* tier, size_t count);
  void report_corrupt();
  void report_disk_error(const std::string& what);
  static void finish(Read& read, Value value);
  // A miss of memory and disk: the shared tier's answer (kept in memory on a hit), or a miss.
  void ask_shared(Read read);
  int64_t next_stamp();

  const ResultCacheOptions options_;
  const ResultCacheObserver observer_;
  RedisResultTier* const shared_;
  // cache.dir is set but unusable (missing and cannot be made, read-only, not a folder): the
  // cache runs with its memory tier alone (set in the constructor only).
  bool disk_disabled_ = false;

  mutable std::mutex mutex_;
  std::condition_variable work_;  // to the I/O thread: a read, a file op, or stop
  std::condition_variable idle_;  // to wait_for_writes: the file ops are done
  ByteLru<Value> memory_;
  ByteLru<OnDisk> disk_;  // the files that are in place under their final names
  std::unordered_map<CacheKey, Unwritten, CacheKeyHash> unwritten_;  // queued or being written
  int64_t unwritten_bytes_ = 0;
  std::deque<Read> reads_;
  std::deque<FileOp> file_ops_;
  bool file_op_running_ = false;
  uint64_t last_seq_ = 0;
  bool stopping_ = false;
  bool io_done_ = false;
  SteadyClock::time_point stop_deadline_{};

  // Serializes on_size reports: each reads the sizes when it runs, so the last report is the
  // newest size whatever order the changes' threads get here in.
  std::mutex report_mutex_;

  // The I/O thread's alone (and the constructor's, before the thread starts).
  int64_t last_stamp_ns_ = 0;
  SteadyClock::time_point last_error_log_{};
  bool logged_an_error_ = false;
  int64_t errors_not_logged_ = 0;

  std::thread io_;  // last: it starts once everything above exists
};

ResultCache::Impl::Impl(ResultCacheOptions options, ResultCacheObserver observer,
                        RedisResultTier* shared)
    : options_(std::move(options)), observer_(std::move(observer)), shared_(shared) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  require_in_range("cache.max_bytes", options_.max_bytes, 0, kMax);
  require_in_range("cache.max_dir_bytes", options_.max_dir_bytes, 0, kMax);
  require_in_range("cache.max_pending_write_bytes", options_.max_pending_write_bytes, 0, kMax);
  if (has_disk()) {
    try {
      prepare_cache_dir(options_.dir);
    } catch (const Error& e) {
      // The disk tier is an optimisation: without it the server still serves, from memory.
      spdlog::error("result cache: {}: the disk tier is off, the memory tier serves alone",
                    e.what());
      disk_disabled_ = true;
    }
  }
  if (!options_.dir.empty() && observer_.on_disk_tier) observer_.on_disk_tier(has_disk());
  if (has_disk()) load_index();
  report_sizes(true, true);
}

void ResultCache::Impl::start() {
  if (has_disk()) io_ = std::thread([self = shared_from_this()] { self->run(); });
}

void ResultCache::Impl::stop() {
  if (!io_.joinable()) return;
  bool finished = false;
  {
    std::unique_lock lock(mutex_);
    stopping_ = true;
    stop_deadline_ = SteadyClock::now() + kShutdownWriteBudget;
    work_.notify_all();
    finished = idle_.wait_for(lock, kShutdownJoinBudget, [&] { return io_done_; });
  }
  if (finished) {
    io_.join();
    return;
  }
  spdlog::error(
      "result cache: {}: the I/O thread is still in a file system call after {} s; leaving it "
      "behind (lookups waiting on it answer a miss at their deadline)",
      options_.dir, kShutdownJoinBudget.count());
  io_.detach();
}

void ResultCache::Impl::load_index() {
  EntryScan scan = scan_entries(options_.dir);
  for (const std::string& error : scan.errors) report_disk_error(error);
  if (scan.temp_files_removed > 0) {
    spdlog::info("result cache: {}: deleted {} temporary files of unfinished writes", options_.dir,
                 scan.temp_files_removed);
  }
  for (const ScannedEntry& entry : scan.entries) {
    last_stamp_ns_ = std::max(last_stamp_ns_, entry.mtime_ns);
    if (entry.file_bytes < static_cast<int64_t>(kEntryHeaderBytes)) {
      // Visible from its size alone: no need to wait for a read to drop it.
      spdlog::warn("result cache: {}/{}: truncated ({} bytes); deleted it", options_.dir,
                   entry_relative_path(entry.key), entry.file_bytes);
      if (const std::string error = remove_entry(options_.dir, entry.key); !error.empty()) {
        report_disk_error(error);
      }
      report_corrupt();
      continue;
    }
    disk_.put(entry.key, OnDisk{}, entry.file_bytes);  // oldest first: the last is the newest
  }
  size_t evicted = 0;
  while (disk_.bytes() > options_.max_dir_bytes) {
    const CacheKey victim = disk_.pop_oldest()->key;
    if (const std::string error = remove_entry(options_.dir, victim); !error.empty()) {
      report_disk_error(error);
    }
    ++evicted;
  }
  report_evictions("disk", evicted);
  spdlog::info("result cache: {}: {} entries, {} bytes ({} evicted to fit cache.max_dir_bytes)",
               options_.dir, disk_.entries(), disk_.bytes(), evicted);
}

ResultCache::Value ResultCache::Impl::find_held(const CacheKey& key) {
  if (const Value* in_memory = memory_.touch(key)) {
    // A hot entry served from memory stays hot on disk too.
    disk_.touch(key);
    return *in_memory;
  }
  if (const auto it = unwritten_.find(key); it != unwritten_.end()) return it->second.value;
  return nullptr;
}

void ResultCache::Impl::lookup(const CacheKey& key, SteadyClock::time_point wait_until,
                               std::function<void(Value)> done) {
  Value hit;
  bool queued = false;
  {
    const std::lock_guard lock(mutex_);
    hit = find_held(key);
    if (!hit && has_disk() && !stopping_ && disk_.touch(key) != nullptr) {
      reads_.push_back({key, std::move(done), wait_until});
      queued = true;
    }
  }
  if (queued) {
    work_.notify_one();
    return;
  }
  if (!hit && shared_) return ask_shared({key, std::move(done), wait_until});
  done(std::move(hit));
}

void ResultCache::Impl::ask_shared(Read read) {
  if (!shared_) return finish(read, nullptr);
  const CacheKey key = read.key;
  shared_->lookup(key, read.wait_until,
                  [self = shared_from_this(), read = std::move(read)](Value value) mutable {
                    if (value && self->options_.max_bytes > 0) {
                      std::vector<Value> evicted;
                      {
                        const std::lock_guard lock(self->mutex_);
                        evicted = self->keep_in_memory(read.key, value);
                      }
                      self->report_evictions("memory", evicted.size());
                      evicted.clear();
                      self->report_sizes(true, false);
                    }
                    finish(read, std::move(value));
                  });
}

ResultCache::Value ResultCache::Impl::find_in_memory(const CacheKey& key) {
  const std::lock_guard lock(mutex_);
  return find_held(key);
}

std::vector<ResultCache::Value> ResultCache::Impl::keep_in_memory(const CacheKey& key,
                                                                  const Value& value) {
  std::vector<Value> evicted;
  const auto bytes = static_cast<int64_t>(value->size());
  if (bytes > options_.max_bytes) {
    // It would evict everything else and then itself.
    memory_.erase(key);
    return evicted;
  }
  memory_.put(key, value, bytes);
  while (memory_.bytes() > options_.max_bytes) evicted.push_back(memory_.pop_oldest()->value);
  return evicted;
}

void ResultCache::Impl::insert(const CacheKey& key, std::string value) {
  const auto shared = std::make_shared<const std::string>(std::move(value));
  const auto bytes = static_cast<int64_t>(shared->size());
  std::vector<Value> evicted;
  bool dropped = false;
  bool queued = false;
  {
    const std::lock_guard lock(mutex_);
    if (options_.max_bytes > 0) evicted = keep_in_memory(key, shared);
    if (has_disk()) {
      if (disk_.touch(key) != nullptr || unwritten_.count(key) != 0) {
        // On disk already, or on its way there: the same key holds the same bytes.
      } else if (bytes > options_.max_dir_bytes - static_cast<int64_t>(kEntryHeaderBytes)) {
        // Could never fit the disk tier: writing it would only evict everything else.
      } else if (bytes > options_.max_pending_write_bytes - unwritten_bytes_) {
        dropped = true;
      } else {
        unwritten_.emplace(key, Unwritten{shared, ++last_seq_});
        unwritten_bytes_ += bytes;
        file_ops_.push_back({true, key, last_seq_});
        queued = true;
      }
    }
  }
  if (queued) work_.notify_one();
  if (shared_) shared_->store(key, shared);
  report_evictions("memory", evicted.size());
  evicted.clear();
  if (options_.max_bytes > 0) report_sizes(true, false);
  if (dropped) {
    spdlog::debug(
        "result cache: write of {} dropped: {} bytes queued already "
        "(cache.max_pending_write_bytes)",
        to_hex(key), bytes);
    if (observer_.on_write_dropped) observer_.on_write_dropped();
  }
}

void ResultCache::Impl::erase(const CacheKey& key) {
  Value released;
  bool memory_changed = false;
  bool disk_changed = false;
  {
    const std::lock_guard lock(mutex_);
    if (const Value* in_memory = memory_.touch(key)) {
      released = *in_memory;
      memory_.erase(key);
      memory_changed = true;
    }
    if (const auto it = unwritten_.find(key); it != unwritten_.end()) {
      // A queued write is skipped; one being written is not indexed when it ends (write()).
      unwritten_bytes_ -= static_cast<int64_t>(it->second.value->size());
      unwritten_.erase(it);
    }
    disk_changed = disk_.erase(key);
    // Always: a write in progress may put a file in place after this; the deletion runs after it.
    if (has_disk()) file_ops_.push_back({false, key, 0});
  }
  if (has_disk()) work_.notify_one();
  if (shared_) shared_->erase(key);
  report_sizes(memory_changed, disk_changed);
}

ResultCache::Stats ResultCache::Impl::stats() const {
  const std::lock_guard lock(mutex_);
  return {memory_.bytes(), memory_.entries(), disk_.bytes(), disk_.entries()};
}

bool ResultCache::Impl::wait_for_writes(std::chrono::milliseconds timeout) {
  if (!has_disk()) return true;
  std::unique_lock lock(mutex_);
  return idle_.wait_for(lock, timeout,
                        [&] { return io_done_ || (file_ops_.empty() && !file_op_running_); });
}

void ResultCache::Impl::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    if (stopping_ && SteadyClock::now() >= stop_deadline_) break;
    // A waiting caller beats a background write.
    if (!reads_.empty()) {
      Read read = std::move(reads_.front());
      reads_.pop_front();
      lock.unlock();
      serve(read);
      lock.lock();
      continue;
    }
    if (!file_ops_.empty()) {
      const FileOp op = file_ops_.front();
      file_ops_.pop_front();
      file_op_running_ = true;
      lock.unlock();
      if (op.write) {
        write(op);
      } else if (const std::string error = remove_entry(options_.dir, op.key); !error.empty()) {
        report_disk_error(error);
      }
      lock.lock();
      file_op_running_ = false;
      if (file_ops_.empty()) idle_.notify_all();
      continue;
    }
    if (stopping_) break;
    work_.wait(lock);
  }
  // Past the shutdown budget (or done): what is left is dropped, and lookups answered a miss.
  std::deque<Read> reads;
  reads.swap(reads_);
  size_t dropped = 0;
  for (const FileOp& op : file_ops_) dropped += op.write && unwritten_.count(op.key) != 0;
  file_ops_.clear();
  unwritten_.clear();
  unwritten_bytes_ = 0;
  io_done_ = true;
  idle_.notify_all();
  lock.unlock();
  for (Read& read : reads) finish(read, nullptr);
  if (dropped > 0) {
    spdlog::warn("result cache: {}: shutdown dropped {} queued writes after {} s", options_.dir,
                 dropped, kShutdownWriteBudget.count());
    for (size_t i = 0; i < dropped && observer_.on_write_dropped; ++i) observer_.on_write_dropped();
  }
}

void ResultCache::Impl::serve(Read& read) {
  Value held;
  {
    // An earlier read of the same key, or an insert since the lookup, may have it in memory.
    const std::lock_guard lock(mutex_);
    held = find_held(read.key);
  }
  if (held) {
    finish(read, std::move(held));
    return;
  }
  EntryRead entry = read_entry(options_.dir, read.key, next_stamp());
  using Outcome = EntryRead::Outcome;
  if (entry.outcome == Outcome::kOk) {
    std::vector<Value> evicted;
    bool promoted = false;
    {
      const std::lock_guard lock(mutex_);
      // Not when it was erased since the lookup: that would bring it back.
      if (options_.max_bytes > 0 && disk_.contains(read.key)) {
        evicted = keep_in_memory(read.key, entry.payload);
        promoted = true;
      }
    }
    report_evictions("memory", evicted.size());
    evicted.clear();
    if (promoted) report_sizes(true, false);
    finish(read, std::move(entry.payload));
    return;
  }
  bool was_indexed = false;
  {
    const std::lock_guard lock(mutex_);
    was_indexed = disk_.erase(read.key);
  }
  if (entry.outcome == Outcome::kCorrupt) {
    spdlog::warn("result cache: {}; deleted it (the result is recomputed)", entry.detail);
    if (const std::string error = remove_entry(options_.dir, read.key); !error.empty()) {
      report_disk_error(error);
    }
    report_corrupt();
  } else if (entry.outcome == Outcome::kMissing) {
    // Gone although indexed: deleted behind the cache's back. Not indexed: evicted or erased
    // since the lookup, a plain miss.
    if (was_indexed) {
      spdlog::warn("result cache: {} (an indexed entry disappeared)", entry.detail);
      report_corrupt();
    }
  } else {
    report_disk_error(entry.detail);
  }
  report_sizes(false, was_indexed);
  ask_shared(std::move(read));
}

void ResultCache::Impl::write(const FileOp& op) {
  Value value;
  {
    const std::lock_guard lock(mutex_);
    const auto it = unwritten_.find(op.key);
    if (it == unwritten_.end() || it->second.seq != op.seq) return;  // erased since
    value = it->second.value;
  }
  const EntryWrite result = write_entry(options_.dir, op.key, *value, next_stamp());
  std::vector<CacheKey> victims;
  bool indexed = false;
  {
    const std::lock_guard lock(mutex_);
    const auto it = unwritten_.find(op.key);
    // Erased while it was written: the deletion queued behind this write removes the file.
    const bool current = it != unwritten_.end() && it->second.seq == op.seq;
    if (current) {
      unwritten_bytes_ -= static_cast<int64_t>(value->size());
      unwritten_.erase(it);
    }
    if (current && result.stored) {
      disk_.put(op.key, OnDisk{}, result.file_bytes);
      indexed = true;
      // The new entry is the newest and fits on its own (insert checked), so it stays.
      while (disk_.bytes() > options_.max_dir_bytes && disk_.entries() > 1) {
        victims.push_back(disk_.pop_oldest()->key);
      }
    }
  }
  if (!result.error.empty()) report_disk_error(result.error);
  for (const CacheKey& victim : victims) {
    if (const std::string error = remove_entry(options_.dir, victim); !error.empty()) {
      report_disk_error(error);
    }
  }
  report_evictions("disk", victims.size());
  report_sizes(false, indexed);
}

void ResultCache::Impl::report_sizes(bool memory, bool disk) {
  if (!observer_.on_size || (!memory && !disk)) return;
  const std::lock_guard report(report_mutex_);
  const Stats now = stats();
  if (memory) observer_.on_size("memory", now.memory_bytes, now.memory_entries);
  if (disk) observer_.on_size("disk", now.disk_bytes, now.disk_entries);
}

void ResultCache::Impl::report_evictions(const char* tier, size_t count) {
  if (!observer_.on_eviction) return;
  for (size_t i = 0; i < count; ++i) observer_.on_eviction(tier);
}

void ResultCache::Impl::report_corrupt() {
  if (observer_.on_corrupt) observer_.on_corrupt();
}

void ResultCache::Impl::report_disk_error(const std::string& what) {
  const SteadyClock::time_point now = SteadyClock::now();
  if (!logged_an_error_ || now - last_error_log_ >= kErrorLogInterval) {
    if (errors_not_logged_ > 0) {
      spdlog::error("result cache: {} (and {} more disk errors since the last one logged)", what,
                    errors_not_logged_);
    } else {
      spdlog::error("result cache: {}", what);
    }
    logged_an_error_ = true;
    last_error_log_ = now;
    errors_not_logged_ = 0;
  } else {
    ++errors_not_logged_;
  }
  if (observer_.on_disk_error) observer_.on_disk_error(what);
}

void ResultCache::Impl::finish(Read& read, Value value) {
  // The I/O thread must outlive a caller's bug.
  try {
    read.done(std::move(value));
  } catch (const std::exception& e) {
    spdlog::error("result cache: a lookup's callback threw: {}", e.what());
  } catch (...) {
    spdlog::error("result cache: a lookup's callback threw");
  }
}

int64_t ResultCache::Impl::next_stamp() {
  last_stamp_ns_ = std::max(realtime_ns(), last_stamp_ns_ + kMinStampStepNs);
  return last_stamp_ns_;
}

ResultCache::ResultCache(ResultCacheOptions options, ResultCacheObserver observer,
                         RedisResultTier* shared)
    : impl_(std::make_shared<Impl>(std::move(options), std::move(observer), shared)) {
  impl_->start();
}

ResultCache::~ResultCache() { impl_->stop(); }

void ResultCache::lookup(const CacheKey& key, std::function<void(Value)> done) {
  impl_->lookup(key, SteadyClock::time_point::min(), std::move(done));
}

void ResultCache::lookup(const CacheKey& key, SteadyClock::time_point wait_until,
                         std::function<void(Value)> done) {
  impl_->lookup(key, wait_until, std::move(done));
}

std::shared_ptr<ResultCache::Claim> ResultCache::claim(const CacheKey& key) {
  return impl_->claim(key);
}

ResultCache::Value ResultCache::find_in_memory(const CacheKey& key) {
  return impl_->find_in_memory(key);
}

void ResultCache::insert(const CacheKey& key, std::string value) {
  impl_->insert(key, std::move(value));
}

void ResultCache::erase(const CacheKey& key) { impl_->erase(key); }

ResultCache::Stats ResultCache::stats() const { return impl_->stats(); }

bool ResultCache::wait_for_writes(std::chrono::milliseconds timeout) {
  return impl_->wait_for_writes(timeout);
}

}  // namespace cube3d
