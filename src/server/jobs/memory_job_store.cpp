#include "cube3d/server/jobs/memory_job_store.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
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

#include "cube3d/core/error.h"
#include "cube3d/core/guarded_call.h"
#include "cube3d/core/printable.h"
#include "cube3d/server/timing/action_gate.h"
#include "cube3d/server/timing/timer_queue.h"

namespace cube3d {
namespace {

using JobClock = TimerQueue::Clock;
using Response = v1::GenerateMeshResponse;

constexpr size_t kIdTagDigits = 8;  // of an id: the run's tag
constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();

Status shutting_down() { return {ErrorCode::kUnavailable, "the server is shutting down"}; }

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
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
using Reply = std::variant<JobView, Status>;

JobStore::Answer to_answer(Reply reply) {
  if (auto* status = std::get_if<Status>(&reply)) return std::move(*status);
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

}  // namespace

class MemoryJobStore::State : public std::enable_shared_from_this<State> {
 public:
  State(JobStoreOptions options, TimerQueue& timers)
      : options_(checked(options)), timers_(timers), tag_(make_job_tag()) {}

  // The new job's id, or the one `key` names already (`existing` set).
  std::string create(const std::string& owner, const std::string& request_id,
                     const std::string& key = {}, const std::string& digest = {},
                     bool* existing = nullptr);
  void set_canceller(const std::string& id, std::function<void()> cancel);
  void progress(const std::string& id, const v1::Progress& progress);
  void finish(const std::string& id, const Status& status, Response response);
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
  using Gone = JobGone;
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
    std::string idempotency_key;             // the submit's (empty: none), held while it is
    Ids::iterator by_finish;                 // once ended: its place in finished_
    Ids::iterator by_owner_finish;           // once ended: its place in its owner's finished
    std::optional<Ids::iterator> by_use;     // SUCCEEDED with result bytes: in its owner's lru
  };
  // What one owner (an API key) holds. Eviction takes from the owner that holds the most, so
  // that one key's traffic never pushes out another key's jobs while that key holds no more than
  // the others: the largest holder is over its share (max / owners) whenever the total is over
  // the maximum, and a key within its share is never the largest.
  struct Holdings {
    Ids finished;  // ended jobs, oldest finished first
    Ids lru;       // SUCCEEDED jobs holding result bytes, least recently finished or fetched first
    int64_t result_bytes = 0;
    int64_t records = 0;  // of every state
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
  Status not_found(const std::string& id, const std::string& owner) const;
  // Under the lock: the record of `id` that `owner` may read, or null with `refusal` set (the
  // server shutting down, or not found).
  Record* readable(const std::string& id, const std::string& owner, Outbox& out,
                   std::optional<Reply>& refusal);
  // Under the lock: the record as its owner reads it, now the most recently used.
  Reply fetched(const std::string& id, Record& record);
  JobView view(const std::string& id, const Record& record) const;
  void touch(Record& record);  // fetched: most recently used
  int64_t& count_of(v1::JobState state);
  // Unlinks a record from every index and the counts; answers its long-polls, if any, as the
  // id then reads (not found).
  void remove(Records::iterator it, Outbox& out);
  void drop(const std::string& id, Gone why, Outbox& out);  // remove() with a tombstone
  void expire_due(JobClock::time_point now, Outbox& out);
  void evict_for_bytes(Outbox& out);
  // The owner that holds the most (by `amount`) among those with something `evictable`; null
  // when nobody has anything evictable.
  template <typename Amount, typename Evictable>
  Holdings* largest_holder(const Amount& amount, const Evictable& evictable);
  void arm_sweep();
  void sweep();
  void wait_timed_out(const std::string& id, uint64_t waiter);
  void flush(Outbox& out);
  void notify();

  const JobStoreOptions options_;
  TimerQueue& timers_;
  const std::string tag_;  // this run's: the first 8 digits of each id

