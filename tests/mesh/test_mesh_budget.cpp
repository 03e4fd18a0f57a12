// The budget of the mesh stage (mesh_pipeline.h, max_marching_cubes_faces): a surface over it is
// extracted again from the grid halved, as often as needed, and the report and its warning say
// so; a grid that cannot be halved takes the sloppy simplifier's path instead; marching cubes
// itself stops early at a face limit.
#include <gtest/gtest.h>

#include <cmath>

#include "analytic_shapes.h"
#include "cube3d/mesh/marching_cubes.h"
#include "cube3d/mesh/mesh_pipeline.h"
#include "cube3d/mesh/mesh_stats.h"
#include "expect_error.h"
#include "mesh_test_util.h"

namespace cube3d {
namespace test_mesh_budget {

// Noise like a random-weight model's field: 200k marching-cubes faces at resolution_base 6
// (51k at 5).
const bench::AnalyticGrid& noise6() {
  static const bench::AnalyticGrid grid = bench::sample_analytic_shape("noise", 6);
  return grid;
}

// The mesh of `grid` under a marching-cubes budget of `max_faces`; `report` says how it was made.
Mesh mesh_under_budget(const GridView& grid, std::size_t max_faces, MeshPipelineReport& report) {
  MeshPipelineOptions options;
  options.max_marching_cubes_faces = max_faces;
  return grid_to_mesh(grid, options, &report);
}

TEST(MeshBudget, MarchingCubesStopsAtItsFaceLimit) {
  const auto& grid = noise6();
  const std::size_t all = marching_cubes(grid.view()).face_count();
  ASSERT_GT(all, 150000u);
  bool over = false;
  const Mesh stopped = marching_cubes(grid.view(), {.max_faces = 10000}, &over);
  EXPECT_TRUE(over);
  EXPECT_TRUE(stopped.empty());
  const Mesh within = marching_cubes(grid.view(), {.max_faces = all}, &over);
  EXPECT_FALSE(over);
  EXPECT_EQ(within.face_count(), all);
  // Without the flag to answer, the limit is an error that names it.
  testing::expect_error([&] { marching_cubes(grid.view(), {.max_faces = 10000}); },
                        ErrorCode::kResourceExhausted, "max_faces");
}

TEST(MeshBudget, OverBudgetIsExtractedCoarserWithAWarning) {
  const auto& grid = noise6();
  MeshPipelineReport report;
  const Mesh mesh = mesh_under_budget(grid.view(), 60000, report);
  EXPECT_TRUE(report.over_budget);
  EXPECT_FALSE(report.sloppy_budget_pass);
  EXPECT_EQ(report.budget_faces, 60000u);
  ASSERT_GE(report.coarsened, 1);
  // Each halving: 2^r + 1 -> 2^(r-1) + 1 points a side.
  const int64_t expected_side = (grid.dims[0] - 1) / (int64_t{1} << report.coarsened) + 1;
  EXPECT_EQ(report.extracted_dims,
            (std::array<int64_t, 3>{expected_side, expected_side, expected_side}));
  EXPECT_LE(report.marching_cubes_faces, 60000u);
  EXPECT_GT(report.marching_cubes_faces, 0u);
  EXPECT_FALSE(mesh.empty());
  // Still in world coordinates of the whole grid: the field spans [-1.05, 1.05].
  const BoundingBox box = bounding_box(mesh);
  EXPECT_NEAR(box.min[0], -1.05f, 0.05f);
  EXPECT_NEAR(box.max[0], 1.05f, 0.05f);
  const std::string warning = budget_warning(report, grid.dims);
  EXPECT_NE(warning.find("max_marching_cubes_faces 60000"), std::string::npos) << warning;
  EXPECT_EQ(report.coarsened, 1);
  EXPECT_NE(warning.find("extracted at resolution_base 5 instead of 6 (" +
                         std::to_string(report.marching_cubes_faces) + " faces)"),
            std::string::npos)
      << warning;
}

TEST(MeshBudget, WithinBudgetNothingChanges) {
  const auto grid = test::sample_resolution(
      6, [](double x, double y, double z) { return test::sphere(x, y, z, 0.0, 0.7); });
  MeshPipelineReport report;
  const Mesh limited = grid_to_mesh(grid.view(), {}, &report);
  EXPECT_FALSE(report.over_budget);
  EXPECT_EQ(report.coarsened, 0);
  EXPECT_TRUE(budget_warning(report, grid.dims).empty());
  MeshPipelineOptions off;
  off.max_marching_cubes_faces = 0;
  const Mesh unlimited = grid_to_mesh(grid.view(), off);
  EXPECT_EQ(limited.indices, unlimited.indices);
  EXPECT_EQ(limited.vertices, unlimited.vertices);
}

TEST(MeshBudget, AGridThatCannotBeHalvedTakesTheSloppyPass) {
  // 64 points a side: even, so not 2^r + 1.
  const auto grid = test::sample(64, [](double x, double y, double z) {
    return std::sin(9 * x) * std::cos(7 * y) + std::sin(8 * z);
  });
  MeshPipelineReport report;
  const Mesh mesh = mesh_under_budget(grid.view(), 5000, report);
  EXPECT_TRUE(report.over_budget);
  EXPECT_TRUE(report.sloppy_budget_pass);
  EXPECT_EQ(report.coarsened, 0);
  EXPECT_LE(report.marching_cubes_faces, 5000u);
  EXPECT_LE(mesh.face_count(), 5000u);
  EXPECT_NE(budget_warning(report, grid.dims).find("sloppy"), std::string::npos);
}

TEST(MeshBudget, ALargeGridOverBudgetIsSeenFromItsHalf) {
  // A grid of at least budget_prediction_points is first meshed halved, which predicts its
  // surface (4 times the half's faces): far over budget, the full grid is never meshed.
  const auto& grid = noise6();  // 200,435 faces; 51,343 halved
  MeshPipelineOptions options;
  options.budget_prediction_points = 1;
  options.max_marching_cubes_faces = 201000;  // the surface fits, its prediction (205k) does not
  MeshPipelineReport report;
  grid_to_mesh(grid.view(), options, &report);
  EXPECT_TRUE(report.over_budget);
  EXPECT_EQ(report.coarsened, 1);
  EXPECT_EQ(report.marching_cubes_faces, 51343u);
  // Predicted within budget: meshed in full as usual.
  options.max_marching_cubes_faces = 250000;
  grid_to_mesh(grid.view(), options, &report);
  EXPECT_FALSE(report.over_budget);
  EXPECT_EQ(report.coarsened, 0);
  EXPECT_EQ(report.marching_cubes_faces, 200435u);
}

}  // namespace test_mesh_budget
}  // namespace cube3d
