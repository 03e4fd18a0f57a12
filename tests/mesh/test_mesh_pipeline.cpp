#include <gtest/gtest.h>

#include "cube3d/mesh/mesh_pipeline.h"
#include "cube3d/mesh/mesh_stats.h"
#include "mesh_test_util.h"

namespace cube3d {
namespace test_mesh_pipeline {

test::SampledGrid sphere_grid(int64_t resolution) {
  return test::sample_resolution(resolution, [](double x, double y, double z) {
    return std::max(test::sphere(x, y, z, -0.1, 0.8), test::sphere(x, y, z, 0.95, 0.05));
  });
}

TEST(MeshPipeline, DefaultsFollowTheOfficialPostprocessing) {
  const auto grid = sphere_grid(7);
  MeshPipelineReport report;
  const Mesh mesh = grid_to_mesh(grid.view(), {}, &report);
  EXPECT_GT(report.marching_cubes_faces, 60000u);
  EXPECT_GT(report.cleanup.floater_faces, 0u);  // the tiny sphere at x = 0.95
  EXPECT_EQ(report.simplification.target_faces, 10000u);
  EXPECT_NEAR(mesh.face_count() / 10000.0, 1.0, 0.05);
  EXPECT_TRUE(edge_report(mesh).watertight());
  EXPECT_EQ(euler_characteristic(mesh), 2);
  // World coordinates: the big sphere spans x in [-0.9, 0.7].
  const BoundingBox box = bounding_box(mesh);
  EXPECT_NEAR(box.min[0], -0.9f, 0.01f);
  EXPECT_NEAR(box.max[0], 0.7f, 0.01f);
  EXPECT_NEAR(signed_volume(mesh), 4.0 / 3.0 * test::kPi * 0.512, 0.03);
}

TEST(MeshPipeline, NoPostprocessIsPlainMarchingCubes) {
  const auto grid = sphere_grid(5);
  MeshPipelineOptions options;
  options.postprocess = false;
  const Mesh mesh = grid_to_mesh(grid.view(), options);
  Mesh expected = marching_cubes(grid.view());
  index_to_world(expected, grid.dims);
  EXPECT_EQ(mesh.vertices, expected.vertices);
  EXPECT_EQ(mesh.indices, expected.indices);

  options.world_coordinates = false;
  EXPECT_EQ(grid_to_mesh(grid.view(), options).vertices, marching_cubes(grid.view()).vertices);
}

TEST(MeshPipeline, NoSurfaceGivesEmptyMesh) {
  const std::vector<float> outside(27, -1.0f);
  EXPECT_TRUE(grid_to_mesh(GridView{outside, {3, 3, 3}}).empty());
}

}  // namespace test_mesh_pipeline
}  // namespace cube3d
