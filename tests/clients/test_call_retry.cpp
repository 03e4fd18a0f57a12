// When a call is tried again, and the wait before it.
#include "cube3d/clients/call_retry.h"

#include <gtest/gtest.h>

#include "cube3d/core/error.h"
#include "expect_error.h"

namespace cube3d {
namespace test_call_retry {

using grpc::StatusCode;

TEST(CallRetry, OnlyUnavailableWithinTheAttemptsAndPastDecodingOnlyWhenIdempotent) {
  const RetryPolicy policy;  // 5 attempts
  EXPECT_TRUE(should_retry(policy, 1, StatusCode::UNAVAILABLE, false, false));
  EXPECT_TRUE(should_retry(policy, 4, StatusCode::UNAVAILABLE, false, false));
  EXPECT_FALSE(should_retry(policy, 5, StatusCode::UNAVAILABLE, false, false));
  for (const StatusCode code :
       {StatusCode::OK, StatusCode::DEADLINE_EXCEEDED, StatusCode::RESOURCE_EXHAUSTED,
        StatusCode::INTERNAL, StatusCode::INVALID_ARGUMENT, StatusCode::CANCELLED}) {
    EXPECT_FALSE(should_retry(policy, 1, code, false, true)) << code;
  }
  EXPECT_FALSE(should_retry(policy, 1, StatusCode::UNAVAILABLE, true, false));
  EXPECT_TRUE(should_retry(policy, 1, StatusCode::UNAVAILABLE, true, true));
}

TEST(CallRetry, TheBackoffGrowsToItsCapWithItsUpperHalfDrawn) {
  RetryPolicy policy;
  policy.initial_backoff = std::chrono::milliseconds(100);
  policy.max_backoff = std::chrono::milliseconds(1000);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200; ++i) {
    const auto first = retry_backoff(policy, 1, rng).count();
    EXPECT_GE(first, 50);
    EXPECT_LE(first, 100);
    const auto third = retry_backoff(policy, 3, rng).count();
    EXPECT_GE(third, 200);
    EXPECT_LE(third, 400);
    const auto late = retry_backoff(policy, 9, rng).count();
    EXPECT_GE(late, 500);
    EXPECT_LE(late, 1000);
  }
}

TEST(CallRetry, MaxAttemptsIsOneToTen) {
  EXPECT_EQ(retry_policy_with_attempts(1).max_attempts, 1);
  EXPECT_EQ(retry_policy_with_attempts(10).max_attempts, 10);
  testing::expect_error([&] { (void)retry_policy_with_attempts(0); }, ErrorCode::kInvalidArgument,
                        "--max-attempts 0: expected 1..10");
  testing::expect_error([&] { (void)retry_policy_with_attempts(11); }, ErrorCode::kInvalidArgument,
                        "--max-attempts 11");
}

}  // namespace test_call_retry
}  // namespace cube3d
