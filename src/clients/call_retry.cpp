#include "cube3d/clients/call_retry.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "cube3d/core/error.h"

namespace cube3d {

bool should_retry(const RetryPolicy& policy, int attempt, grpc::StatusCode code,
                  bool reached_decoding, bool idempotent) {
  if (code != grpc::StatusCode::UNAVAILABLE) return false;
  if (attempt >= policy.max_attempts) return false;
  return !reached_decoding || idempotent;
}

std::chrono::milliseconds retry_backoff(const RetryPolicy& policy, int attempt,
                                        std::mt19937_64& rng) {
  const double step = static_cast<double>(policy.initial_backoff.count()) *
                      std::pow(policy.multiplier, std::max(0, attempt - 1));
  const double capped = std::min(step, static_cast<double>(policy.max_backoff.count()));
  std::uniform_real_distribution<double> upper_half(capped / 2, capped);
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(upper_half(rng))));
}

RetryPolicy retry_policy_with_attempts(int64_t max_attempts) {
  if (max_attempts < 1 || max_attempts > kMaxCallAttempts) {
    throw invalid_argument("--max-attempts " + std::to_string(max_attempts) + ": expected 1.." +
                           std::to_string(kMaxCallAttempts) + " (1: never try a call again)");
  }
  RetryPolicy policy;
  policy.max_attempts = static_cast<int>(max_attempts);
  return policy;
}

}  // namespace cube3d
