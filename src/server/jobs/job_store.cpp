#include "cube3d/server/jobs/job_store.h"

#include <spdlog/spdlog.h>
#include <sys/random.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <limits>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cube3d/api/grpc_status.h"
#include "cube3d/core/error.h"
#include "cube3d/core/printable.h"
#include "cube3d/server/core/timer_queue.h"

namespace cube3d {
namespace {

using JobClock = TimerQueue::Clock;
using Response = v1::GenerateMeshResponse;

constexpr size_t kIdDigits = 40;
constexpr size_t kTagDigits = 8;
constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();

// getrandom(2), the kernel's CSPRNG: an id must not be guessable from others, since on a server
// without API keys (every owner "") the id is all that keeps one client from another's job.
void random_bytes(uint8_t* out, size_t size) {
  while (size > 0) {
    const ssize_t got = ::getrandom(out, size, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw internal_error(std::string("getrandom failed: ") + std::strerror(errno));
    }
    out += got;
    size -= static_cast<size_t>(got);
  }
}

std::string random_hex(size_t bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::vector<uint8_t> raw(bytes);
  random_bytes(raw.data(), raw.size());
  std::string hex;
  hex.reserve(2 * bytes);
  for (const uint8_t byte : raw) {
    hex += kDigits[byte >> 4];
    hex += kDigits[byte & 0xf];
  }
  return hex;
}

bool valid_id(const std::string& id) {
  return id.size() == kIdDigits && std::all_of(id.begin(), id.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

grpc::Status invalid_id(const std::string& id) {
  return {grpc::StatusCode::INVALID_ARGUMENT,
          "id: job id must be 40 hex digits (lowercase), got \"" + printable(id, 48) + "\""};
}

grpc::Status shutting_down() {
  return {grpc::StatusCode::UNAVAILABLE, "the server is shutting down"};
}

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string utc_text(int64_t unix_ms) {
  const time_t seconds = static_cast<time_t>(unix_ms / 1000);
  tm fields{};
  gmtime_r(&seconds, &fields);
  char text[32];
  const size_t length = strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &fields);
  return std::string(text, length);
}

std::string duration_text(int64_t ms) {
  return ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms";
}

bool is_open(v1::JobState state) {
  return state == v1::JOB_STATE_QUEUED || state == v1::JOB_STATE_RUNNING;
}

// A job as answered, copied under the lock. The result is shared, not copied: the MeshJob (and
// its copy of a result that may be tens of MB) is built after the lock is released.
struct JobView {
  std::string id;
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  v1::Progress progress;
  uint32_t poll_after_ms = 0;
  std::shared_ptr<const Response> result;
  std::optional<v1::JobError> error;
  std::string request_id;
  int64_t created_unix_ms = 0;
  int64_t finished_unix_ms = 0;
  int64_t expires_unix_ms = 0;
};
using Reply = std::variant<JobView, grpc::Status>;

JobStore::Answer to_answer(Reply reply) {
  if (auto* status = std::get_if<grpc::Status>(&reply)) return std::move(*status);
  JobView& view = std::get<JobView>(reply);
  v1::MeshJob job;
  job.set_id(std::move(view.id));
  job.set_state(view.state);
  *job.mutable_progress() = std::move(view.progress);
  job.set_poll_after_ms(view.poll_after_ms);
  if (view.result) *job.mutable_result() = *view.result;
  if (view.error) *job.mutable_error() = std::move(*view.error);
  job.set_request_id(std::move(view.request_id));
  job.set_created_unix_ms(view.created_unix_ms);
  job.set_finished_unix_ms(view.finished_unix_ms);
  job.set_expires_unix_ms(view.expires_unix_ms);
  return job;
}

// A callback of the caller's must not take the store down with it (nor leave a timer action's
// busy count raised, which the destructor waits on).
template <typename Fn, typename... Args>
void call_guarded(const char* what, Fn& fn, Args&&... args) {
  try {
    fn(std::forward<Args>(args)...);
  } catch (const std::exception& e) {
    spdlog::error("job store: {} threw: {}", what, e.what());
  } catch (...) {
    spdlog::error("job store: {} threw a non-standard exception", what);
  }
}

}  // namespace

class JobStore::State : public std::enable_shared_from_this<State> {
 public:
  State(JobStoreOptions options, TimerQueue& timers)
      : options_(checked(options)), timers_(timers), tag_(random_hex(kTagDigits / 2)) {}

