// The model's statistics in Triton's shape: what each kind of outcome adds, as Triton counts
// (queue counted for every success, compute only for what was computed, executions once per
// computation, batches by bucket).
#include "cube3d/server/observability/inference_statistics.h"

#include <gtest/gtest.h>

namespace cube3d {
namespace {

TEST(InferenceStatisticsTest, EachOutcomeAddsWhatTritonCounts) {
  InferenceStatistics stats;
  EXPECT_EQ(stats.snapshot().last_inference_ms, 0u);
  stats.computed({.total_ms = 100,
                  .queue_ms = 10,
                  .input_ms = 20,
                  .infer_ms = 50,
                  .output_ms = 15,
                  .batch_bucket = 4,
                  .executed = true,
                  .cache_miss = true});
  // Coalesced onto that computation: an inference, not an execution.
  stats.computed({.total_ms = 90,
                  .queue_ms = 5,
                  .input_ms = 20,
                  .infer_ms = 50,
                  .output_ms = 15,
                  .batch_bucket = 4,
                  .executed = false,
                  .cache_miss = false});
  stats.cache_hit(0.25);
  stats.failed(7);
  const InferenceStatistics::Snapshot s = stats.snapshot();
  EXPECT_GT(s.last_inference_ms, 0u);
  EXPECT_EQ(s.inference_count, 2u);
  EXPECT_EQ(s.execution_count, 1u);
  EXPECT_EQ(s.success, (InferenceStatistics::Duration{3, 190'250'000}));
  EXPECT_EQ(s.fail, (InferenceStatistics::Duration{1, 7'000'000}));
  EXPECT_EQ(s.queue, (InferenceStatistics::Duration{3, 15'000'000}));  // a hit waited 0
  EXPECT_EQ(s.compute_infer, (InferenceStatistics::Duration{2, 100'000'000}));
  EXPECT_EQ(s.cache_hit, (InferenceStatistics::Duration{1, 250'000}));
  EXPECT_EQ(s.cache_miss.count, 1u);
  ASSERT_EQ(s.batches.size(), 1u);
  EXPECT_EQ(s.batches.at(4).compute_output, (InferenceStatistics::Duration{1, 15'000'000}));
}

}  // namespace
}  // namespace cube3d
