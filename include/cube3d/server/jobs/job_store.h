// The records of asynchronous mesh jobs (SubmitMeshJob, GetMeshJob, CancelMeshJob): game servers
// cannot hold a request open for the seconds a mesh takes, so they submit a job, poll it
// (optionally long-poll), fetch the result and may cancel it. Transport-neutral: the glue that
// submits the work to the service core and the gRPC and HTTP endpoints live elsewhere; this is
// the store they share.
//
// A job is QUEUED at create(), RUNNING once progress() reports a stage past STAGE_QUEUED, and
// ends at finish() as SUCCEEDED, FAILED or CANCELLED. An ended job is kept for result_ttl_ms
// (then NOT_FOUND "expired"); successful results count against max_result_bytes, beyond which
// the least recently finished or fetched are evicted (NOT_FOUND "evicted"). Jobs live in memory
// only: they do not survive a restart, and each replica keeps its own (ids carry the run's tag,
// so that a job of another run gets a NOT_FOUND that says so).
//
// Every method may be called from any thread. The callbacks (get's `done`, the canceller, the
// counts observer) never run under the store's lock, so they may call back into the store. The
// store has no thread of its own: long-poll timeouts and result expiry run on the TimerQueue's
// thread, which must outlive the store.
#pragma once

#include <grpcpp/support/status.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <variant>

#include "cube3d/v1/mesh_service.pb.h"

namespace cube3d {

class TimerQueue;

struct JobStoreOptions {
  // How long an ended job is kept (jobs.result_ttl_s, in milliseconds so that tests can use a
  // few of them).
  int64_t result_ttl_ms = 600'000;
  // The results of SUCCEEDED jobs held, by ByteSizeLong(); beyond it the least recently finished
  // or fetched are evicted.
  int64_t max_result_bytes = int64_t{256} << 20;
  int64_t max_jobs_per_key = 64;  // open (QUEUED or RUNNING) jobs per owner
  // Records of all kinds. At the limit create() evicts the oldest finished job, and refuses when
  // every record is open.
  int64_t max_jobs = 100'000;
  int64_t max_wait_ms = 30'000;   // long-poll cap
  int64_t poll_after_ms = 1'000;  // the hint in QUEUED and RUNNING answers
  // Expired and evicted jobs remembered (id, owner, why, when) so that their NOT_FOUND says why;
  // beyond it the oldest are forgotten and answer as unknown.
  int64_t max_tombstones = 65'536;
};

class JobStore {
 public:
  // Throws invalid_argument for an option out of range (negative, or no room for one job).
  JobStore(JobStoreOptions options, TimerQueue& timers);
  // Answers pending long-polls (UNAVAILABLE "the server is shutting down"), cancels the store's
  // timers and waits for a timer action already past its start (one answering a long-poll), so
  // that no callback of the store runs after it returns. Does not run cancellers: the work's
  // owner stops the work. No other method may be called during or after it.
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  // A new QUEUED record for `owner` (an API key's name; "" when the server has no keys). Throws
  // resource_exhausted naming jobs.max_jobs_per_key or jobs.max_jobs when over. Returns the id:
  // 40 lowercase hex digits, the run's tag (8) then 128 random bits from getrandom(2).
  std::string create(const std::string& owner, const std::string& request_id);
  // How to cancel the job's work. When cancel() came before it, it runs at once (in this call,
  // without the lock); for a job that has ended or is unknown it is dropped.
  void set_canceller(const std::string& id, std::function<void()> cancel);
  // The last progress seen; QUEUED -> RUNNING once the stage is past STAGE_QUEUED. Ignored once
  // the job has ended.
  void progress(const std::string& id, const v1::Progress& progress);
  // The outcome: OK -> SUCCEEDED with the response; CANCELLED -> CANCELLED; anything else ->
  // FAILED; the last two with JobError{code, status name, message}. Starts the TTL, answers the
  // job's long-polls, evicts to stay within max_result_bytes. The first finish wins: a later one
  // (work that ended as it was cancelled) is ignored.
  void finish(const std::string& id, const grpc::Status& status, v1::GenerateMeshResponse response);
  // The submit was refused synchronously (invalid request, queue full): the record goes, as if
  // it had never been made.
  void discard(const std::string& id);

  // The job, or INVALID_ARGUMENT (an id that is not 40 lowercase hex digits), NOT_FOUND (with a
  // message that says why: unknown, another owner's, expired, evicted, of another server run)
  // or UNAVAILABLE (the store is shutting down).
  using Answer = std::variant<v1::MeshJob, grpc::Status>;

  // Answers at once, on the calling thread, when the job has ended, or `wait` is 0, or the job
  // cannot be found; else when it ends (on the thread that calls finish()) or when `wait`, capped
  // by max_wait_ms, passes (on the TimerQueue's thread). `done` runs exactly once, never under the
  // store's lock.
  void get(const std::string& id, const std::string& owner, std::chrono::milliseconds wait,
           std::function<void(Answer)> done);
  // An open job: runs its canceller (without the lock: the canceller may call finish()
  // re-entrantly) and answers the job as it then is (CANCELLED when the canceller finished it
  // synchronously, else still QUEUED or RUNNING). An ended job is answered unchanged.
  Answer cancel(const std::string& id, const std::string& owner);

  // Draining: every pending long-poll answers now with its job as it is, and later ones answer
  // at once (gRPC's shutdown waits for every call, a long-poll included). Jobs still end and
  // can still be read.
  void end_long_polls();

  struct Counts {
    int64_t queued = 0, running = 0, succeeded = 0, failed = 0, cancelled = 0;
    int64_t result_bytes = 0;  // of the SUCCEEDED results held
  };
  Counts counts() const;
  // Observer for metrics (gauges by state): called now and after each change, without the
  // store's lock, one call at a time, each with the counts as they are when it runs (so the last
  // call always tells the latest counts). It may read the store but must not change it.
  void on_counts(std::function<void(const Counts&)> observer);

 private:
  class State;
  // Shared with the timer actions, which hold it weakly: an action that runs after the store is
  // gone finds nothing to do.
  std::shared_ptr<State> state_;
};

}  // namespace cube3d
