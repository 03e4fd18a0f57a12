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
// died or lost Redis): it runs it again from the stored request, as the job's next run (a run
// number in the record fences every write), up to max_takeovers times (a run counts once its
// replica has renewed it or ended it: a claim whose reply never arrived costs nothing), then
// the job ends FAILED with UNAVAILABLE (retryable: submit it again) saying so; a job cancelled
// meanwhile ends CANCELLED. A replica that loses a job's lease to another stops its own run of
// it. A draining replica hands the jobs its drain cancels back (their leases lapse at once)
// instead of failing them. Leases count only time in which Redis could be reached: a gap in the
// replicas' heartbeat of over half a lease (Redis stalled, failed over, or every replica was
// down) moves every open lease out by the gap, and to a whole lease from then at least, so that
// an outage takes no job from a live replica. A job whose outcome waits to be written is renewed
// as a running one is, so that nobody runs again what is done.
//
// Finishes: the job's current run ends it however it ended; an earlier run of it (one whose
// replica lost the lease while Redis was away) ends it with its mesh (generation is
// deterministic: any run's mesh is the job's), and the other runs stop when they hear the job
// ended. A cancel wins over a finish that comes after it. A finish that could not be written is
// retried at each tick and as soon as Redis is back, for as long as the result would be kept
// (jobs.result_ttl_s).
//
// Failover (redis.sentinels, redis_client.h): a create answered only once jobs.durable_replicas
// replicas have it cannot be lost with the primary; a finish not yet on them is written again
// until it is; the heartbeat's gap rule above keeps the failover's seconds from taking a job
// from its replica.
//
// Redis unreachable: create() refuses UNAVAILABLE (the submit's 503), get() and cancel() answer
// UNAVAILABLE, health() says why (readiness). Every script carries its caller's deadline in
// Redis' clock (learnt from TIME at each tick) and does nothing when it runs after it: a command
// that waited in a stalled Redis' socket makes no ghost job, claims nothing and renews nothing;
// and a create whose answer was lost is removed once Redis answers (unless it was taken over and
// runs, or its idempotency key has handed it to a client since), so a 503 "not made" holds.
// Every Redis call has its deadline (redis_client.h) and runs on the client's threads: no front
// door, scheduler or timer thread ever waits on Redis.
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
  // jobs.durable_replicas: a create or a finish counts as written once this many replicas of
  // Redis have it too (WAIT), so that a failover to one of them loses neither; 0: once the
  // primary has it (Redis' replication is asynchronous: a failover may then lose the last
  // writes). A create short of it is refused UNAVAILABLE and removed; a finish short of it is
  // written again at the next tick.
  int64_t durable_replicas = 0;
  int64_t durable_timeout_ms = 500;  // jobs.durable_timeout_ms: how long WAIT waits
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

 private:
  friend struct RedisJobStoreTesting;  // redis_job_store_testing.h: tests only
  class State;
  std::shared_ptr<State> state_;
};

}  // namespace cube3d
