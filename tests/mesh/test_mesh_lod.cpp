#include <gtest/gtest.h>

#include <vector>

#include "cube3d/mesh/mesh_frame.h"
#include "cube3d/mesh/mesh_pipeline.h"
#include "cube3d/mesh/mesh_stats.h"
#include "expect_error.h"
#include "mesh_test_util.h"

namespace cube3d {
namespace test_mesh_lod {

Mesh sphere_mesh() {
  const auto grid = test::sample_resolution(
      7, [](double x, double y, double z) { return test::sphere(x, y, z, 0.0, 0.8); });
  MeshPipelineOptions options;
  options.simplification.target_faces = 20000;
  return grid_to_mesh(grid.view(), options);
}

TEST(MeshLevelsOfDetail, EachLevelIsSimplifiedFromTheOneBefore) {
  const Mesh finest = sphere_mesh();
  ASSERT_NEAR(finest.face_count() / 20000.0, 1.0, 0.05);
  std::vector<SimplifyReport> reports;
  const std::vector<Mesh> levels = levels_of_detail(finest, {5000, 1000}, {}, 0, &reports);
  ASSERT_EQ(levels.size(), 2u);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].faces_before, finest.face_count());
  EXPECT_EQ(reports[1].faces_before, levels[0].face_count());  // from level 1, not level 0
  EXPECT_NEAR(levels[0].face_count() / 5000.0, 1.0, 0.05);
  EXPECT_NEAR(levels[1].face_count() / 1000.0, 1.0, 0.05);
  for (const Mesh& level : levels) {
    EXPECT_TRUE(edge_report(level).watertight());  // the surface stays closed
    EXPECT_EQ(euler_characteristic(level), 2);
    // The same shape: the box moves by little more than the coarsest level's edge length.
    const BoundingBox a = bounding_box(finest), b = bounding_box(level);
    for (int axis = 0; axis < 3; ++axis) {
      EXPECT_NEAR(a.min[axis], b.min[axis], 0.05);
      EXPECT_NEAR(a.max[axis], b.max[axis], 0.05);
    }
  }
  // The same for any thread count.
  const std::vector<Mesh> one_thread = levels_of_detail(finest, {5000, 1000}, {}, 1);
  EXPECT_EQ(one_thread[1].vertices, levels[1].vertices);
  EXPECT_EQ(one_thread[1].indices, levels[1].indices);
}

TEST(MeshLevelsOfDetail, ATargetAboveALevelLeavesItAsItIs) {
  const Mesh finest = sphere_mesh();
  const std::vector<Mesh> levels = levels_of_detail(finest, {1'000'000}, {});
  ASSERT_EQ(levels.size(), 1u);
  EXPECT_EQ(levels[0].indices, finest.indices);
  EXPECT_TRUE(levels_of_detail(finest, {}, {}).empty());
  testing::expect_error([&] { levels_of_detail(finest, {0}); }, ErrorCode::kInvalidArgument,
                        "at least 1 face");
}

TEST(MeshLevelsOfDetail, TranslatePutsThePivotOnTheOrigin) {
  Mesh mesh = sphere_mesh();
  const BoundingBox box = bounding_box(mesh);
  translate_mesh(mesh, pivot_offset(MeshPivot::kBottomCenter, {box.min[0], box.min[1], box.min[2]},
                                    {box.max[0], box.max[1], box.max[2]}));
  const BoundingBox moved = bounding_box(mesh);
  EXPECT_NEAR(moved.min[1], 0.0f, 1e-6f);
  EXPECT_NEAR(moved.min[0] + moved.max[0], 0.0f, 1e-6f);
  EXPECT_NEAR(moved.min[2] + moved.max[2], 0.0f, 1e-6f);
  EXPECT_NEAR(moved.max[1] - moved.min[1], box.max[1] - box.min[1], 1e-6f);
}

}  // namespace test_mesh_lod
}  // namespace cube3d
