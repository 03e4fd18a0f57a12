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
//   inference_count   requests computed (coalesced ones included, cache hits not)
//   execution_count   computations run (identical requests coalesced share one)
//   batch stats       the compute figures by the batch bucket a computation ran in
//
// Thread-safe: recorded on whichever thread ends a request, read by the doors.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>

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
  void computed(const Computed& c);
  void cache_hit(double total_ms);
  void failed(double total_ms);

  Snapshot snapshot() const;

 private:
  void stamp_locked();
  mutable std::mutex mutex_;
  Snapshot s_;
};

}  // namespace cube3d