  std::string create(const std::string& owner, const std::string& request_id);
  void set_canceller(const std::string& id, std::function<void()> cancel);
  void progress(const std::string& id, const v1::Progress& progress);
  void finish(const std::string& id, const grpc::Status& status, Response response);
  void discard(const std::string& id);
  void get(const std::string& id, const std::string& owner, std::chrono::milliseconds wait,
           std::function<void(Answer)> done);
  Answer cancel(const std::string& id, const std::string& owner);
  Counts counts() const {
    const std::lock_guard lock(mutex_);
    return counts_;
  }
  void on_counts(std::function<void(const Counts&)> observer);
  void end_long_polls();
  void close();

 private:
  struct Waiter {
    std::function<void(Answer)> done;
    TimerQueue::Timer timer;
  };
  enum class Gone { kExpired, kEvictedBytes, kEvictedJobs };
  struct Tombstone {
    std::string owner;
    Gone why = Gone::kExpired;
    int64_t finished_unix_ms = 0;
  };
  using Ids = std::list<std::string>;
  struct Record {
    std::string owner;
    std::string request_id;
    v1::JobState state = v1::JOB_STATE_QUEUED;
    v1::Progress progress;
    int64_t created_unix_ms = 0;
    int64_t finished_unix_ms = 0;            // once ended
    JobClock::time_point expires{};          // once ended
    std::shared_ptr<const Response> result;  // SUCCEEDED
    int64_t result_bytes = 0;                // SUCCEEDED: counted in counts_.result_bytes
    std::optional<v1::JobError> error;       // FAILED, CANCELLED
    std::function<void()> canceller;         // open
    bool cancel_requested = false;           // open: cancel() came (maybe before the canceller)
    std::map<uint64_t, Waiter> waiters;      // open: long-polls
    Ids::iterator by_finish;                 // once ended: its place in finished_
    std::optional<Ids::iterator> by_use;     // SUCCEEDED with result bytes: its place in lru_
  };
  using Records = std::unordered_map<std::string, Record>;

  // What an operation leaves for after the lock: callbacks to run, and things whose destruction
  // may be slow (a large result) or may run code of the caller's (a canceller's captures).
  struct Outbox {
    std::vector<TimerQueue::Timer> timers;
    std::vector<std::pair<std::function<void(Answer)>, Reply>> replies;
    std::vector<std::shared_ptr<const Response>> results;
    std::vector<std::function<void()>> cancellers;
    bool counts_changed = false;
  };

  static const JobStoreOptions& checked(const JobStoreOptions& options);

  // The owner's record of `id`, or null (unknown, another owner's, or past its TTL: an expired
  // record is dropped here, so that a lookup says "expired" even before the sweep runs).
  Record* lookup(const std::string& id, const std::string& owner, JobClock::time_point now,
                 Outbox& out);
  grpc::Status not_found(const std::string& id, const std::string& owner) const;
  JobView view(const std::string& id, const Record& record) const;
  void touch(Record& record);  // fetched: most recently used
  int64_t& count_of(v1::JobState state);
  // Unlinks a record from every index and the counts; answers its long-polls, if any, as the
  // id then reads (not found).
  void remove(Records::iterator it, Outbox& out);
  void drop(const std::string& id, Gone why, Outbox& out);  // remove() with a tombstone
  void expire_due(JobClock::time_point now, Outbox& out);
  void evict_for_bytes(Outbox& out);
  void arm_sweep();
  void sweep();
  void wait_timed_out(const std::string& id, uint64_t waiter);
  void done_busy();
  void flush(Outbox& out);
  void notify();

  const JobStoreOptions options_;
  TimerQueue& timers_;
  const std::string tag_;  // this run's: the first 8 digits of each id

