// The records of asynchronous mesh jobs (SubmitMeshJob, GetMeshJob, CancelMeshJob): game servers
// cannot hold a request open for the seconds a mesh takes, so they submit a job, poll it
// (optionally long-poll), fetch the result and may cancel it. Transport-neutral: the glue that
// submits the work to the service (job_service.h) and the gRPC and HTTP endpoints live
// elsewhere; this is the store they share. Two stores implement it (jobs.store):
//
//   memory (memory_job_store.h, the default): in this process; each replica keeps its own jobs
//     and a restart loses them.
//   redis (redis_job_store.h): in a Redis that every replica shares; any replica answers any
//     job, and a job whose replica dies is run again by another one (leases, takeovers).
//
// A job is QUEUED at create(), RUNNING once progress() reports a stage past STAGE_QUEUED, and
// ends at finish() as SUCCEEDED, FAILED or CANCELLED. An ended job is kept for result_ttl_ms
// (then NOT_FOUND "expired"); successful results count against max_result_bytes, beyond which
// the owner holding the most result bytes gives up its least recently finished or fetched one
// (NOT_FOUND "evicted"), and records count against max_jobs, beyond which the owner holding the
// most records gives up its oldest ended one: one key's traffic never evicts another key's jobs
// while that key holds no more than the others (its share). A job is visible only to its owner
// (an API key's name): another owner's job reads as an unknown id.
//
// Every method may be called from any thread and none waits: answers come by callback, on the
// calling thread or later on the store's (the timer queue's, or the Redis client's). Callbacks
// never run under a store's lock, so they may call back into the store.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <variant>

#include "cube3d/core/status.h"
#include "cube3d/server/jobs/job_store_options.h"
#include "cube3d/v1/mesh_service.pb.h"

namespace cube3d {

// What the stores' log lines start with.
inline constexpr std::string_view kJobStoreLogName = "job store";

// The message of a job that ended CANCELLED because its client cancelled it (the job glue's
// cancel of the work, and the outcome of any finish after a cancel; the Redis store's Lua
// carries the same text, which the contract suite checks).
inline constexpr std::string_view kJobCancelledByClient =
    "cancelled by its client (CancelMeshJob or DELETE /v1/jobs/{id})";

// A job to keep: its owner and request id, and what another replica needs to run it again.
struct NewJob {
  std::string owner;       // an API key's name; "" when the server has no keys
  std::string request_id;  // fixed at submission
  // The request as submitted (request_id set) and the end user's pseudonym ("" for none): the
  // Redis store keeps both, so that a job whose replica died can be run again from them.
  v1::GenerateMeshRequest request;
  std::string end_user;
  // The submit's idempotency key (HTTP's Idempotency-Key, else the request's request_id; empty:
  // none) and the digest of the request it was sent with. Within an owner, a key names one job
  // for as long as the job is kept: create() with a key already held answers that job
  // (ExistingJob) when the digest is the same, and refuses ALREADY_EXISTS when it is not.
  std::string idempotency_key;
  std::string request_digest;
};

// A create whose idempotency key names a job already made (a retry of its submit): no new job.
struct ExistingJob {
  std::string id;
};

// A job this replica runs again because the replica that ran it stopped renewing its lease.
struct TakenOverJob {
  std::string id;
  NewJob job;
  int64_t takeover = 0;  // 1 for the first takeover
};

class JobStore {
 public:
  // The job, or INVALID_ARGUMENT (an id that is not 40 lowercase hex digits), NOT_FOUND (with a
  // message that says why: unknown, another owner's, expired, evicted, of another server run)
  // or UNAVAILABLE (the store is shutting down, or cannot be reached).
  using Answer = std::variant<v1::MeshJob, Status>;
  // The new job's id (40 lowercase hex digits), the job its idempotency key names already, or
  // why not: RESOURCE_EXHAUSTED naming jobs.max_jobs_per_key or jobs.max_jobs, ALREADY_EXISTS
  // (the key names a job of another request), UNAVAILABLE (shutting down, or the store cannot
  // be reached: a job nobody else could read is not made).
  using Created = std::variant<std::string, Status, ExistingJob>;

  struct Counts {
    int64_t queued = 0, running = 0, succeeded = 0, failed = 0, cancelled = 0;
    int64_t result_bytes = 0;  // of the SUCCEEDED results held
  };

  virtual ~JobStore() = default;

