#include "cube3d/tools/batch_shard.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "cube3d/core/error.h"
#include "expect_error.h"

namespace cube3d {
namespace test_batch_shard {

using Opt = std::optional<std::string>;

BatchShard resolve(Opt shard, Opt count = {}, Opt job = {}, Opt env_count = {}) {
  return resolve_batch_shard(shard, count, job, env_count);
}

void expect_refused(const Opt& shard, const Opt& count, const Opt& job, const Opt& env_count,
                    const std::string& needle) {
  cube3d::testing::expect_error([&] { resolve(shard, count, job, env_count); },
                                ErrorCode::kInvalidArgument, needle);
}

TEST(BatchShardTest, LinesGoRoundRobinCountingFromOne) {
  const BatchShard shard{1, 3};
  EXPECT_FALSE(shard.owns(1));
  EXPECT_TRUE(shard.owns(2));
  EXPECT_FALSE(shard.owns(3));
  EXPECT_TRUE(shard.owns(5));
  EXPECT_EQ(shard.name(), "1/3");
  const BatchShard all{0, 1};
  for (int64_t line = 1; line < 10; ++line) EXPECT_TRUE(all.owns(line));
}

TEST(BatchShardTest, ParsesIOverN) {
  EXPECT_EQ(parse_batch_shard("0/1"), (BatchShard{0, 1}));
  EXPECT_EQ(parse_batch_shard("7/8"), (BatchShard{7, 8}));
  for (const char* bad : {"", "1", "/", "1/", "/2", "2/2", "3/2", "-1/2", "a/b", "1/0", "0/2x",
                          " 0/2", "0/99999999"}) {
    EXPECT_THROW(parse_batch_shard(bad), Error) << bad;
  }
}

TEST(BatchShardTest, FlagBeatsTheIndexedJobsEnvironment) {
  EXPECT_EQ(resolve("1/4", {}, "3", "9"), (BatchShard{1, 4}));
  EXPECT_EQ(resolve("1/4", "4"), (BatchShard{1, 4}));
  expect_refused("1/4", "5", {}, {}, "--shard-count");
}

TEST(BatchShardTest, JobCompletionIndexWithACount) {
  EXPECT_EQ(resolve({}, {}, "2", "3"), (BatchShard{2, 3}));
  EXPECT_EQ(resolve({}, "5", "2", "3"), (BatchShard{2, 5}));  // the flag beats the variable
  expect_refused({}, {}, "2", {}, "CUBE3D_SHARD_COUNT");
  expect_refused({}, {}, "3", "3", "JOB_COMPLETION_INDEX");
  expect_refused({}, {}, "x", "3", "JOB_COMPLETION_INDEX");
  expect_refused({}, "0", "0", {}, "--shard-count");
  expect_refused({}, {}, "0", "zero", "CUBE3D_SHARD_COUNT");
}

TEST(BatchShardTest, NothingGivenIsTheWholeFile) {
  EXPECT_EQ(resolve({}), (BatchShard{0, 1}));
  EXPECT_EQ(resolve("", "", "", ""), (BatchShard{0, 1}));  // empty = unset
  EXPECT_EQ(resolve({}, {}, {}, "1"), (BatchShard{0, 1}));
  expect_refused({}, "2", {}, {}, "--shard-count");
  expect_refused({}, {}, {}, "4", "JOB_COMPLETION_INDEX");
}

}  // namespace test_batch_shard
}  // namespace cube3d