  mutable std::mutex mutex_;
  // close() against the timer actions past their start (the sweep, a long-poll's time-out),
  // which deliver answers.
  ActionGate gate_{mutex_};
  bool no_waiting_ = false;  // end_long_polls(): every get answers at once
  Records records_;
  std::unordered_map<std::string, int64_t> open_by_owner_;
  // Ended jobs, oldest finished first. The TTL is the same for all, so this is also the order in
  // which they expire: the sweep needs one timer, for the front.
  Ids finished_;
  std::map<std::string, Holdings> holdings_;  // by owner (ordered: ties go to the first name)
  std::unordered_map<std::string, Tombstone> tombstones_;
  std::deque<std::string> tombstone_order_;  // oldest first
  // Idempotency keys by owner and key: the job each names and its request's digest.
  struct KeyedJob {
    std::string id;
    std::string digest;
  };
  std::map<std::pair<std::string, std::string>, KeyedJob> idempotency_;
  Counts counts_;
  uint64_t next_waiter_ = 0;
  TimerQueue::Timer sweep_;  // armed while a timer is due to sweep
  JobClock::time_point sweep_due_{};

  // Serializes observer calls, each of which reads the counts afresh: calls from two threads
  // cannot then leave a gauge at the older of two values.
  std::mutex observer_mutex_;
  std::function<void(const Counts&)> observer_;
};

const JobStoreOptions& MemoryJobStore::State::checked(const JobStoreOptions& options) {
  validate_job_limits(options);
  require_in_range("jobs.max_tombstones", options.max_tombstones, 0, kMaxInt);
  return options;
}

std::string MemoryJobStore::State::create(const std::string& owner, const std::string& request_id,
                                          const std::string& key, const std::string& digest,
                                          bool* existing) {
  // Drawn before the lock: a system call has no business under it.
  std::string id = make_job_id(tag_);
  Outbox out;
  std::optional<Error> refusal;
  {
    const std::lock_guard lock(mutex_);
    if (gate_.closed()) throw unavailable("the server is shutting down");
    expire_due(JobClock::now(), out);
    // A retry of a submit: its job, whatever the limits say now.
    if (!key.empty()) {
      if (const auto keyed = idempotency_.find({owner, key}); keyed != idempotency_.end()) {
        if (keyed->second.digest != digest) {
          const Status conflict = idempotency_conflict(key, keyed->second.id);
          throw Error(conflict.code(), conflict.message());
        }
        if (existing) *existing = true;
        return keyed->second.id;
      }
    }
    if (const auto open = open_by_owner_.find(owner);
        open != open_by_owner_.end() && open->second >= options_.max_jobs_per_key) {
      refusal = resource_exhausted(
          "jobs.max_jobs_per_key: " +
          (owner.empty() ? std::string("the server") : "key \"" + printable(owner) + "\"") +
          " already has " + std::to_string(open->second) +
          " queued or running jobs; wait for one to end, or cancel one");
    }
    // Finished jobs make room, the oldest of the owner with the most records first; open ones
    // are work in progress and stay.
    while (!refusal && static_cast<int64_t>(records_.size()) >= options_.max_jobs) {
      Holdings* const largest =
          largest_holder([](const Holdings& h) { return h.records; },
                         [](const Holdings& h) { return !h.finished.empty(); });
      if (largest == nullptr) {
        refusal = resource_exhausted("jobs.max_jobs: the server holds " +
                                     std::to_string(records_.size()) +
                                     " jobs, all queued or running; retry later");
      } else {
        drop(largest->finished.front(), Gone::kEvictedJobs, out);
      }
    }
    if (!refusal) {
      // 128 random bits do not collide in practice; the check costs nothing.
      while (records_.count(id) != 0) id = make_job_id(tag_);
      Record& record = records_[id];
      record.owner = owner;
      record.request_id = request_id;
      if (!key.empty()) {
        record.idempotency_key = key;
        idempotency_[{owner, key}] = KeyedJob{id, digest};
      }
      record.progress.set_stage(v1::STAGE_QUEUED);
      record.created_unix_ms = unix_ms_now();
      ++holdings_[owner].records;
      ++open_by_owner_[owner];
      ++counts_.queued;
      out.counts_changed = true;
    }
  }
  flush(out);
  if (refusal) throw *refusal;
  return id;
}

void MemoryJobStore::State::set_canceller(const std::string& id, std::function<void()> cancel) {
  std::function<void()> replaced;  // destroyed after the lock (declared before it)
  bool run_now = false;
  {
    const std::lock_guard lock(mutex_);
    const auto it = records_.find(id);
    if (!gate_.closed() && it != records_.end() && is_open(it->second.state)) {
      if (it->second.cancel_requested) {
        run_now = true;
      } else {
        replaced = std::exchange(it->second.canceller, std::move(cancel));
      }
    }
  }
  // cancel() came before the canceller (the submit was still under way): run it now.
  if (run_now && cancel) guarded_call(kJobStoreLogName, "canceller", cancel);
}

void MemoryJobStore::State::progress(const std::string& id, const v1::Progress& progress) {
  bool changed = false;
  {
    const std::lock_guard lock(mutex_);
    const auto it = records_.find(id);
    if (gate_.closed() || it == records_.end() || !is_open(it->second.state)) return;
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

void MemoryJobStore::State::finish(const std::string& id, const Status& status, Response response) {
  Outbox out;
  {
    const std::lock_guard lock(mutex_);
    const auto it = records_.find(id);
    if (gate_.closed() || it == records_.end() || !is_open(it->second.state)) return;
    Record& record = it->second;
    const std::string owner = record.owner;
    const auto now = JobClock::now();  // under the lock: finished_ stays in expiry order

    --count_of(record.state);
    if (const auto open = open_by_owner_.find(owner); --open->second == 0) {
      open_by_owner_.erase(open);
    }
    if (status.ok() && !record.cancel_requested) {
      record.state = v1::JOB_STATE_SUCCEEDED;
      record.result_bytes = static_cast<int64_t>(response.ByteSizeLong());
      record.result = std::make_shared<const Response>(std::move(response));
      counts_.result_bytes += record.result_bytes;
    } else {
      // A cancel wins over the finish after it (job_store.h), as in the Redis store.
      const Status outcome = record.cancel_requested
                                 ? Status(ErrorCode::kCancelled, std::string(kJobCancelledByClient))
                                 : status;
      record.state =
          outcome.code() == ErrorCode::kCancelled ? v1::JOB_STATE_CANCELLED : v1::JOB_STATE_FAILED;
      v1::JobError& error = record.error.emplace();
      error.set_code(canonical_code(outcome.code()));
      error.set_status(std::string(to_string(outcome.code())));
      error.set_message(outcome.message());
    }
    ++count_of(record.state);
    record.finished_unix_ms = unix_ms_now();
    record.expires = now + std::chrono::milliseconds(options_.result_ttl_ms);
    record.by_finish = finished_.insert(finished_.end(), id);
    Holdings& held = holdings_[owner];
    record.by_owner_finish = held.finished.insert(held.finished.end(), id);
    if (record.canceller) out.cancellers.push_back(std::exchange(record.canceller, nullptr));
    std::map<uint64_t, Waiter> waiters = std::exchange(record.waiters, {});

    if (record.result_bytes > options_.max_result_bytes) {
      // A result bigger than max_result_bytes on its own could never be held, however much else
      // were evicted: it is evicted at once, and the job, its waiting long-polls included,
      // answers NOT_FOUND "evicted" like any evicted job. Evicting the others first would only
      // lose their results as well.
      drop(id, Gone::kEvictedBytes, out);
    } else if (record.result_bytes > 0) {
      record.by_use = held.lru.insert(held.lru.end(), id);
      held.result_bytes += record.result_bytes;
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

void MemoryJobStore::State::discard(const std::string& id) {
  Outbox out;
  {
    const std::lock_guard lock(mutex_);
    const auto it = records_.find(id);
    if (gate_.closed() || it == records_.end()) return;
    remove(it, out);  // no tombstone: as if it had never been made
  }
  flush(out);
}

void MemoryJobStore::State::get(const std::string& id, const std::string& owner,
                                std::chrono::milliseconds wait, std::function<void(Answer)> done) {
  if (!valid_job_id(id)) {
    guarded_call(kJobStoreLogName, "get's done", done, Answer(invalid_job_id(id)));
    return;
  }
  Outbox out;
  std::optional<Reply> reply;
  {
    const std::lock_guard lock(mutex_);
    Record* const record = readable(id, owner, out, reply);
    const int64_t wait_ms = std::min<int64_t>(wait.count(), options_.max_wait_ms);
    if (record == nullptr) {
      // refused: `reply` says why
    } else if (!is_open(record->state) || wait_ms <= 0 || no_waiting_) {
      reply = fetched(id, *record);
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
  if (reply) guarded_call(kJobStoreLogName, "get's done", done, to_answer(std::move(*reply)));
}

JobStore::Answer MemoryJobStore::State::cancel(const std::string& id, const std::string& owner) {
  if (!valid_job_id(id)) return invalid_job_id(id);
  std::function<void()> canceller;
  {
    Outbox out;
    std::optional<Reply> reply;
    {
      const std::lock_guard lock(mutex_);
      Record* const record = readable(id, owner, out, reply);
      if (record == nullptr) {
        // refused: `reply` says why
      } else if (!is_open(record->state)) {
        reply = fetched(id, *record);
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
  if (canceller) guarded_call(kJobStoreLogName, "canceller", canceller);
  canceller = nullptr;

  Outbox out;
  std::optional<Reply> reply;
  {
    const std::lock_guard lock(mutex_);
    if (Record* const record = readable(id, owner, out, reply)) reply = fetched(id, *record);
  }
  flush(out);
  return to_answer(std::move(*reply));
}

void MemoryJobStore::State::on_counts(std::function<void(const Counts&)> observer) {
  std::function<void(const Counts&)> replaced;  // destroyed after the lock
  {
    const std::lock_guard lock(observer_mutex_);
    replaced = std::exchange(observer_, std::move(observer));
  }
  notify();  // a gauge starts at the present counts
}

void MemoryJobStore::State::end_long_polls() {
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

void MemoryJobStore::State::close() {
  Records records;  // destroyed last, after the lock
  TimerQueue::Timer sweep;
  {
    const std::lock_guard lock(mutex_);
    gate_.close_locked();
    records.swap(records_);
    sweep = std::move(sweep_);
    open_by_owner_.clear();
    finished_.clear();
    holdings_.clear();
    tombstones_.clear();
    tombstone_order_.clear();
    idempotency_.clear();
  }
  sweep.cancel();
  // Timer actions that start from now on find the store closed and do nothing: only the
  // records' long-polls are left to answer, and nothing else reaches them now.
  for (auto& [id, record] : records) {
    for (auto& [seq, waiter] : record.waiters) {
      waiter.timer.cancel();
      guarded_call(kJobStoreLogName, "get's done", waiter.done, Answer(shutting_down()));
    }
  }
  {
    std::unique_lock lock(mutex_);
    gate_.wait_idle(lock);
  }
  const std::lock_guard lock(observer_mutex_);
  observer_ = nullptr;
}

MemoryJobStore::State::Record* MemoryJobStore::State::lookup(const std::string& id,
                                                             const std::string& owner,
                                                             JobClock::time_point now,
                                                             Outbox& out) {
  const auto it = records_.find(id);
  if (it == records_.end() || it->second.owner != owner) return nullptr;
  if (!is_open(it->second.state) && it->second.expires <= now) {
    drop(id, Gone::kExpired, out);
    return nullptr;
  }
  return &it->second;
}

MemoryJobStore::State::Record* MemoryJobStore::State::readable(const std::string& id,
                                                               const std::string& owner,
                                                               Outbox& out,
                                                               std::optional<Reply>& refusal) {
  if (gate_.closed()) {
    refusal = shutting_down();
    return nullptr;
  }
  Record* const record = lookup(id, owner, JobClock::now(), out);
  if (record == nullptr) refusal = not_found(id, owner);
  return record;
}

Reply MemoryJobStore::State::fetched(const std::string& id, Record& record) {
  touch(record);
  return view(id, record);
}

Status MemoryJobStore::State::not_found(const std::string& id, const std::string& owner) const {
  // Another owner's job reads exactly as an id that never existed: the answer must not tell
  // whether someone else has a job by that id.
  if (const auto it = tombstones_.find(id); it != tombstones_.end() && it->second.owner == owner) {
    return job_gone(id, it->second.finished_unix_ms, it->second.why, options_.result_ttl_ms);
  }
  if (id.compare(0, kIdTagDigits, tag_) != 0) {
    return {ErrorCode::kNotFound,
            "job " + id +
                " was not submitted to this server run: jobs do not survive a restart, and each "
                "replica keeps its own; submit it again"};
  }
  return {ErrorCode::kNotFound, "no job " + id};
}

JobView MemoryJobStore::State::view(const std::string& id, const Record& record) const {
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

void MemoryJobStore::State::touch(Record& record) {
  if (record.by_use) {
    Ids& lru = holdings_.at(record.owner).lru;
    lru.splice(lru.end(), lru, *record.by_use);
  }
}

int64_t& MemoryJobStore::State::count_of(v1::JobState state) {
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

void MemoryJobStore::State::remove(Records::iterator it, Outbox& out) {
  const std::string id = it->first;
  Record& record = it->second;
  --count_of(record.state);
  if (is_open(record.state)) {
    if (const auto open = open_by_owner_.find(record.owner); --open->second == 0) {
      open_by_owner_.erase(open);
    }
  }
  const auto held = holdings_.find(record.owner);
  if (!is_open(record.state)) {
    finished_.erase(record.by_finish);
    held->second.finished.erase(record.by_owner_finish);
    if (record.by_use) {
      held->second.lru.erase(*record.by_use);
      held->second.result_bytes -= record.result_bytes;
    }
    counts_.result_bytes -= record.result_bytes;
  }
  if (--held->second.records == 0) holdings_.erase(held);
  if (!record.idempotency_key.empty()) idempotency_.erase({record.owner, record.idempotency_key});
  const std::string owner = record.owner;
  std::map<uint64_t, Waiter> waiters = std::move(record.waiters);
  if (record.result) out.results.push_back(std::move(record.result));
  if (record.canceller) out.cancellers.push_back(std::move(record.canceller));
  records_.erase(it);
  out.counts_changed = true;
  if (!waiters.empty()) {
    const Status gone = not_found(id, owner);
    for (auto& [seq, waiter] : waiters) {
      out.timers.push_back(std::move(waiter.timer));
      out.replies.emplace_back(std::move(waiter.done), gone);
    }
  }
}

void MemoryJobStore::State::drop(const std::string& id, Gone why, Outbox& out) {
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

void MemoryJobStore::State::expire_due(JobClock::time_point now, Outbox& out) {
  while (!finished_.empty() && records_.at(finished_.front()).expires <= now) {
    drop(finished_.front(), Gone::kExpired, out);
  }
}

template <typename Amount, typename Evictable>
MemoryJobStore::State::Holdings* MemoryJobStore::State::largest_holder(const Amount& amount,
                                                                       const Evictable& evictable) {
  Holdings* largest = nullptr;
  for (auto& [owner, held] : holdings_) {
    if (evictable(held) && (largest == nullptr || amount(held) > amount(*largest))) {
      largest = &held;
    }
  }
  return largest;
}

void MemoryJobStore::State::evict_for_bytes(Outbox& out) {
  while (counts_.result_bytes > options_.max_result_bytes) {
    Holdings* const largest = largest_holder([](const Holdings& h) { return h.result_bytes; },
                                             [](const Holdings& h) { return !h.lru.empty(); });
    if (largest == nullptr) break;
    drop(largest->lru.front(), Gone::kEvictedBytes, out);
  }
}

void MemoryJobStore::State::arm_sweep() {
  if (finished_.empty()) return;  // a timer still armed finds nothing and stops
  const JobClock::time_point due = records_.at(finished_.front()).expires;
  if (sweep_ && sweep_due_ <= due) return;
  sweep_due_ = due;
  sweep_ = timers_.schedule(due, [weak = weak_from_this()] {
    if (const auto state = weak.lock()) state->sweep();
  });
}

void MemoryJobStore::State::sweep() {
  ActionGate::Pass pass;  // ends after flush(), without the lock
  Outbox out;
  {
    const std::lock_guard lock(mutex_);
    pass = gate_.enter_locked();
    if (!pass) return;
    // This timer has run (or a newer one is replaced, harmlessly: arm_sweep() schedules for the
    // present front either way).
    sweep_ = TimerQueue::Timer();
    expire_due(JobClock::now(), out);
    arm_sweep();
  }
  flush(out);
}

void MemoryJobStore::State::wait_timed_out(const std::string& id, uint64_t waiter) {
  ActionGate::Pass pass;  // ends after flush(), without the lock
  Outbox out;
  {
    const std::lock_guard lock(mutex_);
    if (gate_.closed()) return;
    const auto it = records_.find(id);
    if (it == records_.end()) return;
    const auto found = it->second.waiters.find(waiter);
    if (found == it->second.waiters.end()) return;  // answered by finish() meanwhile
    pass = gate_.enter_locked();
    out.timers.push_back(std::move(found->second.timer));
    out.replies.emplace_back(std::move(found->second.done), view(id, it->second));
    it->second.waiters.erase(found);
  }
  flush(out);
}

void MemoryJobStore::State::flush(Outbox& out) {
  // Cancelled before the answers: a timer whose waiter is answered has nothing left to do.
  for (TimerQueue::Timer& timer : out.timers) timer.cancel();
  for (auto& [done, reply] : out.replies) {
    guarded_call(kJobStoreLogName, "get's done", done, to_answer(std::move(reply)));
    done = nullptr;  // what it captured goes now, not with the rest
  }
  out.results.clear();
  out.cancellers.clear();
  if (out.counts_changed) notify();
}

void MemoryJobStore::State::notify() {
  const std::lock_guard lock(observer_mutex_);
  if (!observer_) return;
  const Counts now = counts();
  guarded_call(kJobStoreLogName, "counts observer", observer_, now);
}

MemoryJobStore::MemoryJobStore(JobStoreOptions options, TimerQueue& timers)
    : state_(std::make_shared<State>(std::move(options), timers)) {}

MemoryJobStore::~MemoryJobStore() { state_->close(); }

void MemoryJobStore::end_long_polls() { state_->end_long_polls(); }

std::string MemoryJobStore::create(const std::string& owner, const std::string& request_id) {
  return state_->create(owner, request_id);
}

void MemoryJobStore::create(NewJob job, std::function<void(Created)> done) {
  Created created;
  try {
    bool existing = false;
    std::string id = state_->create(job.owner, job.request_id, job.idempotency_key,
                                    job.request_digest, &existing);
    if (existing) {
      created = ExistingJob{std::move(id)};
    } else {
      created = std::move(id);
    }
  } catch (const Error& e) {
    created = Status(e);
  }
  done(std::move(created));
}

void MemoryJobStore::set_canceller(const std::string& id, std::function<void()> cancel) {
  state_->set_canceller(id, std::move(cancel));
}

void MemoryJobStore::progress(const std::string& id, const v1::Progress& progress) {
  state_->progress(id, progress);
}

void MemoryJobStore::finish(const std::string& id, const Status& status,
                            v1::GenerateMeshResponse response) {
  state_->finish(id, status, std::move(response));
}

void MemoryJobStore::discard(const std::string& id) { state_->discard(id); }

void MemoryJobStore::get(const std::string& id, const std::string& owner,
                         std::chrono::milliseconds wait, std::function<void(Answer)> done) {
  state_->get(id, owner, wait, std::move(done));
}

JobStore::Answer MemoryJobStore::cancel(const std::string& id, const std::string& owner) {
  return state_->cancel(id, owner);
}

void MemoryJobStore::cancel(const std::string& id, const std::string& owner,
                            std::function<void(Answer)> done) {
  done(state_->cancel(id, owner));
}

JobStore::Counts MemoryJobStore::counts() const { return state_->counts(); }

void MemoryJobStore::on_counts(std::function<void(const Counts&)> observer) {
  state_->on_counts(std::move(observer));
}

}  // namespace cube3d
