// One unit of the scheduler's work: what it schedules by (TaskTicket), an opaque payload that
// only the executor reads, its deadline and cancellation flag, and the callbacks that report
// progress and deliver exactly one outcome. Free of gRPC and libtorch, and of any request's
// shape, so that the scheduler builds and tests fast with a fake executor.
#pragma once

#include <any>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "cube3d/core/clock.h"
#include "cube3d/core/error.h"

namespace cube3d {

// Interactive work (a player waiting in a game) is admitted before batch work (a studio's
// overnight catalog); batch work that has waited SchedulerConfig::batch_max_wait_ms is admitted
// as if it were interactive, so that it cannot starve.
enum class TaskPriority { kInteractive, kBatch };
const char* to_string(TaskPriority priority);

// What the scheduler schedules a task by: its id (for logs), its client and end user (whose
// turns it keeps fair) and its priority. The rest of a request is the task's payload, which the
// scheduler never reads (the server's is server/work/work_request.h).
struct TaskTicket {
  std::string request_id;
  // Who asked (the API key's name; empty without API keys): the scheduler takes waiting tasks
  // from each client in turn, so one client's flood delays the others by at most its share.
  std::string client;
  // The end user the client asks for (a player behind a game server's key), as a pseudonym
  // (never the id the client sent); empty for none. Within a client the scheduler takes
  // waiting tasks from each end user in turn, as it does across clients.
  std::string end_user;
  TaskPriority priority = TaskPriority::kInteractive;
};

enum class TaskStage { kQueued, kTextEncoding, kDecoding, kMeshing, kDone };

struct TaskProgress {
  TaskStage stage = TaskStage::kQueued;
  int64_t tokens_done = 0;
  int64_t tokens_total = 0;
  // kMeshing: occupancy points evaluated / planned so far, refinement levels done / in all.
  int64_t points_done = 0;
  int64_t points_planned = 0;
  int64_t levels_done = 0;
  int64_t levels_total = 0;
};

class Task {
 public:
  using ProgressFn = std::function<void(const TaskProgress&)>;
  // The executor's result (the payload's answer, passed on unread), or the error.
  using DoneFn = std::function<void(const std::any* result, const Error*)>;

  Task(TaskTicket ticket, std::any payload, SteadyClock::time_point deadline,
       ProgressFn on_progress, DoneFn on_done)
      : ticket_(std::move(ticket)),
        payload_(std::move(payload)),
        enqueued_(SteadyClock::now()),
        deadline_(deadline.time_since_epoch().count()),
        on_progress_(std::move(on_progress)),
        on_done_(std::move(on_done)) {}

  const TaskTicket& ticket() const { return ticket_; }
  // The work itself, as its submitter made it: `T` is the payload's type (the executor's to
  // know); another type throws std::bad_any_cast.
  template <class T>
  const T& payload() const {
    return std::any_cast<const T&>(payload_);
  }
  SteadyClock::time_point enqueued() const { return enqueued_; }
  SteadyClock::time_point deadline() const {
    return SteadyClock::time_point(SteadyClock::duration(deadline_.load()));
  }
  bool expired(SteadyClock::time_point now = SteadyClock::now()) const { return now >= deadline(); }
  // A task shared by several callers (identical requests coalesced) lives as long as the
  // latest of their deadlines: a caller that joins later with more time moves it out.
  void extend_deadline(SteadyClock::time_point deadline) {
    const SteadyClock::rep wanted = deadline.time_since_epoch().count();
    SteadyClock::rep now = deadline_.load();
    while (now < wanted && !deadline_.compare_exchange_weak(now, wanted)) {
    }
  }

  // The client went away (or the server is shutting down): its work is dropped.
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }
  bool finished() const { return finished_.load(); }

  void progress(const TaskProgress& p) const {
    if (on_progress_ && !finished_.load()) on_progress_(p);
  }
  // Exactly one of these delivers the outcome; later calls are ignored (so a task that is both
  // cancelled and completed by a racing path reports once).
  void succeed(std::any result) { deliver(&result, nullptr); }
  void fail(const Error& error) { deliver(nullptr, &error); }

 private:
  void deliver(const std::any* result, const Error* error) {
    bool expected = false;
    if (!finished_.compare_exchange_strong(expected, true)) return;
    if (on_done_) on_done_(result, error);
  }

  TaskTicket ticket_;
  std::any payload_;
  SteadyClock::time_point enqueued_;
  std::atomic<SteadyClock::rep> deadline_;
  ProgressFn on_progress_;
  DoneFn on_done_;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> finished_{false};
};

}  // namespace cube3d
