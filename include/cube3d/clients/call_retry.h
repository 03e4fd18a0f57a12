// When the gRPC clients try a call again, and how long they wait first. A replica that dies
// (a SIGKILL, an eviction, a device fault that restarts it) fails its calls in flight with
// UNAVAILABLE, and calls it was about to get are refused the same way; another replica can
// answer them. Only UNAVAILABLE is tried again (every other code is the answer: a bad request,
// a quota, a deadline), within the call's own deadline and a bounded number of attempts.
//
// A call that already reached decoding is tried again only when it is idempotent by its
// request_id: generation is deterministic in the request, and a server still running the first
// attempt joins the retry to it (same id, same key) instead of computing twice. The clients
// therefore always send a request_id (cube3d-loadgen makes one per request).
#pragma once

#include <chrono>
#include <cstdint>
#include <random>

#include <grpcpp/support/status.h>

namespace cube3d {

// The most attempts a caller may ask for (--max-attempts): past it a dead replica's callers would
// keep coming back long after another replica should have answered them.
inline constexpr int kMaxCallAttempts = 10;

struct RetryPolicy {
  int max_attempts = 5;  // the first attempt included; 1: never again
  std::chrono::milliseconds initial_backoff{100};
  std::chrono::milliseconds max_backoff{2000};
  double multiplier = 2.0;
};

// Whether an attempt that ended with `code` (its `attempt`, from 1) is tried again.
bool should_retry(const RetryPolicy& policy, int attempt, grpc::StatusCode code,
                  bool reached_decoding, bool idempotent);

// The wait before attempt `attempt` + 1: the exponential step capped at max_backoff, with its
// upper half drawn at random (so that callers of a dead replica do not come back in step).
std::chrono::milliseconds retry_backoff(const RetryPolicy& policy, int attempt,
                                        std::mt19937_64& rng);

// --max-attempts: 1..kMaxCallAttempts; throws invalid_argument naming the flag otherwise.
RetryPolicy retry_policy_with_attempts(int64_t max_attempts);

}  // namespace cube3d
