// The model's cumulative statistics in the shape of Triton's statistics extension (what
// GET /v2/models/{name}/stats and ModelStatistics answer, and what perf_analyzer reads for its
// server-side figures), kept by the service for every request whichever door it came by:
//
//   success / fail    requests answered / failed, and their time end to end
//   queue             time requests waited for a decode slot (counted for every success, as
//                     Triton does: a cache hit waits for nothing)
//   compute_input     text encoding and prefill;  compute_infer  the other tokens' decoding;
//   compute_output    the mesh (occupancy, marching cubes, clean-up, encoding)
//   cache_hit         requests answered from the result cache, and their time end to end
//   cache_miss        requests computed after a lookup missed (count only: the lookup's own time
//                     is not measured)
//   inference_count   prompts computed (coalesced ones included, cache hits not)
//   execution_count   computations run (identical requests coalesced share one)
//   batch stats       the compute figures by the batch bucket a computation ran in
//
// A request of several prompts (an Open Inference Protocol batch of B) is one request of B
// inferences, as Triton counts a batch: its prompts' calls are tallied in a Group and recorded as
// one success (or failure) when the last ends; inference_count, execution_count and the batch
// stats count each prompt's computation.
//
// Thread-safe: recorded on whichever thread ends a request, read by the doors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#include "cube3d/core/clock.h"

namespace cube3d {

class InferenceStatistics {
 public:
  struct Duration {
    uint64_t count = 0;
    uint64_t ns = 0;
    bool operator==(const Duration&) const = default;
  };
  struct Batch {
    Duration compute_input, compute_infer, compute_output;
    bool operator==(const Batch&) const = default;
  };
  struct Snapshot {
    uint64_t last_inference_ms = 0;  // since the epoch; 0 before the first
    uint64_t inference_count = 0;
    uint64_t execution_count = 0;
    Duration success, fail, queue, compute_input, compute_infer, compute_output, cache_hit,
        cache_miss;
    std::map<int64_t, Batch> batches;  // by batch bucket
  };

  // What a computed request took (milliseconds, as the service's timings are).
  struct Computed {
    double total_ms = 0;
    double queue_ms = 0;
    double input_ms = 0;   // text encoding + prefill
    double infer_ms = 0;   // decoding after the first token
    double output_ms = 0;  // meshing
    int64_t batch_bucket = 0;
    bool executed = false;    // this request's own computation (not coalesced onto another's)
    bool cache_miss = false;  // it was looked up in the cache first
  };
  // A request of its own (one prompt), by how it ended.
  void computed(const Computed& c);
  void cache_hit(double total_ms);
  void failed(double total_ms);

  // The prompts of one request, each a call of its own, counted as the request when every one
  // has ended (or will never be made): a failure when one failed or was not made; a cache hit when
  // every one was; else a success whose queue and compute times are the means of its computed
  // prompts', a cache miss when one of those missed. Its time is from the group's making to its
  // last call's end. Thread-safe; the statistics must outlive it.
  class Group {
   public:
    Group(InferenceStatistics& statistics, size_t calls);
    Group(const Group&) = delete;
    Group& operator=(const Group&) = delete;

    // One call's end, as the request-of-its-own methods above take it.
    void computed(const Computed& c);
    void cache_hit();
    void failed();
    // Calls that will never be made (the rest of a batch that failed while it was starting).
    void not_made(size_t calls);

   private:
    void ended_locked(size_t calls);  // records the request once every call has ended

    InferenceStatistics& statistics_;
    const SteadyClock::time_point start_;
    std::mutex mutex_;
    size_t left_;
    size_t computed_ = 0;
    size_t failed_ = 0;
    size_t not_made_ = 0;
    bool cache_miss_ = false;
    double queue_ms_ = 0, input_ms_ = 0, infer_ms_ = 0, output_ms_ = 0;  // sums over computed_
  };

  Snapshot snapshot() const;

 private:
  void stamp_locked();
  // A computed prompt's inference, its execution and batch figures (not its request's).
  void inference_locked(const Computed& c);
  // A computed request's success: its time, queue, compute and cache miss.
  void success_locked(const Computed& c);
  mutable std::mutex mutex_;
  Snapshot s_;
};

}  // namespace cube3d
