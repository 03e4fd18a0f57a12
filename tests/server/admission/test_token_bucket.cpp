// The token bucket of every per-minute limit: refill, burst, debt, re-rating.
#include "cube3d/server/admission/token_bucket.h"

#include <gtest/gtest.h>

#include <chrono>

namespace cube3d {
namespace test_token_bucket {

using std::chrono::seconds;

TEST(TokenBucket, StartsFullAndRefillsUpToOneMinutesWorth) {
  const auto t0 = SteadyClock::now();
  TokenBucket bucket(120, t0);  // 2 a second
  EXPECT_DOUBLE_EQ(bucket.level(t0), 120);
  bucket.take(100, t0);
  EXPECT_DOUBLE_EQ(bucket.level(t0 + seconds(10)), 40);
  EXPECT_DOUBLE_EQ(bucket.level(t0 + seconds(3600)), 120) << "the burst caps the refill";
  EXPECT_TRUE(bucket.full(t0 + seconds(3600)));
}

TEST(TokenBucket, WaitSecondsRoundsUpAndCapsTheNeedAtTheBurst) {
  const auto t0 = SteadyClock::now();
  TokenBucket bucket(60, t0);  // 1 a second
  EXPECT_EQ(bucket.wait_seconds(60, t0), 0);
  bucket.take(60, t0);
  EXPECT_EQ(bucket.wait_seconds(0.5, t0), 1);
  EXPECT_EQ(bucket.wait_seconds(10, t0), 10);
  EXPECT_EQ(bucket.wait_seconds(1000, t0), 60) << "a need over the burst waits for a full bucket";
  EXPECT_EQ(bucket.wait_seconds(1000, t0 + seconds(60)), 0);
}

TEST(TokenBucket, DebtIsPaidOffByTheRefill) {
  const auto t0 = SteadyClock::now();
  TokenBucket bucket(60, t0);
  bucket.take(150, t0);  // 90 in debt
  EXPECT_DOUBLE_EQ(bucket.level(t0), -90);
  EXPECT_EQ(bucket.wait_seconds(0, t0), 90);
  EXPECT_FALSE(bucket.full(t0 + seconds(120)));
  EXPECT_TRUE(bucket.full(t0 + seconds(150)));
}

TEST(TokenBucket, ADeepDebtWaitsADayAtMost) {
  const auto t0 = SteadyClock::now();
  TokenBucket bucket(1e-3, t0);
  bucket.take(1e300, t0);
  EXPECT_EQ(bucket.wait_seconds(1, t0), 86400);
}

TEST(TokenBucket, AnEarlierClockReadAddsNothing) {
  const auto t0 = SteadyClock::now();
  TokenBucket bucket(60, t0);
  bucket.take(30, t0 + seconds(5));
  EXPECT_DOUBLE_EQ(bucket.level(t0), 30);
  EXPECT_DOUBLE_EQ(bucket.level(t0 + seconds(5)), 30);
}

TEST(TokenBucket, ANewRateKeepsTheLevelUnderTheNewBurst) {
  const auto t0 = SteadyClock::now();
  TokenBucket bucket(600, t0);
  bucket.take(100, t0);
  bucket.set_per_minute(60, t0);
  EXPECT_DOUBLE_EQ(bucket.level(t0), 60);
  EXPECT_DOUBLE_EQ(bucket.per_minute(), 60);
  bucket.set_per_minute(6000, t0);
  EXPECT_DOUBLE_EQ(bucket.level(t0), 60) << "a higher rate does not fill the bucket";
}

}  // namespace test_token_bucket
}  // namespace cube3d
