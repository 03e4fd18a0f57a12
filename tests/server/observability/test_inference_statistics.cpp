// The model's statistics in Triton's shape: what each kind of outcome adds, as Triton counts
// (queue counted for every success, compute only for what was computed, executions once per
// computation, batches by bucket), and a request of several prompts counted as one request of
// as many inferences.
#include "cube3d/server/observability/inference_statistics.h"

#include <gtest/gtest.h>

#include <memory>

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

InferenceStatistics::Computed prompt(double queue_ms, double infer_ms, bool executed = true,
                                     bool cache_miss = false) {
  return {.total_ms = 1'000,
          .queue_ms = queue_ms,
          .input_ms = 2,
          .infer_ms = infer_ms,
          .output_ms = 4,
          .batch_bucket = 2,
          .executed = executed,
          .cache_miss = cache_miss};
}

TEST(InferenceStatisticsTest, ABatchOfPromptsIsOneRequestOfAsManyInferences) {
  InferenceStatistics stats;
  auto group = std::make_shared<InferenceStatistics::Group>(stats, 3);
  group->computed(prompt(10, 40, true, true));
  group->computed(prompt(30, 60, false));  // coalesced: an inference, not an execution
  // Each prompt's inference counts as it ends; the request only when the last one does.
  EXPECT_EQ(stats.snapshot().inference_count, 2u);
  EXPECT_EQ(stats.snapshot().success.count, 0u);
  group->cache_hit();
  const InferenceStatistics::Snapshot s = stats.snapshot();
  EXPECT_EQ(s.success.count, 1u);
  EXPECT_EQ(s.fail.count, 0u);
  EXPECT_EQ(s.inference_count, 2u);
  EXPECT_EQ(s.execution_count, 1u);
  EXPECT_EQ(s.batches.at(2).compute_infer, (InferenceStatistics::Duration{1, 40'000'000}));
  // The request's queue and compute: the means of its computed prompts'.
  EXPECT_EQ(s.queue, (InferenceStatistics::Duration{1, 20'000'000}));
  EXPECT_EQ(s.compute_infer, (InferenceStatistics::Duration{1, 50'000'000}));
  EXPECT_EQ(s.compute_output, (InferenceStatistics::Duration{1, 4'000'000}));
  EXPECT_EQ(s.cache_miss.count, 1u);
  EXPECT_EQ(s.cache_hit.count, 0u);  // one prompt of three was a hit: not the request
  // Its time runs from the group's making to its last call's end (well under the prompts' own
  // 1 s each, which the request does not add up).
  EXPECT_LT(s.success.ns, 1'000'000'000u);
}

TEST(InferenceStatisticsTest, ABatchOfHitsIsOneCacheHit) {
  InferenceStatistics stats;
  auto group = std::make_shared<InferenceStatistics::Group>(stats, 2);
  group->cache_hit();
  group->cache_hit();
  const InferenceStatistics::Snapshot s = stats.snapshot();
  EXPECT_EQ(s.success.count, 1u);
  EXPECT_EQ(s.cache_hit.count, 1u);
  EXPECT_EQ(s.queue.count, 1u);  // waited for nothing, as a lone hit
  EXPECT_EQ(s.inference_count, 0u);
  EXPECT_EQ(s.compute_infer.count, 0u);
}

TEST(InferenceStatisticsTest, ABatchWithAFailedOrUnaskedPromptIsOneFailure) {
  InferenceStatistics stats;
  auto failed = std::make_shared<InferenceStatistics::Group>(stats, 3);
  failed->computed(prompt(10, 40));
  failed->failed();
  failed->failed();  // cancelled by the first failure
  auto unasked = std::make_shared<InferenceStatistics::Group>(stats, 3);
  unasked->not_made(3);  // cancelled before its first prompt was asked
  const InferenceStatistics::Snapshot s = stats.snapshot();
  EXPECT_EQ(s.fail.count, 2u);
  EXPECT_EQ(s.success.count, 0u);
  EXPECT_EQ(s.cache_hit.count, 0u);
  EXPECT_EQ(s.inference_count, 1u);  // the prompt computed before the failure was an inference
  // Ends past the group's calls count nothing more.
  unasked->failed();
  EXPECT_EQ(stats.snapshot().fail.count, 2u);
}

}  // namespace
}  // namespace cube3d
