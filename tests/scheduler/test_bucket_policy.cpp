// The bucket rule and the config checks: pure functions, no threads.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/scheduler/bucket_policy.h"
#include "cube3d/scheduler/scheduler.h"
#include "scheduler_test_support.h"

namespace cube3d {
namespace test_bucket_policy {

ErrorCode code_of_validation(const std::vector<int64_t>& buckets, std::string* message) {
  try {
    validate_batch_buckets(buckets);
  } catch (const Error& e) {
    *message = e.what();
    return e.code();
  }
  return ErrorCode::kInternal;  // nothing thrown: no test expects kInternal
}

TEST(BucketPolicy, ChoosesTheSmallestBucketThatHoldsTheWaitingRequests) {
  const std::vector<int64_t> buckets{1, 2, 4, 8};
  // waiting -> bucket; above 8 the largest bucket is used and the rest wait.
  const std::vector<std::pair<int64_t, int64_t>> table{{1, 1}, {2, 2}, {3, 4}, {4, 4}, {5, 8},
                                                       {6, 8}, {7, 8}, {8, 8}, {9, 8}, {10, 8}};
  for (const auto& [waiting, expected] : table) {
    EXPECT_EQ(choose_bucket(waiting, buckets), expected) << "waiting=" << waiting;
  }
}

TEST(BucketPolicy, SingleBucketIsAlwaysChosen) {
  const std::vector<int64_t> buckets{4};
  for (int64_t waiting = 1; waiting <= 6; ++waiting) {
    EXPECT_EQ(choose_bucket(waiting, buckets), 4) << "waiting=" << waiting;
  }
}

TEST(BucketPolicy, OrderOfTheBucketListDoesNotMatter) {
  const std::vector<int64_t> unsorted{8, 1, 4, 2};
  EXPECT_EQ(choose_bucket(1, unsorted), 1);
  EXPECT_EQ(choose_bucket(3, unsorted), 4);
  EXPECT_EQ(choose_bucket(5, unsorted), 8);
  EXPECT_EQ(choose_bucket(100, unsorted), 8);
}

TEST(BucketPolicy, RejectsNoWaitingRequestsOrNoBuckets) {
  const std::vector<int64_t> buckets{1, 2};
  EXPECT_THROW(choose_bucket(0, buckets), Error);
  EXPECT_THROW(choose_bucket(-3, buckets), Error);
  EXPECT_THROW(choose_bucket(1, std::vector<int64_t>{}), Error);
}

TEST(BucketPolicy, ValidationAcceptsStrictlyIncreasingSizesUpToTheLimit) {
  EXPECT_NO_THROW(validate_batch_buckets(std::vector<int64_t>{1, 2, 4, 8}));
  EXPECT_NO_THROW(validate_batch_buckets(std::vector<int64_t>{1}));
  EXPECT_NO_THROW(validate_batch_buckets(std::vector<int64_t>{3, kMaxBatchBucket}));
}

TEST(BucketPolicy, ValidationRejectsEmptyOutOfRangeUnsortedAndDuplicateSizes) {
  const std::vector<std::vector<int64_t>> bad{{},     {0},       {-1, 2}, {1, kMaxBatchBucket + 1},
                                              {4, 2}, {1, 8, 4}, {2, 2}};
  for (const auto& buckets : bad) {
    std::string message;
    EXPECT_EQ(code_of_validation(buckets, &message), ErrorCode::kInvalidArgument)
        << "accepted " << buckets.size() << " buckets";
    EXPECT_NE(message.find("batch_buckets"), std::string::npos) << message;
  }
}

TEST(BucketPolicy, SchedulerConfigValidationNamesTheField) {
  const SchedulerConfig defaults;
  EXPECT_NO_THROW(validate_scheduler_config(defaults));

  SchedulerConfig config;
  config.max_queue_delay_ms = -1;
  test::expect_config_rejected(config, "max_queue_delay_ms");
  config.max_queue_delay_ms = kMaxQueueDelayMs + 1;
  test::expect_config_rejected(config, "max_queue_delay_ms");
  config = SchedulerConfig{};
  config.max_queue_size = 0;
  test::expect_config_rejected(config, "max_queue_size");
  config = SchedulerConfig{};
  config.batch_buckets = {2, 1};
  test::expect_config_rejected(config, "batch_buckets");
  config = SchedulerConfig{};
  config.max_joins_per_step = 0;
  test::expect_config_rejected(config, "max_joins_per_step");
  config.max_joins_per_step = kMaxBatchBucket + 1;
  test::expect_config_rejected(config, "max_joins_per_step");
}

TEST(BucketPolicy, MaxJoinsPerStepAcceptsOneUpToTheBucketLimit) {
  SchedulerConfig config;
  for (const int64_t joins : {int64_t{1}, int64_t{2}, kMaxBatchBucket}) {
    config.max_joins_per_step = joins;
    EXPECT_NO_THROW(validate_scheduler_config(config)) << joins;
  }
}

TEST(BucketPolicy, BatchingModeDefaultsToContinuousAndRoundTripsThroughItsName) {
  EXPECT_EQ(SchedulerConfig{}.mode, BatchingMode::kContinuous);
  for (const auto mode : {BatchingMode::kContinuous, BatchingMode::kStatic}) {
    EXPECT_EQ(parse_batching_mode(to_string(mode), "batching.mode"), mode) << to_string(mode);
  }
  EXPECT_STREQ(to_string(BatchingMode::kContinuous), "continuous");
  EXPECT_STREQ(to_string(BatchingMode::kStatic), "static");
}

TEST(BucketPolicy, UnknownBatchingModeNamesTheFieldAndTheChoices) {
  for (const std::string text : {"", "Static", "dynamic", "continuous "}) {
    try {
      parse_batching_mode(text, "batching.mode");
      ADD_FAILURE() << "accepted '" << text << "'";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(message.find("batching.mode"), std::string::npos) << message;
      EXPECT_NE(message.find("continuous"), std::string::npos) << message;
      EXPECT_NE(message.find("static"), std::string::npos) << message;
    }
  }
}

}  // namespace test_bucket_policy
}  // namespace cube3d
