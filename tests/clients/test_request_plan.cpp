// Request i of a run: the template with prompt i mod the prompt count and seed base + i.
#include "cube3d/clients/request_plan.h"

#include <gtest/gtest.h>

#include "cube3d/core/error.h"

namespace cube3d {
namespace {

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

}  // namespace
}  // namespace cube3d
