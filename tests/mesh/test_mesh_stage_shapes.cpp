// The mesh stage's guarantees on shapes the size and kind of Cube 3D's own (bench's analytic
// shapes: a chair, a sword, a boat hull, a creature; 12k-210k marching-cubes faces at
// resolution_base 8, so that the simplifier's parallel blocks are in play): the face target within
// 1%, a closed and manifold surface (their marching-cubes surfaces are closed), the Roblox
// profile's caps, and byte-identical output for any number of threads.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "analytic_shapes.h"
#include "cube3d/mesh/marching_cubes.h"
#include "cube3d/mesh/mesh_pipeline.h"
#include "cube3d/mesh/mesh_profile.h"
#include "cube3d/mesh/mesh_stats.h"

namespace cube3d {
namespace test_mesh_stage_shapes {

// Each grid made once for the whole binary (a second or so apiece).
const bench::AnalyticGrid& grid_of(const std::string& name, int64_t r = 8) {
  static std::map<std::string, std::unique_ptr<bench::AnalyticGrid>> grids;
  auto& grid = grids[name + std::to_string(r)];
  if (!grid) grid = std::make_unique<bench::AnalyticGrid>(bench::sample_analytic_shape(name, r));
  return *grid;
}

const std::vector<std::string> kShapes = {"chair", "sword", "boat", "creature"};

void expect_closed(const Mesh& mesh, const std::string& what) {
  const EdgeReport edges = edge_report(mesh);
  EXPECT_TRUE(edges.watertight()) << what << ": " << edges.boundary << " border, "
                                  << edges.non_manifold << " non-manifold, " << edges.misoriented
                                  << " misoriented edges of " << edges.edges;
  EXPECT_TRUE(non_manifold_vertices(mesh).empty()) << what;
}

TEST(MeshStageShapes, DefaultsHitTheTargetAndStayClosed) {
  for (const std::string& name : kShapes) {
    const auto& grid = grid_of(name);
    const Mesh raw = marching_cubes(grid.view());
    ASSERT_TRUE(edge_report(raw).watertight()) << name;  // what makes "stay closed" the promise
    MeshPipelineReport report;
    const Mesh mesh = grid_to_mesh(grid.view(), {}, &report);
    EXPECT_FALSE(report.over_budget) << name;
    EXPECT_EQ(report.marching_cubes_faces, raw.face_count()) << name;
    const std::size_t target = default_target_faces(report.cleanup_faces);
    EXPECT_EQ(report.simplification.target_faces, target) << name;
    EXPECT_NEAR(static_cast<double>(mesh.face_count()) / static_cast<double>(target), 1.0, 0.01)
        << name;
    expect_closed(mesh, name);
    // The shape itself is kept: the volume within 1% of the raw surface's (world units).
    Mesh raw_world = raw;
    index_to_world(raw_world, grid.dims);
    EXPECT_NEAR(signed_volume(mesh) / signed_volume(raw_world), 1.0, 0.01) << name;
    if (raw.face_count() > 100000) {
      EXPECT_GT(report.simplification.blocks, 1u) << name;
    }
  }
}

TEST(MeshStageShapes, ExplicitTargetsWithinOnePercent) {
  const auto& grid = grid_of("boat");
  for (const std::size_t target : {std::size_t{4000}, std::size_t{15000}, std::size_t{60000}}) {
    MeshPipelineOptions options;
    options.simplification.target_faces = target;
    MeshPipelineReport report;
    const Mesh mesh = grid_to_mesh(grid.view(), options, &report);
    EXPECT_NEAR(static_cast<double>(mesh.face_count()) / static_cast<double>(target), 1.0, 0.01)
        << target;
    expect_closed(mesh, "boat to " + std::to_string(target));
  }
}

TEST(MeshStageShapes, RobloxCapsHold) {
  const MeshLimits roblox = mesh_limits(MeshProfile::kRoblox);
  for (const std::string& name : kShapes) {
    MeshPipelineOptions options;
    options.max_faces = static_cast<std::size_t>(*roblox.max_faces);
    // A target over the cap (as a request may ask): the cap wins.
    options.simplification.target_faces = 50000;
    const Mesh mesh = grid_to_mesh(grid_of(name).view(), options);
    EXPECT_LE(static_cast<int64_t>(mesh.face_count()), *roblox.max_faces) << name;
    EXPECT_LE(static_cast<int64_t>(mesh.vertex_count()), *roblox.max_vertices) << name;
    if (marching_cubes(grid_of(name).view()).face_count() > 20000) {
      EXPECT_GE(mesh.face_count(), 19800u) << name;  // within 1% of the cap
    }
    expect_closed(mesh, name + " (roblox)");
  }
}

TEST(MeshStageShapes, ByteIdenticalForAnyThreadCount) {
  for (const std::string name : {"boat", "creature"}) {
    MeshPipelineOptions options;
    options.threads = 1;
    const Mesh one = grid_to_mesh(grid_of(name).view(), options);
    for (const int threads : {1, 2, 3, 8}) {
      options.threads = threads;
      const Mesh other = grid_to_mesh(grid_of(name).view(), options);
      EXPECT_EQ(other.vertices, one.vertices) << name << ", " << threads << " threads";
      EXPECT_EQ(other.indices, one.indices) << name << ", " << threads << " threads";
    }
    // And the machine's own (all cores, shared pool).
    options.threads = 0;
    EXPECT_EQ(grid_to_mesh(grid_of(name).view(), options).indices, one.indices) << name;
  }
}

// One pass on one thread (no blocks) as a yardstick: the blocks keep the shape as well.
TEST(MeshStageShapes, BlocksKeepTheShapeAsOnePassDoes) {
  const auto& grid = grid_of("creature");
  MeshPipelineOptions one_pass;
  one_pass.simplification.blocks = false;
  MeshPipelineReport blocks_report, one_report;
  const Mesh blocks = grid_to_mesh(grid.view(), {}, &blocks_report);
  const Mesh single = grid_to_mesh(grid.view(), one_pass, &one_report);
  EXPECT_GT(blocks_report.simplification.blocks, 1u);
  EXPECT_EQ(one_report.simplification.blocks, 0u);
  EXPECT_NEAR(signed_volume(blocks) / signed_volume(single), 1.0, 0.005);
  EXPECT_NEAR(surface_area(blocks) / surface_area(single), 1.0, 0.01);
  // meshoptimizer's error (relative to the mesh's extent) no worse than 1.5 times one pass's.
  EXPECT_LE(blocks_report.simplification.error, one_report.simplification.error * 1.5f);
}

}  // namespace test_mesh_stage_shapes
}  // namespace cube3d
