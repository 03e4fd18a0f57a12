#include "cube3d/server/admission/token_bucket.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace cube3d {
namespace {

constexpr double kMaxWaitSeconds = 86400;

}  // namespace

TokenBucket::TokenBucket(double per_minute, SteadyClock::time_point now)
    : per_minute_(per_minute), level_(per_minute), refilled_(now) {}

double TokenBucket::refilled_level(SteadyClock::time_point now) const {
  // A clock read before the last refill (another thread's `now`) adds nothing.
  const double elapsed = std::chrono::duration<double>(now - refilled_).count();
  if (elapsed <= 0) return level_;
  return std::min(per_minute_, level_ + elapsed * per_minute_ / 60.0);
}

void TokenBucket::refill(SteadyClock::time_point now) {
  if (now <= refilled_) return;
  level_ = refilled_level(now);
  refilled_ = now;
}

double TokenBucket::level(SteadyClock::time_point now) {
  refill(now);
  return level_;
}

int64_t TokenBucket::wait_seconds(double need, SteadyClock::time_point now) {
  refill(now);
  const double wanted = std::min(need, per_minute_);
  if (level_ >= wanted) return 0;
  // Capped at a day: a deep debt at a low rate says "much later" without overflowing.
  const double seconds = std::min((wanted - level_) * 60.0 / per_minute_, kMaxWaitSeconds);
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(seconds)));
}

void TokenBucket::take(double amount, SteadyClock::time_point now) {
  refill(now);
  level_ -= amount;
}

void TokenBucket::set_per_minute(double per_minute, SteadyClock::time_point now) {
  refill(now);
  per_minute_ = per_minute;
  level_ = std::min(level_, per_minute_);
}

}  // namespace cube3d
