#include "cube3d/server/jobs/redis_job_store.h"
#include "cube3d/server/jobs/redis_job_store_testing.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/core/guarded_call.h"
#include "cube3d/core/printable.h"
#include "cube3d/server/jobs/redis_job_store_scripts.h"  // generated: src/server/jobs/lua/
#include "cube3d/server/timing/action_gate.h"
#include "cube3d/server/timing/renewal_rounds.h"

namespace cube3d {
namespace {

using StoreClock = TimerQueue::Clock;
using Replies = std::vector<RedisReply>;
// The scripts (src/server/jobs/lua/*.lua, embedded at build time): kPrelude, what every script
// shares, then one script a change (kCreate, kFinish, kRenew, ...), each atomic in Redis.
namespace job_scripts = redis_job_store_scripts;

std::string script(std::string_view body) {
  std::string text(job_scripts::kPrelude);
  text += body;
  return text;
}

Status store_shutting_down() { return {ErrorCode::kUnavailable, "the server is shutting down"}; }

const char* state_name(v1::JobState state) {
  switch (state) {
    case v1::JOB_STATE_SUCCEEDED:
      return "SUCCEEDED";
    case v1::JOB_STATE_CANCELLED:
      return "CANCELLED";
    default:
      return "FAILED";
  }
}

v1::JobState state_of(const std::string& name) {
  if (name == "QUEUED") return v1::JOB_STATE_QUEUED;
  if (name == "RUNNING") return v1::JOB_STATE_RUNNING;
  if (name == "SUCCEEDED") return v1::JOB_STATE_SUCCEEDED;
  if (name == "CANCELLED") return v1::JOB_STATE_CANCELLED;
  return v1::JOB_STATE_FAILED;
}

bool is_open_state(v1::JobState state) {
  return state == v1::JOB_STATE_QUEUED || state == v1::JOB_STATE_RUNNING;
}

// A script's reply, or why none: a failed call (UNAVAILABLE, said as the store's) or an error
// reply (a bug of ours, or a Redis that refuses scripts: INTERNAL, logged).
std::variant<RedisReply, Status> reply_of(RedisClient::Result result, const char* what) {
  if (auto* status = std::get_if<Status>(&result)) {
    return Status(ErrorCode::kUnavailable,
                  std::string("jobs.store redis: ") + what + ": " + status->message());
  }
  RedisReply reply = std::move(std::get<Replies>(result).front());
  if (reply.error()) {
    spdlog::error("jobs.store redis: {}: {}", what, reply.text);
    return Status(ErrorCode::kInternal,
                  std::string("jobs.store redis: ") + what + " failed: " + reply.text);
  }
  return reply;
}

}  // namespace

class RedisJobStore::State : public std::enable_shared_from_this<RedisJobStore::State> {
 public:
  State(RedisClient& client, RedisSubscriber& subscriber, TimerQueue& timers,
        RedisJobStoreOptions options, RedisJobStoreObserver observer)
      : client_(client),
        subscriber_(subscriber),
        timers_(timers),
        options_(checked(std::move(options))),
        observer_(std::move(observer)),
        tag_(make_job_tag()),
        replica_(options_.replica.empty() ? make_job_tag() + make_job_tag() : options_.replica),
        tomb_ms_(std::to_string(std::max<int64_t>(options_.limits.result_ttl_ms, 60'000))) {}

  void start();
  void close();

  void create(NewJob job, std::function<void(Created)> done);
  void set_canceller(const std::string& id, std::function<void()> cancel);
  void progress(const std::string& id, const v1::Progress& progress);
  void finish(const std::string& id, const Status& status, v1::GenerateMeshResponse response);
  void discard(const std::string& id);
  void get(const std::string& id, const std::string& owner, std::chrono::milliseconds wait,
           std::function<void(Answer)> done);
  void cancel(const std::string& id, const std::string& owner, std::function<void(Answer)> done);
  void end_long_polls();
  Counts counts() const {
    const std::lock_guard lock(mutex_);
    return counts_;
  }
  void on_counts(std::function<void(const Counts&)> observer);
  void on_takeover(std::function<void(TakenOverJob)> run, std::function<bool()> can_run) {
    const std::lock_guard lock(mutex_);
    run_ = std::move(run);
    can_run_ = std::move(can_run);
  }
  Status health() const;
  const std::string& replica() const { return replica_; }
  void stop_renewing() {
    const std::lock_guard lock(mutex_);
    renewing_ = false;
  }

 private:
  // A job this replica runs, in run `run` of the job (1: its first; a takeover's is the next).
  struct Held {
    std::function<void()> canceller;
    bool cancel_requested = false;
    int64_t run = 1;
  };
  // A finish that Redis did not take (unreachable): retried at each tick, and as soon as the
  // subscriber is back, until `give_up` (the result's TTL: a mesh made is kept while it can
  // still be recorded, whoever holds the lease by then).
  struct PendingFinish {
    Status status;
    std::shared_ptr<const v1::GenerateMeshResponse> response;
    StoreClock::time_point give_up;
    int64_t run = 1;
  };
  struct Waiter {
    std::string owner;
    std::function<void(Answer)> done;
    TimerQueue::Timer timer;
  };

  static RedisJobStoreOptions checked(RedisJobStoreOptions options);
  // A script's command: EVAL with the key prefix and the deadline in Redis time (kPrelude) of a
  // call due at `deadline` here.
  RedisClient::Command script_command(std::string_view body, StoreClock::time_point deadline) const;
  // `durable`: a create or a finish, confirmed by WAIT when jobs.durable_replicas is set.
  void run_script(std::string_view body, std::vector<std::string> args, uint64_t lane,
                  std::function<void(RedisClient::Result)> then, bool durable = false);
  // The replicas that acknowledged a durable script's writes, when fewer than
  // jobs.durable_replicas.
  std::optional<int64_t> replicas_short(const RedisClient::Result& result) const;
  // Redis' clock against ours, from a TIME reply read at `read_at`.
  void learn_redis_clock(const RedisReply& time, StoreClock::time_point read_at);
  // Writes the finishes Redis did not take, and settles the creates it may have run late.
  void flush_pending();
  // A create whose answer did not come: removed once Redis answers, if it was made
  // (kDiscard).
  void settle(const std::string& id);
  // The job as its owner reads it (touch: a fetch, most recently used), on the id's lane.
  void read(const std::string& id, const std::string& owner, bool touch,
            std::function<void(Answer)> then);
  Answer answer_of(const std::string& id, std::variant<RedisReply, Status> reply) const;
  void write_finish(const std::string& id, PendingFinish finish);
  // <prefix>job-ended said `id` ended: a run of it here stops (another run's end is the
  // job's), then recheck().
  void heard_ended(const std::string& id);
  // Long-polls of `id` re-read their job; those whose job ended (or went) are answered. Nothing
  // else: it also runs when the subscriber reconnects, for jobs that may well still be open.
  void recheck(const std::string& id);
  void waiter_due(const std::string& id, uint64_t seq);
  void answer_waiter(const std::string& id, uint64_t seq, Answer answer);
  void heard_cancel(const std::string& id);
  // Runs a canceller taken from held_ (marked in running_cancellers_ under the same lock), then
  // what waited for it to return.
  void run_canceller(const std::string& id, std::function<void()>& canceller);
  // The renewal round (timing/renewal_rounds.h): leases renewed, jobs claimed, tombstones
  // swept, counts read; `next` arms the next round once the reply is in.
  void tick(std::function<void()> next);
  void after_tick(RedisClient::Result result, bool claimed);
  void publish_counts(const RedisReply& hash);

  RedisClient& client_;
  RedisSubscriber& subscriber_;
  TimerQueue& timers_;
  const RedisJobStoreOptions options_;
  const RedisJobStoreObserver observer_;
  const std::string tag_;
  const std::string replica_;
  const std::string tomb_ms_;
  const std::string ended_channel_ = options_.key_prefix + "job-ended";
  const std::string cancel_channel_ = options_.key_prefix + "job-cancel";

  mutable std::mutex mutex_;
  ActionGate gate_{mutex_};  // close() against the long-polls' and the tick's timer actions
  bool no_waiting_ = false;  // end_long_polls()
  bool renewing_ = true;     // false: RedisJobStoreTesting::stop_renewing()
  std::map<std::string, Held> held_;
  // Jobs whose canceller runs now, with what waits for it to return: a cancel's answer is read
  // after it, so a canceller that ends the job at once (its finish written first, on the same
  // lane) answers CANCELLED whichever thread took the canceller.
  std::map<std::string, std::vector<std::function<void()>>> running_cancellers_;
  std::map<std::string, PendingFinish> pending_finishes_;
  // Jobs ended here whose outcome is not written yet (in flight or pending), by run: renewed as
  // held jobs are.
  std::map<std::string, int64_t> finishing_;
  std::set<std::string> unsettled_;  // creates to discard once Redis answers
  // Redis' clock minus ours (steady), in ms, once a TIME reply has been read.
  std::atomic<bool> know_redis_clock_{false};
  std::atomic<int64_t> redis_clock_offset_ms_{0};
  std::map<std::string, std::map<uint64_t, Waiter>> waiters_;
  uint64_t next_waiter_ = 0;
  StoreClock::time_point last_renewed_ = StoreClock::now();
  Counts counts_;
  std::function<void(TakenOverJob)> run_;
  std::function<bool()> can_run_;
  TimerQueue::Timer tick_;

  std::mutex observer_mutex_;
  std::function<void(const Counts&)> counts_observer_;
};

RedisJobStoreOptions RedisJobStore::State::checked(RedisJobStoreOptions options) {
  validate_job_limits(options.limits);
  require_in_range("jobs.lease_ms", options.lease_ms, 300, 3'600'000);
  require_in_range("jobs.max_takeovers", options.max_takeovers, 0, 100);
  require_in_range("takeovers_per_tick", options.takeovers_per_tick, 1, 1000);
  require_in_range("jobs.durable_replicas", options.durable_replicas, 0, 100);
  require_in_range("jobs.durable_timeout_ms", options.durable_timeout_ms, 1, 60'000);
  return options;
}

void RedisJobStore::State::start() {
  const std::weak_ptr<State> weak = weak_from_this();
  subscriber_.subscribe(ended_channel_, [weak](const std::string& id) {
    if (const auto self = weak.lock()) self->heard_ended(id);
  });
  subscriber_.subscribe(cancel_channel_, [weak](const std::string& id) {
    if (const auto self = weak.lock()) self->heard_cancel(id);
  });
  // Messages sent while the subscriber was away are lost: every long-poll reads its job again.
  // Redis is back: the finishes it could not take go in now, not at the next tick.
  subscriber_.on_connected([weak] {
    const auto self = weak.lock();
    if (!self) return;
    std::vector<std::string> ids;
    {
      const std::lock_guard lock(self->mutex_);
      for (const auto& [id, waiters] : self->waiters_) ids.push_back(id);
    }
    for (const std::string& id : ids) self->recheck(id);
    self->flush_pending();
  });
  client_.run({{"TIME"}}, [weak](RedisClient::Result result) {
    const auto self = weak.lock();
    if (!self || std::holds_alternative<Status>(result)) return;
    self->learn_redis_clock(std::get<Replies>(result).front(), StoreClock::now());
  });
  schedule_renewal_rounds(gate_, timers_, tick_, std::chrono::milliseconds(options_.lease_ms / 3),
                          weak_from_this(), [weak](std::function<void()> next) {
                            if (const auto self = weak.lock()) self->tick(std::move(next));
                          });
}

void RedisJobStore::State::flush_pending() {
  std::map<std::string, PendingFinish> retries;
  std::set<std::string> settles;
  {
    const std::lock_guard lock(mutex_);
    if (gate_.closed()) return;
    retries.swap(pending_finishes_);
    settles.swap(unsettled_);
  }
  for (auto& [id, finish] : retries) write_finish(id, std::move(finish));
  for (const std::string& id : settles) settle(id);
}

void RedisJobStore::State::settle(const std::string& id) {
  run_script(job_scripts::kDiscard, {id}, RedisClient::lane_of(id),
             [this, self = shared_from_this(), id](RedisClient::Result result) {
               if (!std::holds_alternative<Status>(result)) return;
               const std::lock_guard lock(mutex_);
               if (!gate_.closed()) unsettled_.insert(id);  // Redis still away: next time
             });
}

int64_t steady_ms(StoreClock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

RedisClient::Command RedisJobStore::State::script_command(std::string_view body,
                                                          StoreClock::time_point deadline) const {
  // A little before the client gives up: the reply of a script that ran just in time must still
  // reach it. What runs after is dropped by the script itself ('late').
  const int64_t margin = std::min<int64_t>(100, client_.options().command_timeout.count() / 4);
  const int64_t redis_deadline =
      know_redis_clock_.load() ? steady_ms(deadline) + redis_clock_offset_ms_.load() - margin : 0;
  return {"EVAL", script(body), "0", options_.key_prefix, std::to_string(redis_deadline)};
}

void RedisJobStore::State::run_script(std::string_view body, std::vector<std::string> args,
                                      uint64_t lane, std::function<void(RedisClient::Result)> then,
                                      bool durable) {
  const StoreClock::time_point deadline = StoreClock::now() + client_.options().command_timeout;
  RedisClient::Command command = script_command(body, deadline);
  for (std::string& arg : args) command.push_back(std::move(arg));
  RedisClient::Commands commands = {std::move(command)};
  if (!durable || options_.durable_replicas == 0) {
    return client_.run(std::move(commands), std::move(then), lane, deadline);
  }
  // WAIT right behind the script, on its connection: how many replicas have its writes. Its
  // time is added to the call's, not taken from the script's.
  commands.push_back({"WAIT", std::to_string(options_.durable_replicas),
                      std::to_string(options_.durable_timeout_ms)});
  client_.run(std::move(commands), std::move(then), lane,
              deadline + std::chrono::milliseconds(options_.durable_timeout_ms));
}

std::optional<int64_t> RedisJobStore::State::replicas_short(
    const RedisClient::Result& result) const {
  if (options_.durable_replicas == 0) return std::nullopt;
  const auto* replies = std::get_if<Replies>(&result);
  if (replies == nullptr || replies->size() < 2) return std::nullopt;
  const int64_t acked = replies->at(1).as_int(0);
  if (acked >= options_.durable_replicas) return std::nullopt;
  return acked;
}

void RedisJobStore::State::learn_redis_clock(const RedisReply& time,
                                             StoreClock::time_point read_at) {
  if (time.type != RedisReply::Type::kArray || time.elements.size() != 2) return;
  const int64_t redis_ms = time.elements[0].as_int() * 1000 + time.elements[1].as_int() / 1000;
  // Read when the reply came back: Redis' clock is then at most the reply's travel behind, so
  // the deadlines made from it err early, never late.
  redis_clock_offset_ms_ = redis_ms - steady_ms(read_at);
  know_redis_clock_ = true;
}

void RedisJobStore::State::create(NewJob job, std::function<void(Created)> done) {
  {
    const std::lock_guard lock(mutex_);
    if (gate_.closed()) return done(store_shutting_down());
  }
  const std::string id = make_job_id(tag_);
  const std::string owner = job.owner;
  run_script(
      job_scripts::kCreate,
      {id, job.owner, job.request_id, job.request.SerializeAsString(), job.end_user, replica_,
       std::to_string(options_.lease_ms), std::to_string(options_.limits.max_jobs_per_key),
       std::to_string(options_.limits.max_jobs), tomb_ms_, job.idempotency_key, job.request_digest},
      RedisClient::lane_of(id),
      [this, self = shared_from_this(), id, owner, key = job.idempotency_key,
       done = std::move(done)](RedisClient::Result result) {
        const std::optional<int64_t> short_of = replicas_short(result);
        auto reply = reply_of(std::move(result), "cannot record the job");
        if (auto* status = std::get_if<Status>(&reply)) {
          if (status->code() == ErrorCode::kUnavailable) {
            // Redis may still run the create (it sat in a stalled Redis' socket): a late one
            // does nothing (kPrelude), and one that ran in time but whose answer was lost is
            // removed once Redis answers, so that this answer holds.
            settle(id);
            return done(Status(ErrorCode::kUnavailable,
                               status->message() +
                                   "; the job was not made (should Redis take it late, it is "
                                   "removed): submit it again"));
          }
          return done(*status);
        }
        const RedisReply& r = std::get<RedisReply>(reply);
        const std::string what = r.elements.empty() ? std::string() : r.elements[0].text;
        const int64_t n = r.elements.size() > 1 ? r.elements[1].as_int() : 0;
        if (short_of && (what == "ok" || what == "existing")) {
          // On the primary alone, a failover could lose it: not made (a new one is removed
          // here; a retried submit's job stays, for the next retry to find).
          if (what == "ok") settle(id);
          return done(
              Status(ErrorCode::kUnavailable,
                     "jobs.durable_replicas: " + std::to_string(*short_of) + " of " +
                         std::to_string(options_.durable_replicas) +
                         " Redis replicas acknowledged the job within jobs.durable_timeout_ms (" +
                         std::to_string(options_.durable_timeout_ms) +
                         " ms); it was not made: submit it again"));
        }
        if (what == "existing") return done(ExistingJob{r.elements[1].text});
        if (what == "conflict") return done(idempotency_conflict(key, r.elements[1].text));
        if (what == "per_key") {
          return done(Status(
              ErrorCode::kResourceExhausted,
              "jobs.max_jobs_per_key: " +
                  (owner.empty() ? std::string("the server") : "key \"" + printable(owner) + "\"") +
                  " already has " + std::to_string(n) +
                  " queued or running jobs; wait for one to end, or cancel one"));
        }
        if (what == "max_jobs") {
          return done(Status(ErrorCode::kResourceExhausted,
                             "jobs.max_jobs: the servers hold " + std::to_string(n) +
                                 " jobs, all queued or running; retry later"));
        }
        if (what == "late") {
          // Ran after this answer was given up on; it could not be here (the callback runs
          // first), but a late script never makes a job.
          return done(Status(ErrorCode::kUnavailable,
                             "jobs.store redis: Redis answered too late; the job was not made, "
                             "submit it again"));
        }
        if (what != "ok") {
          return done(Status(ErrorCode::kInternal, "jobs.store redis: job id " + id + " taken"));
        }
        {
          const std::lock_guard lock(mutex_);
          held_[id];  // before the work starts: it may end at once
        }
        done(id);
      },
      /*durable=*/true);
}

void RedisJobStore::State::set_canceller(const std::string& id, std::function<void()> cancel) {
  std::function<void()> replaced;
  bool run_now = false;
  {
    const std::lock_guard lock(mutex_);
    const auto it = held_.find(id);
    if (gate_.closed() || it == held_.end()) return;
    if (it->second.cancel_requested) {
      run_now = static_cast<bool>(cancel);
      if (run_now) running_cancellers_[id];
    } else {
      replaced = std::exchange(it->second.canceller, std::move(cancel));
    }
  }
  if (run_now) run_canceller(id, cancel);
}

void RedisJobStore::State::run_canceller(const std::string& id, std::function<void()>& canceller) {
  guarded_call(kJobStoreLogName, "canceller", canceller);
  std::vector<std::function<void()>> after;
  {
    const std::lock_guard lock(mutex_);
    const auto it = running_cancellers_.find(id);
    if (it == running_cancellers_.end()) return;
    after = std::move(it->second);
    running_cancellers_.erase(it);
  }
  for (auto& then : after) then();
}

void RedisJobStore::State::progress(const std::string& id, const v1::Progress& progress) {
  int64_t run = 0;
  {
    const std::lock_guard lock(mutex_);
    const auto it = held_.find(id);
    if (gate_.closed() || it == held_.end()) return;
    run = it->second.run;
  }
  run_script(job_scripts::kProgress,
             {id, replica_, progress.SerializeAsString(),
              progress.stage() > v1::STAGE_QUEUED ? "1" : "0", std::to_string(run)},
             RedisClient::lane_of(id), [](RedisClient::Result) {});
}

void RedisJobStore::State::finish(const std::string& id, const Status& status,
                                  v1::GenerateMeshResponse response) {
  std::function<void()> canceller;  // destroyed after the lock
  bool hand_back = false;
  int64_t run = 1;
  {
    const std::lock_guard lock(mutex_);
    const auto it = held_.find(id);
    if (it == held_.end()) return;  // not ours (any more), or finished already
    canceller = std::move(it->second.canceller);
    run = it->second.run;
    held_.erase(it);
    // Draining: a job that the drain cancels is handed back to another replica, not failed.
    hand_back = no_waiting_ && status.code() == ErrorCode::kUnavailable;
  }
  if (hand_back) {
    spdlog::info("job {}: handed back for another replica to run ({})", id, status.message());
    run_script(job_scripts::kRelease, {replica_, id}, RedisClient::lane_of(id),
               [](RedisClient::Result) {});
    return;
  }
  PendingFinish pending;
  pending.status = status;
  if (status.ok())
    pending.response = std::make_shared<const v1::GenerateMeshResponse>(std::move(response));
  pending.give_up = StoreClock::now() + std::chrono::milliseconds(options_.limits.result_ttl_ms);
  pending.run = run;
  {
    const std::lock_guard lock(mutex_);
    finishing_[id] = run;
  }
  write_finish(id, std::move(pending));
}

void RedisJobStore::State::write_finish(const std::string& id, PendingFinish finish) {
  const Status& status = finish.status;
  const v1::JobState state = status.ok()                              ? v1::JOB_STATE_SUCCEEDED
                             : status.code() == ErrorCode::kCancelled ? v1::JOB_STATE_CANCELLED
                                                                      : v1::JOB_STATE_FAILED;
  std::vector<std::string> args = {
      id,
      replica_,
      state_name(state),
      status.ok() ? "0" : std::to_string(canonical_code(status.code())),
      status.ok() ? "" : std::string(to_string(status.code())),
      status.message(),
      finish.response ? finish.response->SerializeAsString() : std::string(),
      std::to_string(options_.limits.result_ttl_ms),
      std::to_string(options_.limits.max_result_bytes),
      tomb_ms_,
      std::to_string(finish.run)};
  run_script(
      job_scripts::kFinish, std::move(args), RedisClient::lane_of(id),
      [this, self = shared_from_this(), id,
       finish = std::move(finish)](RedisClient::Result result) mutable {
        const std::optional<int64_t> short_of = replicas_short(result);
        if (!std::holds_alternative<Status>(result) && !short_of) {
          const std::lock_guard lock(mutex_);
          finishing_.erase(id);
          return;
        }
        if (short_of) {
          result = Status(ErrorCode::kUnavailable,
                          "jobs.durable_replicas: " + std::to_string(*short_of) + " of " +
                              std::to_string(options_.durable_replicas) +
                              " Redis replicas acknowledged the outcome");
        }
        // Not written (or not yet on the replicas a failover would promote): kept for the
        // next tick (or Redis' return), while the result could still be read.
        const std::lock_guard lock(mutex_);
        if (gate_.closed() || StoreClock::now() >= finish.give_up) {
          spdlog::warn(
              "job {}: its outcome could not be written to Redis within "
              "jobs.result_ttl_s ({}); another replica will run it again",
              id, std::get<Status>(result).message());
          finishing_.erase(id);
          return;
        }
        pending_finishes_[id] = std::move(finish);
      },
      /*durable=*/true);
}

void RedisJobStore::State::discard(const std::string& id) {
  {
    const std::lock_guard lock(mutex_);
    held_.erase(id);
  }
  run_script(job_scripts::kDiscard, {id}, RedisClient::lane_of(id), [](RedisClient::Result) {});
}

JobStore::Answer RedisJobStore::State::answer_of(const std::string& id,
                                                 std::variant<RedisReply, Status> reply) const {
  if (auto* status = std::get_if<Status>(&reply)) return *status;
  const RedisReply& r = std::get<RedisReply>(reply);
  const auto field = [&r](size_t i) -> const std::string& {
    static const std::string kNone;
    return i < r.elements.size() ? r.elements[i].text : kNone;
  };
  const auto number = [&r](size_t i) {
    return i < r.elements.size() ? r.elements[i].as_int() : int64_t{0};
  };
  if (field(0) == "unknown") return Status(ErrorCode::kNotFound, "no job " + id);
  if (field(0) == "gone") {
    const JobGone why = field(1) == "bytes"  ? JobGone::kEvictedBytes
                        : field(1) == "jobs" ? JobGone::kEvictedJobs
                                             : JobGone::kExpired;
    return job_gone(id, number(2), why, options_.limits.result_ttl_ms);
  }
  if (field(0) != "job") {
    return Status(ErrorCode::kInternal, "jobs.store redis: an answer of an unknown shape");
  }
  v1::MeshJob job;
  job.set_id(id);
  const v1::JobState state = state_of(field(1));
  job.set_state(state);
  if (!job.mutable_progress()->ParseFromString(field(2)) || field(2).empty()) {
    job.mutable_progress()->Clear();
    job.mutable_progress()->set_stage(v1::STAGE_QUEUED);
  }
  job.set_request_id(field(3));
  job.set_created_unix_ms(number(4));
  if (is_open_state(state)) {
    job.set_poll_after_ms(static_cast<uint32_t>(options_.limits.poll_after_ms));
  } else {
    job.set_finished_unix_ms(number(5));
    job.set_expires_unix_ms(number(5) + options_.limits.result_ttl_ms);
  }
  if (state == v1::JOB_STATE_FAILED || state == v1::JOB_STATE_CANCELLED) {
    v1::JobError* error = job.mutable_error();
    error->set_code(static_cast<int32_t>(number(6)));
    error->set_status(field(7));
    error->set_message(field(8));
  }
  job.set_takeovers(static_cast<uint32_t>(number(9)));
  if (state == v1::JOB_STATE_SUCCEEDED && !job.mutable_result()->ParseFromString(field(11))) {
    return Status(ErrorCode::kInternal, "jobs.store redis: job " + id + "'s result does not parse");
  }
  return job;
}

void RedisJobStore::State::read(const std::string& id, const std::string& owner, bool touch,
                                std::function<void(Answer)> then) {
  run_script(
      job_scripts::kGet, {id, owner, touch ? "1" : "0", tomb_ms_}, RedisClient::lane_of(id),
      [this, self = shared_from_this(), id, then = std::move(then)](RedisClient::Result result) {
        Answer answer = answer_of(id, reply_of(std::move(result), "cannot read the job"));
        guarded_call(kJobStoreLogName, "get's done", then, std::move(answer));
      });
}

void RedisJobStore::State::get(const std::string& id, const std::string& owner,
                               std::chrono::milliseconds wait, std::function<void(Answer)> done) {
  if (!valid_job_id(id))
    return guarded_call(kJobStoreLogName, "get's done", done, Answer(invalid_job_id(id)));
  const int64_t wait_ms = std::min<int64_t>(wait.count(), options_.limits.max_wait_ms);
  std::optional<uint64_t> seq;
  {
    const std::lock_guard lock(mutex_);
    if (gate_.closed())
      return guarded_call(kJobStoreLogName, "get's done", done, Answer(store_shutting_down()));
    if (wait_ms > 0 && !no_waiting_) {
      // Registered before the read, so that an end announced between the two is not missed.
      seq = next_waiter_++;
      Waiter& waiter = waiters_[id][*seq];
      waiter.owner = owner;
      waiter.done = std::move(done);
      waiter.timer = timers_.schedule_after(std::chrono::milliseconds(wait_ms),
                                            [weak = weak_from_this(), id, seq = *seq] {
                                              if (const auto self = weak.lock())
                                                self->waiter_due(id, seq);
                                            });
    }
  }
  if (!seq) return read(id, owner, true, std::move(done));
  read(id, owner, true, [this, self = shared_from_this(), id, seq = *seq](Answer answer) {
    const auto* job = std::get_if<v1::MeshJob>(&answer);
    if (job != nullptr && is_open_state(job->state())) return;  // waits
    answer_waiter(id, seq, std::move(answer));
  });
}

void RedisJobStore::State::answer_waiter(const std::string& id, uint64_t seq, Answer answer) {
  std::optional<Waiter> waiter;
  {
    const std::lock_guard lock(mutex_);
    const auto it = waiters_.find(id);
    if (it == waiters_.end()) return;
    const auto found = it->second.find(seq);
    if (found == it->second.end()) return;  // answered already
    waiter = std::move(found->second);
    it->second.erase(found);
    if (it->second.empty()) waiters_.erase(it);
  }
  waiter->timer.cancel();
  guarded_call(kJobStoreLogName, "get's done", waiter->done, std::move(answer));
}

void RedisJobStore::State::heard_ended(const std::string& id) {
  std::function<void()> canceller;
  {
    const std::lock_guard lock(mutex_);
    if (gate_.closed()) return;
    // Ended, and we still run it: another run's result (written late, Redis having been away)
    // is the job's, or it was cancelled or failed where it was held. Ours stops, its finish
    // ignored.
    if (const auto held = held_.find(id); held != held_.end()) {
      spdlog::info("job {}: ended by another run of it; stopping this one", id);
      canceller = std::move(held->second.canceller);
      if (canceller) running_cancellers_[id];
      held_.erase(held);
    }
  }
  if (canceller) run_canceller(id, canceller);
  recheck(id);
}

void RedisJobStore::State::recheck(const std::string& id) {
  std::vector<std::pair<uint64_t, std::string>> polls;
  {
    const std::lock_guard lock(mutex_);
    if (gate_.closed()) return;
    if (const auto it = waiters_.find(id); it != waiters_.end()) {
      for (const auto& [seq, waiter] : it->second) polls.emplace_back(seq, waiter.owner);
    }
  }
  for (const auto& [seq, owner] : polls) {
    read(id, owner, true, [this, self = shared_from_this(), id, seq = seq](Answer answer) {
      if (std::holds_alternative<Status>(answer) &&
          std::get<Status>(answer).code() == ErrorCode::kUnavailable) {
        return;  // Redis is away: the waiter's timer answers
      }
      const auto* job = std::get_if<v1::MeshJob>(&answer);
      if (job != nullptr && is_open_state(job->state())) return;
      answer_waiter(id, seq, std::move(answer));
    });
  }
}

void RedisJobStore::State::waiter_due(const std::string& id, uint64_t seq) {
  const ActionGate::Pass pass = gate_.enter();
  if (!pass) return;
  std::string owner;
  bool found = false;
  {
    const std::lock_guard lock(mutex_);
    if (const auto it = waiters_.find(id); it != waiters_.end()) {
      if (const auto w = it->second.find(seq); w != it->second.end()) {
        owner = w->second.owner;
        found = true;
      }
    }
  }
  if (found) {
    read(id, owner, true, [this, self = shared_from_this(), id, seq](Answer answer) {
      answer_waiter(id, seq, std::move(answer));
    });
  }
}

void RedisJobStore::State::cancel(const std::string& id, const std::string& owner,
                                  std::function<void(Answer)> done) {
  if (!valid_job_id(id))
    return guarded_call(kJobStoreLogName, "cancel's done", done, Answer(invalid_job_id(id)));
  {
    const std::lock_guard lock(mutex_);
    if (gate_.closed())
      return guarded_call(kJobStoreLogName, "cancel's done", done, Answer(store_shutting_down()));
  }
  run_script(job_scripts::kCancel, {id, owner}, RedisClient::lane_of(id),
             [this, self = shared_from_this(), id, owner,
              done = std::move(done)](RedisClient::Result result) mutable {
               auto reply = reply_of(std::move(result), "cannot cancel the job");
               if (auto* status = std::get_if<Status>(&reply)) {
                 return guarded_call(kJobStoreLogName, "cancel's done", done, Answer(*status));
               }
               // Ours: stopped now (the answer then reads CANCELLED); another replica's stops
               // when it hears the message. Our own subscriber may hear it first and be running
               // the canceller on its thread: the answer is read once that returns.
               if (std::get<RedisReply>(reply).as_int() == 1) heard_cancel(id);
               auto read_answer = [this, self, id, owner, done = std::move(done)]() mutable {
                 read(id, owner, true, std::move(done));
               };
               {
                 const std::lock_guard lock(mutex_);
                 const auto running = running_cancellers_.find(id);
                 if (running != running_cancellers_.end()) {
                   running->second.push_back(std::move(read_answer));
                   return;
                 }
               }
               read_answer();
             });
}

void RedisJobStore::State::heard_cancel(const std::string& id) {
  std::function<void()> canceller;
  {
    const std::lock_guard lock(mutex_);
    const auto it = held_.find(id);
    if (gate_.closed() || it == held_.end()) return;
    it->second.cancel_requested = true;
    canceller = std::exchange(it->second.canceller, nullptr);
    if (canceller) running_cancellers_[id];
  }
  if (canceller) run_canceller(id, canceller);
}

void RedisJobStore::State::end_long_polls() {
  std::vector<std::pair<std::string, uint64_t>> polls;
  {
    const std::lock_guard lock(mutex_);
    no_waiting_ = true;
    for (const auto& [id, by_seq] : waiters_) {
      for (const auto& [seq, waiter] : by_seq) polls.emplace_back(id, seq);
    }
  }
  for (const auto& [id, seq] : polls) waiter_due(id, seq);
}

void RedisJobStore::State::on_counts(std::function<void(const Counts&)> observer) {
  std::function<void(const Counts&)> replaced;
  {
    const std::lock_guard lock(observer_mutex_);
    replaced = std::exchange(counts_observer_, std::move(observer));
    if (counts_observer_) {
      const Counts now = counts();
      guarded_call(kJobStoreLogName, "counts observer", counts_observer_, now);
    }
  }
}

void RedisJobStore::State::publish_counts(const RedisReply& hash) {
  Counts fresh;
  for (size_t i = 0; i + 1 < hash.elements.size(); i += 2) {
    const std::string& name = hash.elements[i].text;
    const int64_t value = hash.elements[i + 1].as_int();
    if (name == "queued") fresh.queued = value;
    if (name == "running") fresh.running = value;
    if (name == "succeeded") fresh.succeeded = value;
    if (name == "failed") fresh.failed = value;
    if (name == "cancelled") fresh.cancelled = value;
    if (name == "result_bytes") fresh.result_bytes = value;
  }
  {
    const std::lock_guard lock(mutex_);
    counts_ = fresh;
  }
  const std::lock_guard lock(observer_mutex_);
  if (counts_observer_) guarded_call(kJobStoreLogName, "counts observer", counts_observer_, fresh);
}

Status RedisJobStore::State::health() const {
  if (!client_.up()) {
    const std::string error = client_.last_error();
    return Status(ErrorCode::kUnavailable,
                  "jobs.store redis: Redis cannot be reached" +
                      (error.empty() ? std::string() : " (" + error + ")"));
  }
  if (!subscriber_.connected()) {
    return Status(ErrorCode::kUnavailable,
                  "jobs.store redis: the subscription to job events is down (reconnecting)");
  }
  return Status();
}

void RedisJobStore::State::tick(std::function<void()> next) {
  {
    const std::lock_guard lock(mutex_);
    if (!renewing_) return;  // the renewal ends: no next round
  }
  const StoreClock::time_point deadline = StoreClock::now() + client_.options().command_timeout;
  RedisClient::Command renew = script_command(job_scripts::kRenew, deadline);
  renew.push_back(replica_);
  renew.push_back(std::to_string(options_.lease_ms));
  bool claim = false;
  {
    const std::lock_guard lock(mutex_);
    for (const auto& [id, held] : held_) {
      renew.push_back(id);
      renew.push_back(std::to_string(held.run));
    }
    // A job whose outcome waits to be written is still this replica's: its lease is kept, so
    // that no replica runs again what is done here (a Redis back from a stall takes the
    // renewal and the finish in whichever order its lanes bring them).
    for (const auto& [id, run] : finishing_) {
      if (held_.contains(id)) continue;
      renew.push_back(id);
      renew.push_back(std::to_string(run));
    }
    claim = run_ && can_run_ && !no_waiting_;
  }
  // can_run() reads the service's state (atomics), without the lock.
  claim = claim && can_run_();
  // TIME first: Redis' clock, for the deadlines of the scripts that follow (kPrelude).
  RedisClient::Commands commands = {{"TIME"}, std::move(renew)};
  if (claim) {
    RedisClient::Command claim_command = script_command(job_scripts::kClaim, deadline);
    for (std::string arg :
         {replica_, std::to_string(options_.lease_ms), std::to_string(options_.max_takeovers),
          std::to_string(options_.limits.result_ttl_ms),
          std::to_string(options_.limits.max_result_bytes), tomb_ms_,
          std::to_string(options_.takeovers_per_tick)}) {
      claim_command.push_back(std::move(arg));
    }
    commands.push_back(std::move(claim_command));
  }
  RedisClient::Command sweep = script_command(job_scripts::kSweep, deadline);
  sweep.push_back(tomb_ms_);
  sweep.push_back(std::to_string(1000));
  commands.push_back(std::move(sweep));
  commands.push_back({"HGETALL", options_.key_prefix + "counts"});
  client_.run(
      std::move(commands),
      [this, self = shared_from_this(), claim, next = std::move(next)](RedisClient::Result result) {
        after_tick(std::move(result), claim);
        next();
      },
      0, deadline);
  flush_pending();
}

void RedisJobStore::State::after_tick(RedisClient::Result result, bool claimed) {
  if (std::holds_alternative<Status>(result)) return;  // Redis away: the next tick tries again
  const Replies& replies = std::get<Replies>(result);
  learn_redis_clock(replies[0], StoreClock::now());
  const RedisReply& renewed = replies[1];
  {
    const std::lock_guard lock(mutex_);
    if (gate_.closed()) return;
    if (!renewed.error()) last_renewed_ = StoreClock::now();
  }
  // Renewal: jobs no longer ours stop here; ours with a cancel we did not hear are cancelled.
  std::vector<std::pair<std::string, std::function<void()>>> cancellers;
  {
    const std::lock_guard lock(mutex_);
    for (const RedisReply& entry : renewed.elements) {
      const bool cancel = entry.text.starts_with("cancel:");
      const std::string id = cancel ? entry.text.substr(7) : entry.text;
      const auto it = held_.find(id);
      if (it == held_.end()) continue;
      if (cancel) {
        it->second.cancel_requested = true;
        if (it->second.canceller) {
          cancellers.emplace_back(id, std::exchange(it->second.canceller, {}));
          running_cancellers_[id];
        }
        continue;
      }
      spdlog::warn("job {}: its lease was taken over by another replica; stopping this run", id);
      if (it->second.canceller) {
        cancellers.emplace_back(id, std::move(it->second.canceller));
        running_cancellers_[id];
      }
      held_.erase(it);  // its finish is then ignored
    }
  }
  for (auto& [id, canceller] : cancellers) run_canceller(id, canceller);
  size_t next = 2;
  if (claimed) {
    const RedisReply& claim = replies[next++];
    if (claim.error()) {
      spdlog::error("jobs.store redis: takeover failed: {}", claim.text);
    } else if (claim.elements.size() == 3) {
      for (int64_t i = 0; i < claim.elements[1].as_int(); ++i) {
        if (observer_.on_takeover) observer_.on_takeover("failed");
      }
      for (int64_t i = 0; i < claim.elements[2].as_int(); ++i) {
        if (observer_.on_takeover) observer_.on_takeover("cancelled");
      }
      std::function<void(TakenOverJob)> run;
      {
        const std::lock_guard lock(mutex_);
        run = run_;
      }
      for (const RedisReply& taken : claim.elements[0].elements) {
        if (taken.elements.size() < 7) continue;
        TakenOverJob job;
        job.id = taken.elements[0].text;
        job.job.owner = taken.elements[1].text;
        job.job.request.ParseFromString(taken.elements[2].text);
        job.job.request_id = taken.elements[3].text;
        job.job.end_user = taken.elements[4].text;
        job.takeover = taken.elements[5].as_int();
        {
          const std::lock_guard lock(mutex_);
          if (gate_.closed()) return;
          held_[job.id].run = taken.elements[6].as_int();
        }
        if (observer_.on_takeover) observer_.on_takeover("rerun");
        if (run) guarded_call(kJobStoreLogName, "takeover", run, std::move(job));
      }
    }
  }
  ++next;  // the sweep's count
  if (next < replies.size() && replies[next].type == RedisReply::Type::kArray) {
    publish_counts(replies[next]);
  }
}

void RedisJobStore::State::close() {
  std::map<std::string, std::map<uint64_t, Waiter>> waiters;
  std::vector<std::string> held;
  TimerQueue::Timer tick;
  {
    std::unique_lock lock(mutex_);
    gate_.close_locked();
    waiters.swap(waiters_);
    if (renewing_) {
      for (const auto& [id, entry] : held_) held.push_back(id);
    }
    held_.clear();
    tick = std::move(tick_);
    gate_.wait_idle(lock);
  }
  tick.cancel();
  for (auto& [id, by_seq] : waiters) {
    for (auto& [seq, waiter] : by_seq) {
      waiter.timer.cancel();
      guarded_call(kJobStoreLogName, "get's done", waiter.done, Answer(store_shutting_down()));
    }
  }
  if (!held.empty()) {
    // Handed back now rather than when their leases lapse; best effort, bounded by
    // redis.timeout_ms (this runs once, at the end of the process's shutdown).
    RedisClient::Command args = script_command(
        job_scripts::kRelease, StoreClock::now() + client_.options().command_timeout);
    args.push_back(replica_);
    args.insert(args.end(), held.begin(), held.end());
    client_.run_sync({std::move(args)});
  }
  const std::lock_guard lock(observer_mutex_);
  counts_observer_ = nullptr;
}

RedisJobStore::RedisJobStore(RedisClient& client, RedisSubscriber& subscriber, TimerQueue& timers,
                             RedisJobStoreOptions options, RedisJobStoreObserver observer)
    : state_(std::make_shared<State>(client, subscriber, timers, std::move(options),
                                     std::move(observer))) {
  state_->start();
}

RedisJobStore::~RedisJobStore() { state_->close(); }

void RedisJobStore::create(NewJob job, std::function<void(Created)> done) {
  state_->create(std::move(job), std::move(done));
}
void RedisJobStore::set_canceller(const std::string& id, std::function<void()> cancel) {
  state_->set_canceller(id, std::move(cancel));
}
void RedisJobStore::progress(const std::string& id, const v1::Progress& progress) {
  state_->progress(id, progress);
}
void RedisJobStore::finish(const std::string& id, const Status& status,
                           v1::GenerateMeshResponse response) {
  state_->finish(id, status, std::move(response));
}
void RedisJobStore::discard(const std::string& id) { state_->discard(id); }
void RedisJobStore::get(const std::string& id, const std::string& owner,
                        std::chrono::milliseconds wait, std::function<void(Answer)> done) {
  state_->get(id, owner, wait, std::move(done));
}
void RedisJobStore::cancel(const std::string& id, const std::string& owner,
                           std::function<void(Answer)> done) {
  state_->cancel(id, owner, std::move(done));
}
void RedisJobStore::end_long_polls() { state_->end_long_polls(); }
JobStore::Counts RedisJobStore::counts() const { return state_->counts(); }
void RedisJobStore::on_counts(std::function<void(const Counts&)> observer) {
  state_->on_counts(std::move(observer));
}
void RedisJobStore::on_takeover(std::function<void(TakenOverJob)> run,
                                std::function<bool()> can_run) {
  state_->on_takeover(std::move(run), std::move(can_run));
}
Status RedisJobStore::health() const { return state_->health(); }
const std::string& RedisJobStore::replica() const { return state_->replica(); }
void RedisJobStoreTesting::stop_renewing(RedisJobStore& store) { store.state_->stop_renewing(); }

}  // namespace cube3d
