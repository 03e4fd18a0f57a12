#include "cube3d/server/observability/inference_statistics.h"

#include <chrono>
#include <cmath>

namespace cube3d {
namespace {

void add(InferenceStatistics::Duration& d, double ms) {
  ++d.count;
  d.ns += ms > 0 ? static_cast<uint64_t>(std::llround(ms * 1e6)) : 0;
}

}  // namespace

void InferenceStatistics::stamp_locked() {
  s_.last_inference_ms =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
}

void InferenceStatistics::computed(const Computed& c) {
  const std::lock_guard lock(mutex_);
  stamp_locked();
  ++s_.inference_count;
  add(s_.success, c.total_ms);
  add(s_.queue, c.queue_ms);
  add(s_.compute_input, c.input_ms);
  add(s_.compute_infer, c.infer_ms);
  add(s_.compute_output, c.output_ms);
  if (c.cache_miss) ++s_.cache_miss.count;
  if (c.executed) {
    ++s_.execution_count;
    Batch& b = s_.batches[c.batch_bucket];
    add(b.compute_input, c.input_ms);
    add(b.compute_infer, c.infer_ms);
    add(b.compute_output, c.output_ms);
  }
}

void InferenceStatistics::cache_hit(double total_ms) {
  const std::lock_guard lock(mutex_);
  stamp_locked();
  add(s_.success, total_ms);
  // As Triton counts it: every successful request has waited (a hit, for nothing), so that
  // queue's count is the successes' (what perf_analyzer watches for the model's activity).
  add(s_.queue, 0);
  add(s_.cache_hit, total_ms);
}

void InferenceStatistics::failed(double total_ms) {
  const std::lock_guard lock(mutex_);
  stamp_locked();
  add(s_.fail, total_ms);
}

InferenceStatistics::Snapshot InferenceStatistics::snapshot() const {
  const std::lock_guard lock(mutex_);
  return s_;
}

}  // namespace cube3d