  // A new QUEUED record; `done` runs once (inline, or on the store's thread).
  virtual void create(NewJob job, std::function<void(Created)> done) = 0;
  // How to cancel the job's work on this replica. When a cancel came before it, it runs at once
  // (in this call, without the lock); for a job that has ended or is unknown it is dropped.
  virtual void set_canceller(const std::string& id, std::function<void()> cancel) = 0;
  // The last progress seen; QUEUED -> RUNNING once the stage is past STAGE_QUEUED. Ignored once
  // the job has ended.
  virtual void progress(const std::string& id, const v1::Progress& progress) = 0;
  // The outcome: OK -> SUCCEEDED with the response; CANCELLED -> CANCELLED; anything else ->
  // FAILED; the last two with JobError{code, status name, message}. Starts the TTL, answers the
  // job's long-polls, evicts to stay within max_result_bytes. The first finish wins: a later one
  // (work that ended as it was cancelled) is ignored. A cancel wins over a finish that comes
  // after it: the job ends CANCELLED (kJobCancelledByClient) whatever its work's outcome, so that
  // a client that cancelled never finds the job ended otherwise, on either store.
  virtual void finish(const std::string& id, const Status& status,
                      v1::GenerateMeshResponse response) = 0;
  // The submit was refused synchronously (invalid request, queue full): the record goes, as if
  // it had never been made.
  virtual void discard(const std::string& id) = 0;

  // Answers at once when the job has ended, or `wait` is 0, or the job cannot be found; else
  // when it ends or when `wait`, capped by max_wait_ms, passes. `done` runs exactly once, never
  // under the store's lock.
  virtual void get(const std::string& id, const std::string& owner, std::chrono::milliseconds wait,
                   std::function<void(Answer)> done) = 0;
  // An open job: its work is cancelled (on whichever replica runs it) and the job is answered as
  // it then is (CANCELLED when the work ended at once, else still QUEUED or RUNNING). An ended
  // job is answered unchanged.
  virtual void cancel(const std::string& id, const std::string& owner,
                      std::function<void(Answer)> done) = 0;

  // Draining: every pending long-poll answers now with its job as it is, and later ones answer
  // at once (gRPC's shutdown waits for every call, a long-poll included). Jobs still end and
  // can still be read.
  virtual void end_long_polls() = 0;

  // The jobs by state (the memory store's own; the Redis store's: all replicas' together).
  virtual Counts counts() const = 0;
  // Observer for metrics (gauges by state): called now and after each change, without the
  // store's lock, one call at a time, each with the counts as they are when it runs. It may read
  // the store but must not change it.
  virtual void on_counts(std::function<void(const Counts&)> observer) = 0;

  // Shared stores: `run` gets each job this replica takes over (on the store's thread), while
  // `can_run` says that this replica takes work (loaded, not draining). The memory store never
  // calls either.
  virtual void on_takeover(std::function<void(TakenOverJob)> run, std::function<bool()> can_run) {
    (void)run;
    (void)can_run;
  }
  // Whether the store can take jobs now: OK, or UNAVAILABLE saying why (readiness).
  virtual Status health() const { return {}; }
};

// Throws naming the `jobs.` key of the first limit out of its range (the limits both stores
// share; max_tombstones is the memory store's own).
void validate_job_limits(const JobStoreOptions& limits);

// The digest NewJob::request_digest holds: of the request without its request_id (which may be
// the key itself, or made by the server).
std::string idempotency_digest(const v1::GenerateMeshRequest& request);
// ALREADY_EXISTS for a key that names a job of another request.
Status idempotency_conflict(const std::string& key, const std::string& id);

// Ids: 40 lowercase hex digits, a tag (8: the server run that made it) then 128 random bits
// from getrandom(2) (an id must not be guessable from others, since on a server without API keys
// the id is all that keeps one client from another's job).
std::string make_job_id(const std::string& tag);
std::string make_job_tag();  // 8 random lowercase hex digits
bool valid_job_id(const std::string& id);
Status invalid_job_id(const std::string& id);

// Why an ended job is no longer kept, and the NOT_FOUND its owner gets then (naming the config
// key that made it go, and when the job ended).
enum class JobGone { kExpired, kEvictedBytes, kEvictedJobs };
Status job_gone(const std::string& id, int64_t finished_unix_ms, JobGone why,
                int64_t result_ttl_ms);

}  // namespace cube3d
