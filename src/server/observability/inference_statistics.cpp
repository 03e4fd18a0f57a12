#include "cube3d/server/observability/inference_statistics.h"

#include <algorithm>
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

void InferenceStatistics::inference_locked(const Computed& c) {
  ++s_.inference_count;
  if (c.executed) {
    ++s_.execution_count;
    Batch& b = s_.batches[c.batch_bucket];
    add(b.compute_input, c.input_ms);
    add(b.compute_infer, c.infer_ms);
    add(b.compute_output, c.output_ms);
  }
}

void InferenceStatistics::success_locked(const Computed& c) {
  add(s_.success, c.total_ms);
  add(s_.queue, c.queue_ms);
  add(s_.compute_input, c.input_ms);
  add(s_.compute_infer, c.infer_ms);
  add(s_.compute_output, c.output_ms);
  if (c.cache_miss) ++s_.cache_miss.count;
}

void InferenceStatistics::computed(const Computed& c) {
  const std::lock_guard lock(mutex_);
  stamp_locked();
  inference_locked(c);
  success_locked(c);
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

InferenceStatistics::Group::Group(InferenceStatistics& statistics, size_t calls)
    : statistics_(statistics), start_(SteadyClock::now()), left_(calls) {}

void InferenceStatistics::Group::computed(const Computed& c) {
  {
    // The prompt's inference counts now, as it ends; its request when the last one does.
    const std::lock_guard lock(statistics_.mutex_);
    statistics_.stamp_locked();
    statistics_.inference_locked(c);
  }
  const std::lock_guard lock(mutex_);
  ++computed_;
  cache_miss_ = cache_miss_ || c.cache_miss;
  queue_ms_ += c.queue_ms;
  input_ms_ += c.input_ms;
  infer_ms_ += c.infer_ms;
  output_ms_ += c.output_ms;
  ended_locked(1);
}

void InferenceStatistics::Group::cache_hit() {
  const std::lock_guard lock(mutex_);
  ended_locked(1);
}

void InferenceStatistics::Group::failed() {
  const std::lock_guard lock(mutex_);
  ++failed_;
  ended_locked(1);
}

void InferenceStatistics::Group::not_made(size_t calls) {
  const std::lock_guard lock(mutex_);
  not_made_ += calls;
  ended_locked(calls);
}

void InferenceStatistics::Group::ended_locked(size_t calls) {
  if (calls == 0 || left_ == 0) return;
  left_ -= std::min(calls, left_);
  if (left_ > 0) return;
  const double total_ms = ms_between(start_, SteadyClock::now());
  // A prompt that failed, or was never asked, fails the request (its answer is that error).
  if (failed_ > 0 || not_made_ > 0) {
    statistics_.failed(total_ms);
  } else if (computed_ == 0) {
    statistics_.cache_hit(total_ms);
  } else {
    const auto n = static_cast<double>(computed_);
    const std::lock_guard lock(statistics_.mutex_);
    statistics_.stamp_locked();
    statistics_.success_locked({.total_ms = total_ms,
                                .queue_ms = queue_ms_ / n,
                                .input_ms = input_ms_ / n,
                                .infer_ms = infer_ms_ / n,
                                .output_ms = output_ms_ / n,
                                .cache_miss = cache_miss_});
  }
}

InferenceStatistics::Snapshot InferenceStatistics::snapshot() const {
  const std::lock_guard lock(mutex_);
  return s_;
}

}  // namespace cube3d
