// Request i of a run: the template with prompt i mod the prompt count and seed base + i; with
// a Zipf mix, the drawn prompt and a seed that follows it (a repeated prompt is an identical
// request), the same for the same index whatever the order of the calls.
#include "cube3d/clients/request_plan.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "cube3d/core/error.h"

namespace cube3d {
namespace test_request_plan {

TEST(RequestPlanTest, CyclesPromptsAndCountsSeeds) {
  RequestPlan plan;
  plan.request_template.set_resolution_base(4);
  plan.request_template.set_format(v1::MESH_FORMAT_OBJ);
  plan.prompts = {"a", "b", "c"};
  plan.base_seed = 100;
  for (const uint64_t i : {0u, 1u, 2u, 3u, 7u}) {
    const v1::GenerateMeshRequest r = plan.request(i);
    EXPECT_EQ(r.prompt(), plan.prompts[i % 3]) << i;
    EXPECT_EQ(r.seed(), 100 + i);
    EXPECT_EQ(r.resolution_base(), 4);
    EXPECT_EQ(r.format(), v1::MESH_FORMAT_OBJ);
  }
  // The template stays as it was.
  EXPECT_TRUE(plan.request_template.prompt().empty());
  EXPECT_FALSE(plan.request_template.has_seed());
}

TEST(RequestPlanTest, NoPromptsIsAnError) {
  const RequestPlan plan;
  EXPECT_THROW(plan.request(0), Error);
}

RequestPlan zipf_plan(uint64_t n, uint64_t mix_seed) {
  RequestPlan plan;
  plan.request_template.set_resolution_base(4);
  plan.request_template.set_bypass_cache(true);
  plan.prompts = zipf_prompts({"a crate", "a barrel"}, n);
  plan.base_seed = 100;
  plan.zipf.emplace(n, 1.0);
  plan.mix_seed = mix_seed;
  return plan;
}

TEST(RequestPlanTest, ZipfDrawsPromptsAndTiesTheSeedToThePrompt) {
  const RequestPlan plan = zipf_plan(5, 3);
  std::map<std::string, uint64_t> seed_of;
  std::map<std::string, int> count;
  for (uint64_t i = 0; i < 2000; ++i) {
    const v1::GenerateMeshRequest r = plan.request(i);
    const uint64_t k = plan.zipf->draw(3, i);
    EXPECT_EQ(plan.prompt_index(i), k - 1);
    ASSERT_EQ(r.prompt(), plan.prompts[k - 1]) << i;
    EXPECT_EQ(r.seed(), 100 + k - 1);
    EXPECT_EQ(r.resolution_base(), 4);
    EXPECT_TRUE(r.bypass_cache());
    // Every request with this prompt is the same request.
    const auto [it, first] = seed_of.emplace(r.prompt(), r.seed());
    if (!first) {
      EXPECT_EQ(it->second, r.seed());
    }
    ++count[r.prompt()];
  }
  EXPECT_EQ(count.size(), 5u);
  EXPECT_GT(count["a crate #1"], count["a barrel #2"]);  // the head of the law
  // Request i is the same request however often and in whichever order it is asked for.
  EXPECT_EQ(plan.request(1234).SerializeAsString(), plan.request(1234).SerializeAsString());
  EXPECT_EQ(zipf_plan(5, 3).request(77).prompt(), plan.request(77).prompt());
}

TEST(RequestPlanTest, ZipfOfOneSendsOneRequest) {
  const RequestPlan plan = zipf_plan(1, 9);
  const std::string first = plan.request(0).SerializeAsString();
  for (uint64_t i = 1; i < 100; ++i) EXPECT_EQ(plan.request(i).SerializeAsString(), first);
  EXPECT_EQ(plan.request(5).prompt(), "a crate #1");
  EXPECT_EQ(plan.request(5).seed(), 100u);
}

TEST(RequestPlanTest, ZipfNeedsOnePromptPerRank) {
  RequestPlan plan = zipf_plan(5, 1);
  plan.prompts.pop_back();
  EXPECT_THROW(plan.request(0), Error);
}

}  // namespace test_request_plan
}  // namespace cube3d