  mutable std::mutex mutex_;
  std::condition_variable idle_;  // busy_ fell to 0
  bool closed_ = false;
  bool no_waiting_ = false;  // end_long_polls(): every get answers at once
  int busy_ = 0;  // timer actions past their start, delivering answers: close() waits for them
  Records records_;
  std::unordered_map<std::string, int64_t> open_by_owner_;
  // Ended jobs, oldest finished first. The TTL is the same for all, so this is also the order in
  // which they expire: the sweep needs one timer, for the front.
  Ids finished_;
  Ids lru_;  // SUCCEEDED jobs holding result bytes, least recently finished or fetched first
  std::unordered_map<std::string, Tombstone> tombstones_;
  std::deque<std::string> tombstone_order_;  // oldest first
  Counts counts_;
  uint64_t next_waiter_ = 0;
  TimerQueue::Timer sweep_;  // armed while a timer is due to sweep
  JobClock::time_point sweep_due_{};

  // Serializes observer calls, each of which reads the counts afresh: calls from two threads
  // cannot then leave a gauge at the older of two values.
  std::mutex observer_mutex_;
  std::function<void(const Counts&)> observer_;
};

const JobStoreOptions& JobStore::State::checked(const JobStoreOptions& options) {
  constexpr int64_t kYearMs = int64_t{366} * 24 * 3600 * 1000;
  require_in_range("jobs.result_ttl_ms", options.result_ttl_ms, 0, kYearMs);
  require_in_range("jobs.max_result_bytes", options.max_result_bytes, 0, kMaxInt);
  require_in_range("jobs.max_jobs_per_key", options.max_jobs_per_key, 1, kMaxInt);
  require_in_range("jobs.max_jobs", options.max_jobs, 1, kMaxInt);
  require_in_range("jobs.max_wait_ms", options.max_wait_ms, 0, kYearMs);
  require_in_range("jobs.poll_after_ms", options.poll_after_ms, 0,
                   std::numeric_limits<uint32_t>::max());
  require_in_range("jobs.max_tombstones", options.max_tombstones, 0, kMaxInt);
  return options;
}

std::string JobStore::State::create(const std::string& owner, const std::string& request_id) {
  // Drawn before the lock: a system call has no business under it.
  std::string id = tag_ + random_hex((kIdDigits - kTagDigits) / 2);
  Outbox out;
  std::optional<Error> refusal;
  {
    const std::lock_guard lock(mutex_);
    if (closed_) throw unavailable("the server is shutting down");
    expire_due(JobClock::now(), out);
    if (const auto open = open_by_owner_.find(owner);
        open != open_by_owner_.end() && open->second >= options_.max_jobs_per_key) {
      refusal = resource_exhausted(
          "jobs.max_jobs_per_key: " +
          (owner.empty() ? std::string("the server") : "key \"" + printable(owner) + "\"") +
          " already has " + std::to_string(open->second) +
          " queued or running jobs; wait for one to end, or cancel one");
    }
    // Finished jobs make room, oldest first; open ones are work in progress and stay.
    while (!refusal && static_cast<int64_t>(records_.size()) >= options_.max_jobs) {
      if (finished_.empty()) {
        refusal = resource_exhausted("jobs.max_jobs: the server holds " +
                                     std::to_string(records_.size()) +
                                     " jobs, all queued or running; retry later");
      } else {
        drop(finished_.front(), Gone::kEvictedJobs, out);
      }
    }
    if (!refusal) {
      // 128 random bits do not collide in practice; the check costs nothing.
      while (records_.count(id) != 0) id = tag_ + random_hex((kIdDigits - kTagDigits) / 2);
      Record& record = records_[id];
      record.owner = owner;
      record.request_id = request_id;
      record.progress.set_stage(v1::STAGE_QUEUED);
      record.created_unix_ms = unix_ms_now();
      ++open_by_owner_[owner];
      ++counts_.queued;
      out.counts_changed = true;
    }
  }
  flush(out);
  if (refusal) throw *refusal;
  return id;
}

void JobStore::State::set_canceller(const std::string& id, std::function<void()> cancel) {
  std::function<void()> replaced;  // destroyed after the lock (declared before it)
  bool run_now = false;
  {
    const std::lock_guard lock(mutex_);
    const auto it = records_.find(id);
    if (!closed_ && it != records_.end() && is_open(it->second.state)) {
      if (it->second.cancel_requested) {
        run_now = true;
      } else {
        replaced = std::exchange(it->second.canceller, std::move(cancel));
      }
    }
  }
  // cancel() came before the canceller (the submit was still under way): run it now.
  if (run_now && cancel) call_guarded("canceller", cancel);
}

void JobStore::State::progress(const std::string& id, const v1::Progress& progress) {
  bool changed = false;
  {
    const std::lock_guard lock(mutex_);
    const auto it = records_.find(id);
    if (closed_ || it == records_.end() || !is_open(it->second.state)) return;
    Record& record = it->second;
    record.progress = progress;
    if (record.state == v1::JOB_STATE_QUEUED && progress.stage() > v1::STAGE_QUEUED) {
      record.state = v1::JOB_STATE_RUNNING;
      --counts_.queued;
      ++counts_.running;
      changed = true;
    }
  }
  if (changed) notify();
}

void JobStore::State::finish(const std::string& id, const grpc::Status& status, Response response) {
  Outbox out;
  {
    const std::lock_guard lock(mutex_);
    const auto it = records_.find(id);
    if (closed_ || it == records_.end() || !is_open(it->second.state)) return;
    Record& record = it->second;
    const std::string owner = record.owner;
    const auto now = JobClock::now();  // under the lock: finished_ stays in expiry order

    --count_of(record.state);
    if (const auto open = open_by_owner_.find(owner); --open->second == 0) {
      open_by_owner_.erase(open);
    }
    if (status.ok()) {
      record.state = v1::JOB_STATE_SUCCEEDED;
      record.result_bytes = static_cast<int64_t>(response.ByteSizeLong());
      record.result = std::make_shared<const Response>(std::move(response));
      counts_.result_bytes += record.result_bytes;
    } else {
      record.state = status.error_code() == grpc::StatusCode::CANCELLED ? v1::JOB_STATE_CANCELLED
                                                                        : v1::JOB_STATE_FAILED;
      v1::JobError& error = record.error.emplace();
      error.set_code(static_cast<int32_t>(status.error_code()));
      error.set_status(grpc_code_name(status.error_code()));
      error.set_message(status.error_message());
    }
    ++count_of(record.state);
    record.finished_unix_ms = unix_ms_now();
    record.expires = now + std::chrono::milliseconds(options_.result_ttl_ms);
    record.by_finish = finished_.insert(finished_.end(), id);
    if (record.canceller) out.cancellers.push_back(std::exchange(record.canceller, nullptr));
    std::map<uint64_t, Waiter> waiters = std::exchange(record.waiters, {});

    if (record.result_bytes > options_.max_result_bytes) {
      // A result bigger than max_result_bytes on its own could never be held, however much else
      // were evicted: it is evicted at once, and the job, its waiting long-polls included,
      // answers NOT_FOUND "evicted" like any evicted job. Evicting the others first would only
      // lose their results as well.
      drop(id, Gone::kEvictedBytes, out);
    } else if (record.result_bytes > 0) {
      record.by_use = lru_.insert(lru_.end(), id);
      evict_for_bytes(out);  // the newest fits, so this stops before it
    }

    const auto kept = records_.find(id);
    const Reply reply =
        kept != records_.end() ? Reply(view(id, kept->second)) : Reply(not_found(id, owner));
    for (auto& [seq, waiter] : waiters) {
      out.timers.push_back(std::move(waiter.timer));
      out.replies.emplace_back(std::move(waiter.done), reply);
    }
    arm_sweep();
    out.counts_changed = true;
  }
  flush(out);
}

void JobStore::State::discard(const std::string& id) {
  Outbox out;
  {
    const std::lock_guard lock(mutex_);
    const auto it = records_.find(id);
    if (closed_ || it == records_.end()) return;
    remove(it, out);  // no tombstone: as if it had never been made
  }
  flush(out);
}

void JobStore::State::get(const std::string& id, const std::string& owner,
                          std::chrono::milliseconds wait, std::function<void(Answer)> done) {
  if (!valid_id(id)) {
    call_guarded("get's done", done, Answer(invalid_id(id)));
    return;
  }
  Outbox out;
  std::optional<Reply> reply;
  {
    const std::lock_guard lock(mutex_);
    Record* const record = closed_ ? nullptr : lookup(id, owner, JobClock::now(), out);
    const int64_t wait_ms = std::min<int64_t>(wait.count(), options_.max_wait_ms);
    if (closed_) {
      reply = shutting_down();
    } else if (record == nullptr) {
      reply = not_found(id, owner);
    } else if (!is_open(record->state) || wait_ms <= 0 || no_waiting_) {
      touch(*record);
      reply = view(id, *record);
    } else {
      const uint64_t seq = next_waiter_++;
      Waiter& waiter = record->waiters[seq];
      waiter.done = std::move(done);
      // Scheduled under the lock, so the action (which takes it) finds the waiter in place; the
      // queue never calls into the store while holding its own lock, so the order is safe.
      waiter.timer = timers_.schedule_after(std::chrono::milliseconds(wait_ms),
                                            [weak = weak_from_this(), id, seq] {
                                              if (const auto state = weak.lock())
                                                state->wait_timed_out(id, seq);
                                            });
    }
  }
  flush(out);
  if (reply) call_guarded("get's done", done, to_answer(std::move(*reply)));
}

JobStore::Answer JobStore::State::cancel(const std::string& id, const std::string& owner) {
  if (!valid_id(id)) return invalid_id(id);
  std::function<void()> canceller;
  {
    Outbox out;
    std::optional<Reply> reply;
    {
      const std::lock_guard lock(mutex_);
      Record* const record = closed_ ? nullptr : lookup(id, owner, JobClock::now(), out);
      if (closed_) {
        reply = shutting_down();
      } else if (record == nullptr) {
        reply = not_found(id, owner);
      } else if (!is_open(record->state)) {
        touch(*record);
        reply = view(id, *record);
      } else {
        // Taken, so that it runs once however many cancels come; a canceller set later runs
        // at once (set_canceller).
        record->cancel_requested = true;
        canceller = std::exchange(record->canceller, nullptr);
      }
    }
    flush(out);
    if (reply) return to_answer(std::move(*reply));
  }
  // Without the lock: the canceller may end the job synchronously, calling finish().
  if (canceller) call_guarded("canceller", canceller);
  canceller = nullptr;

  Outbox out;
  Reply reply;
  {
    const std::lock_guard lock(mutex_);
    Record* const record = closed_ ? nullptr : lookup(id, owner, JobClock::now(), out);
    if (closed_) {
      reply = shutting_down();
    } else if (record == nullptr) {
      reply = not_found(id, owner);
    } else {
      touch(*record);
      reply = view(id, *record);
    }
  }
  flush(out);
  return to_answer(std::move(reply));
}

void JobStore::State::on_counts(std::function<void(const Counts&)> observer) {
  std::function<void(const Counts&)> replaced;  // destroyed after the lock
  {
    const std::lock_guard lock(observer_mutex_);
    replaced = std::exchange(observer_, std::move(observer));
  }
  notify();  // a gauge starts at the present counts
}

void JobStore::State::end_long_polls() {
  Outbox out;
  {
    const std::lock_guard lock(mutex_);
    no_waiting_ = true;
    for (auto& [id, record] : records_) {
      if (record.waiters.empty()) continue;
      const Reply reply = view(id, record);
      for (auto& [seq, waiter] : std::exchange(record.waiters, {})) {
        out.timers.push_back(std::move(waiter.timer));
        out.replies.emplace_back(std::move(waiter.done), reply);
      }
    }
  }
  flush(out);
}

void JobStore::State::close() {
  Records records;  // destroyed last, after the lock
  TimerQueue::Timer sweep;
  {
    const std::lock_guard lock(mutex_);
    closed_ = true;
    records.swap(records_);
    sweep = std::move(sweep_);
    open_by_owner_.clear();
    finished_.clear();
    lru_.clear();
    tombstones_.clear();
    tombstone_order_.clear();
  }
  sweep.cancel();
  // Timer actions that start from now on find the store closed and do nothing: only the
  // records' long-polls are left to answer, and nothing else reaches them now.
  for (auto& [id, record] : records) {
    for (auto& [seq, waiter] : record.waiters) {
      waiter.timer.cancel();
      call_guarded("get's done", waiter.done, Answer(shutting_down()));
    }
  }
  {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [this] { return busy_ == 0; });
  }
  const std::lock_guard lock(observer_mutex_);
  observer_ = nullptr;
}

JobStore::State::Record* JobStore::State::lookup(const std::string& id, const std::string& owner,
                                                 JobClock::time_point now, Outbox& out) {
  const auto it = records_.find(id);
  if (it == records_.end() || it->second.owner != owner) return nullptr;
  if (!is_open(it->second.state) && it->second.expires <= now) {
    drop(id, Gone::kExpired, out);
    return nullptr;
  }
  return &it->second;
}

grpc::Status JobStore::State::not_found(const std::string& id, const std::string& owner) const {
  // Another owner's job reads exactly as an id that never existed: the answer must not tell
  // whether someone else has a job by that id.
  if (const auto it = tombstones_.find(id); it != tombstones_.end() && it->second.owner == owner) {
    const Tombstone& tombstone = it->second;
    std::string message =
        "job " + id + " ended at " + utc_text(tombstone.finished_unix_ms) + " and its ";
    switch (tombstone.why) {
      case Gone::kExpired:
        message += "result expired after jobs.result_ttl_s (" +
                   duration_text(options_.result_ttl_ms) + ")";
        break;
      case Gone::kEvictedBytes:
        message += "result was evicted to keep finished jobs within jobs.max_result_bytes";
        break;
      case Gone::kEvictedJobs:
        message += "record was evicted to keep the server within jobs.max_jobs";
        break;
    }
    return {grpc::StatusCode::NOT_FOUND, message + "; submit it again"};
  }
  if (id.compare(0, kTagDigits, tag_) != 0) {
    return {grpc::StatusCode::NOT_FOUND,
            "job " + id +
                " was not submitted to this server run: jobs do not survive a restart, and each "
                "replica keeps its own; submit it again"};
  }
  return {grpc::StatusCode::NOT_FOUND, "no job " + id};
}

JobView JobStore::State::view(const std::string& id, const Record& record) const {
  JobView view;
  view.id = id;
  view.state = record.state;
  view.progress = record.progress;
  view.result = record.result;
  view.error = record.error;
  view.request_id = record.request_id;
  view.created_unix_ms = record.created_unix_ms;
  if (is_open(record.state)) {
    view.poll_after_ms = static_cast<uint32_t>(options_.poll_after_ms);
  } else {
    view.finished_unix_ms = record.finished_unix_ms;
    view.expires_unix_ms = record.finished_unix_ms + options_.result_ttl_ms;
  }
  return view;
}

void JobStore::State::touch(Record& record) {
  if (record.by_use) lru_.splice(lru_.end(), lru_, *record.by_use);
}

int64_t& JobStore::State::count_of(v1::JobState state) {
  switch (state) {
    case v1::JOB_STATE_QUEUED:
      return counts_.queued;
    case v1::JOB_STATE_RUNNING:
      return counts_.running;
    case v1::JOB_STATE_SUCCEEDED:
      return counts_.succeeded;
    case v1::JOB_STATE_FAILED:
      return counts_.failed;
    default:
      return counts_.cancelled;
  }
}

void JobStore::State::remove(Records::iterator it, Outbox& out) {
  const std::string id = it->first;
  Record& record = it->second;
  --count_of(record.state);
  if (is_open(record.state)) {
    if (const auto open = open_by_owner_.find(record.owner); --open->second == 0) {
      open_by_owner_.erase(open);
    }
  } else {
    finished_.erase(record.by_finish);
    if (record.by_use) lru_.erase(*record.by_use);
    counts_.result_bytes -= record.result_bytes;
  }
  const std::string owner = record.owner;
  std::map<uint64_t, Waiter> waiters = std::move(record.waiters);
  if (record.result) out.results.push_back(std::move(record.result));
  if (record.canceller) out.cancellers.push_back(std::move(record.canceller));
  records_.erase(it);
  out.counts_changed = true;
  if (!waiters.empty()) {
    const grpc::Status gone = not_found(id, owner);
    for (auto& [seq, waiter] : waiters) {
      out.timers.push_back(std::move(waiter.timer));
      out.replies.emplace_back(std::move(waiter.done), gone);
    }
  }
}

void JobStore::State::drop(const std::string& id, Gone why, Outbox& out) {
  const auto it = records_.find(id);
  if (options_.max_tombstones > 0) {
    if (static_cast<int64_t>(tombstone_order_.size()) >= options_.max_tombstones) {
      tombstones_.erase(tombstone_order_.front());
      tombstone_order_.pop_front();
    }
    tombstones_[id] = Tombstone{it->second.owner, why, it->second.finished_unix_ms};
    tombstone_order_.push_back(id);
  }
  remove(it, out);
}

void JobStore::State::expire_due(JobClock::time_point now, Outbox& out) {
  while (!finished_.empty() && records_.at(finished_.front()).expires <= now) {
    drop(finished_.front(), Gone::kExpired, out);
  }
}

void JobStore::State::evict_for_bytes(Outbox& out) {
  while (counts_.result_bytes > options_.max_result_bytes && !lru_.empty()) {
    drop(lru_.front(), Gone::kEvictedBytes, out);
  }
}

void JobStore::State::arm_sweep() {
  if (finished_.empty()) return;  // a timer still armed finds nothing and stops
  const JobClock::time_point due = records_.at(finished_.front()).expires;
  if (sweep_ && sweep_due_ <= due) return;
  sweep_due_ = due;
  sweep_ = timers_.schedule(due, [weak = weak_from_this()] {
    if (const auto state = weak.lock()) state->sweep();
  });
}

void JobStore::State::sweep() {
  Outbox out;
  {
    const std::lock_guard lock(mutex_);
    if (closed_) return;
    ++busy_;
    // This timer has run (or a newer one is replaced, harmlessly: arm_sweep() schedules for the
    // present front either way).
    sweep_ = TimerQueue::Timer();
    expire_due(JobClock::now(), out);
    arm_sweep();
  }
  flush(out);
  done_busy();
}

void JobStore::State::wait_timed_out(const std::string& id, uint64_t waiter) {
  Outbox out;
  {
    const std::lock_guard lock(mutex_);
    if (closed_) return;
    const auto it = records_.find(id);
    if (it == records_.end()) return;
    const auto found = it->second.waiters.find(waiter);
    if (found == it->second.waiters.end()) return;  // answered by finish() meanwhile
    ++busy_;
    out.timers.push_back(std::move(found->second.timer));
    out.replies.emplace_back(std::move(found->second.done), view(id, it->second));
    it->second.waiters.erase(found);
  }
  flush(out);
  done_busy();
}

void JobStore::State::done_busy() {
  {
    const std::lock_guard lock(mutex_);
    --busy_;
  }
  idle_.notify_all();
}

void JobStore::State::flush(Outbox& out) {
  // Cancelled before the answers: a timer whose waiter is answered has nothing left to do.
  for (TimerQueue::Timer& timer : out.timers) timer.cancel();
  for (auto& [done, reply] : out.replies) {
    call_guarded("get's done", done, to_answer(std::move(reply)));
    done = nullptr;  // what it captured goes now, not with the rest
  }
  out.results.clear();
  out.cancellers.clear();
  if (out.counts_changed) notify();
}

void JobStore::State::notify() {
  const std::lock_guard lock(observer_mutex_);
  if (!observer_) return;
  const Counts now = counts();
  call_guarded("counts observer", observer_, now);
}

JobStore::JobStore(JobStoreOptions options, TimerQueue& timers)
    : state_(std::make_shared<State>(std::move(options), timers)) {}

JobStore::~JobStore() { state_->close(); }

void JobStore::end_long_polls() { state_->end_long_polls(); }

std::string JobStore::create(const std::string& owner, const std::string& request_id) {
  return state_->create(owner, request_id);
}

void JobStore::set_canceller(const std::string& id, std::function<void()> cancel) {
  state_->set_canceller(id, std::move(cancel));
}

void JobStore::progress(const std::string& id, const v1::Progress& progress) {
  state_->progress(id, progress);
}

void JobStore::finish(const std::string& id, const grpc::Status& status,
                      v1::GenerateMeshResponse response) {
  state_->finish(id, status, std::move(response));
}

void JobStore::discard(const std::string& id) { state_->discard(id); }

void JobStore::get(const std::string& id, const std::string& owner, std::chrono::milliseconds wait,
                   std::function<void(Answer)> done) {
  state_->get(id, owner, wait, std::move(done));
}

JobStore::Answer JobStore::cancel(const std::string& id, const std::string& owner) {
  return state_->cancel(id, owner);
}

JobStore::Counts JobStore::counts() const { return state_->counts(); }

void JobStore::on_counts(std::function<void(const Counts&)> observer) {
  state_->on_counts(std::move(observer));
}

}  // namespace cube3d
