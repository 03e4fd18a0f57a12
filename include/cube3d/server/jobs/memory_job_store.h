// The memory job store (jobs.store: memory, the default): the records of job_store.h in this
// process. Jobs live in memory only: they do not survive a restart, and each replica keeps its own
// (ids carry the run's tag, so that a job of another run gets a NOT_FOUND that says so).
//
// Every method may be called from any thread. The callbacks (get's `done`, the canceller, the
// counts observer) never run under the store's lock, so they may call back into the store. The
// store has no thread of its own: long-poll timeouts and result expiry run on the TimerQueue's
// thread, which must outlive the store. Every answer but a long-poll's comes inline.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <variant>

#include "cube3d/core/status.h"
#include "cube3d/server/jobs/job_store.h"
#include "cube3d/v1/mesh_service.pb.h"

namespace cube3d {

class TimerQueue;

class MemoryJobStore final : public JobStore {
 public:
  // Throws invalid_argument for an option out of range (negative, or no room for one job).
  MemoryJobStore(JobStoreOptions options, TimerQueue& timers);
  // Answers pending long-polls (UNAVAILABLE "the server is shutting down"), cancels the store's
  // timers and waits for a timer action already past its start (one answering a long-poll), so
  // that no callback of the store runs after it returns. Does not run cancellers: the work's
  // owner stops the work. No other method may be called during or after it.
  ~MemoryJobStore() override;
  MemoryJobStore(const MemoryJobStore&) = delete;
  MemoryJobStore& operator=(const MemoryJobStore&) = delete;

  // JobStore: create() and cancel() answer inline (the create's refusal as its Status).
  void create(NewJob job, std::function<void(Created)> done) override;
  void set_canceller(const std::string& id, std::function<void()> cancel) override;
  void progress(const std::string& id, const v1::Progress& progress) override;
  void finish(const std::string& id, const Status& status,
              v1::GenerateMeshResponse response) override;
  void discard(const std::string& id) override;
  // Answers at once, on the calling thread, when the job has ended, or `wait` is 0, or the job
  // cannot be found; else when it ends (on the thread that calls finish()) or when `wait`, capped
  // by max_wait_ms, passes (on the TimerQueue's thread).
  void get(const std::string& id, const std::string& owner, std::chrono::milliseconds wait,
           std::function<void(Answer)> done) override;
  // Runs an open job's canceller (without the lock: the canceller may call finish()
  // re-entrantly), then answers.
  void cancel(const std::string& id, const std::string& owner,
              std::function<void(Answer)> done) override;
  void end_long_polls() override;
  Counts counts() const override;
  void on_counts(std::function<void(const Counts&)> observer) override;

  // The same, synchronously (they never wait here). create() throws resource_exhausted naming
  // jobs.max_jobs_per_key or jobs.max_jobs when over, unavailable when shutting down, and
  // returns the id: the run's tag (8) then 128 random bits.
  std::string create(const std::string& owner, const std::string& request_id);
  Answer cancel(const std::string& id, const std::string& owner);

 private:
  class State;
  // Shared with the timer actions, which hold it weakly: an action that runs after the store is
  // gone finds nothing to do.
  std::shared_ptr<State> state_;
};

}  // namespace cube3d
