// The Redis job store (jobs.store: redis): the records of job_store.h in the Redis that every
// replica shares (redis.url), so that any replica answers any job, and a replica's death costs
// no job.
//
// Records: <prefix>job:<id>, a hash (owner, request id, the request and the end user's pseudonym
// for a takeover, state, progress, times, error, holder and lease, takeovers, a cancel flag) and
// <prefix>result:<id> (the serialized response), with sorted sets of the open jobs by lease and
// the ended ones by expiry, and counts per state and per owner. Every change is one Lua script,
// atomic in Redis, and the clock of leases and expiry is Redis' own (TIME), so that replicas'
// clocks never disagree about them. The limits of job_store.h hold across all replicas
// (jobs.max_jobs_per_key, jobs.max_jobs, jobs.max_result_bytes counted in Redis, with the same
// fair eviction); an expired or evicted job's NOT_FOUND says why for jobs.result_ttl_s.
//
// Any replica answers: GetMeshJob reads Redis; a long-poll waits, holding no thread, until a
// message on <prefix>job-ended (published by the script that ends the job) wakes it, or its wait
// runs out; CancelMeshJob sets the cancel flag and publishes on <prefix>job-cancel, which the
// replica running the job hears at once (its work stops at the next decode step); a cancel
// missed while its subscriber was away is seen at the next lease renewal.
//
// Leases: the replica that runs a job holds its lease and renews it every lease_ms / 3. Any
// replica whose service is ready takes over an open job whose lease has lapsed (its replica
// died or lost Redis): it runs it again from the stored request, up to max_takeovers times
// (counted in the record and in cube3d_job_takeovers_total), then the job ends FAILED with
// UNAVAILABLE (retryable: submit it again) saying so; a job cancelled meanwhile ends CANCELLED.
// A replica that loses a job's lease to another stops its own run of it. A draining replica
// hands the jobs its drain cancels back (their leases lapse at once) instead of failing them.
//
// Redis unreachable: create() refuses UNAVAILABLE (the submit's 503), get() and cancel() answer
// UNAVAILABLE, health() says why (readiness); a finish that could not be written is retried
// until its lease would have lapsed. Every Redis call has its deadline (redis_client.h) and runs
// on the client's threads: no front door, scheduler or timer thread ever waits on Redis.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "cube3d/server/jobs/job_store.h"
#include "cube3d/server/redis/redis_client.h"
#include "cube3d/server/redis/redis_subscriber.h"
#include "cube3d/server/timing/timer_queue.h"

namespace cube3d {

struct RedisJobStoreOptions {
  JobStoreOptions limits;
  std::string key_prefix = "cube3d:";  // redis.key_prefix
  int64_t lease_ms = 10'000;           // jobs.lease_ms
  int64_t max_takeovers = 2;           // jobs.max_takeovers
  // Lapsed jobs one replica takes over at each renewal (a replica back from a pause does not
  // take every orphan at once).
  int64_t takeovers_per_tick = 4;
  // This replica's id in the records it holds (the cache's claims use the same); empty: random.
  std::string replica;
};

// What the store tells the metrics (each may be empty).
struct RedisJobStoreObserver {
  // A lapsed lease handled: "rerun" (taken over here), "failed" (past max_takeovers) or
  // "cancelled" (a cancel came before the takeover).
  std::function<void(const char* outcome)> on_takeover;
};

class RedisJobStore final : public JobStore {
 public:
  // The client, subscriber and timers must outlive the store. Throws invalid_argument for an
  // option out of range.
  RedisJobStore(RedisClient& client, RedisSubscriber& subscriber, TimerQueue& timers,
                RedisJobStoreOptions options, RedisJobStoreObserver observer = {});
  // Answers pending long-polls UNAVAILABLE, hands this replica's open jobs back (their leases
  // lapse now: another replica takes them over) and stops its timers.
  ~RedisJobStore() override;
  RedisJobStore(const RedisJobStore&) = delete;
  RedisJobStore& operator=(const RedisJobStore&) = delete;

  void create(NewJob job, std::function<void(Created)> done) override;
  void set_canceller(const std::string& id, std::function<void()> cancel) override;
  void progress(const std::string& id, const v1::Progress& progress) override;
  void finish(const std::string& id, const Status& status,
              v1::GenerateMeshResponse response) override;
  void discard(const std::string& id) override;
  void get(const std::string& id, const std::string& owner, std::chrono::milliseconds wait,
           std::function<void(Answer)> done) override;
  void cancel(const std::string& id, const std::string& owner,
              std::function<void(Answer)> done) override;
  void end_long_polls() override;
  Counts counts() const override;
  void on_counts(std::function<void(const Counts&)> observer) override;
  void on_takeover(std::function<void(TakenOverJob)> run, std::function<bool()> can_run) override;
  Status health() const override;

  // This replica's id in the records' holder field (random per run).
  const std::string& replica() const;

  // What a replica killed with SIGKILL leaves behind, for tests: from now on this store renews
  // no lease, takes over nothing and hands nothing back; its jobs' leases lapse, and other
  // replicas take them over. Its work's outcomes are still written, and then ignored (the
  // records are no longer this replica's).
  void stop_renewing_for_testing();

 private:
  class State;
  std::shared_ptr<State> state_;
};

}  // namespace cube3d
