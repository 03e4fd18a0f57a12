#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <set>

#include "cube3d/mesh/marching_cubes.h"
#include "cube3d/mesh/mesh_simplify.h"
#include "cube3d/mesh/mesh_stats.h"
#include "mesh_test_util.h"

namespace cube3d {
namespace test_mesh_simplify {

// About 100k faces: a sphere of radius 0.9 on the resolution-7 grid (index units).
Mesh big_sphere() {
  const auto grid = test::sample_resolution(
      7, [](double x, double y, double z) { return test::sphere(x, y, z, 0.0, 0.9); });
  return marching_cubes(grid.view());
}

TEST(MeshSimplify, DefaultTarget) {
  EXPECT_EQ(default_target_faces(5000), 10000u);
  EXPECT_EQ(default_target_faces(100000), 10000u);
  EXPECT_EQ(default_target_faces(1000000), 100000u);
}

TEST(MeshSimplify, HitsTargetAndStaysWatertight) {
  const Mesh original = big_sphere();
  ASSERT_GT(original.face_count(), 90000u);
  ASSERT_LT(original.face_count(), 130000u);
  const double volume = signed_volume(original);
  int repair_rounds = 0;
  for (const std::size_t target : {std::size_t{0}, std::size_t{3000}, std::size_t{20000}}) {
    Mesh mesh = original;
    const SimplifyReport report = simplify_mesh(mesh, {.target_faces = target});
    const std::size_t expected = target > 0 ? target : default_target_faces(original.face_count());
    EXPECT_EQ(report.target_faces, expected);
    EXPECT_EQ(report.faces_before, original.face_count());
    EXPECT_EQ(report.faces_after, mesh.face_count());
    EXPECT_FALSE(report.sloppy);
    EXPECT_LE(mesh.face_count(), expected * 105 / 100);
    EXPECT_GE(mesh.face_count(), expected * 95 / 100);
    EXPECT_TRUE(edge_report(mesh).watertight()) << "target " << expected;
    EXPECT_TRUE(non_manifold_vertices(mesh).empty()) << "target " << expected;
    EXPECT_EQ(report.non_manifold_vertices, 0u);
    EXPECT_EQ(euler_characteristic(mesh), 2);
    repair_rounds += report.repair_rounds;
    EXPECT_NEAR(signed_volume(mesh) / volume, 1.0, 0.01);
    // Folded pairs are cancelled (harmless); with blocks a few more than in one pass.
    EXPECT_LE(report.cancelled_faces, expected / 100) << "target " << expected;
    // No vertex left behind.
    std::vector<uint8_t> used(mesh.vertex_count(), 0);
    for (const uint32_t index : mesh.indices) {
      used[index] = 1;
    }
    EXPECT_EQ(std::count(used.begin(), used.end(), 0), 0);
  }
  // With meshoptimizer 0.18 (Debian 12) the 20000 budget glues one spot, repaired in one round
  // (not asserted: another meshoptimizer version collapses in another order).
  RecordProperty("repair_rounds", repair_rounds);
}

// A thickened gyroid clipped by a ball: many handles and small pieces near the ball.
TEST(MeshSimplify, HighGenusStaysClosedAndManifold) {
  const auto grid = test::sample_resolution(6, [](double x, double y, double z) {
    const double k = 6.0;
    const double g = std::sin(k * x) * std::cos(k * y) + std::sin(k * y) * std::cos(k * z) +
                     std::sin(k * z) * std::cos(k * x);
    return std::min(0.9 - std::sqrt(x * x + y * y + z * z), 0.35 - std::abs(g));
  });
  const Mesh original = marching_cubes(grid.view());
  ASSERT_TRUE(edge_report(original).watertight());
  ASSERT_TRUE(non_manifold_vertices(original).empty());
  for (const std::size_t target : {std::size_t{2000}, std::size_t{6000}, std::size_t{20000}}) {
    Mesh mesh = original;
    const SimplifyReport report = simplify_mesh(mesh, {.target_faces = target});
    EXPECT_NEAR(static_cast<double>(mesh.face_count()) / target, 1.0, 0.05);
    EXPECT_TRUE(edge_report(mesh).watertight()) << "target " << target;
    EXPECT_TRUE(non_manifold_vertices(mesh).empty()) << "target " << target;
    EXPECT_EQ(report.non_manifold_vertices, 0u);
  }
}

TEST(MeshSimplify, Deterministic) {
  Mesh a = big_sphere();
  Mesh b = a;
  simplify_mesh(a, {.target_faces = 5000});
  simplify_mesh(b, {.target_faces = 5000});
  EXPECT_EQ(a.vertices, b.vertices);
  EXPECT_EQ(a.indices, b.indices);
}

TEST(MeshSimplify, SmallMeshUntouched) {
  const auto grid = test::sample_resolution(
      5, [](double x, double y, double z) { return test::sphere(x, y, z, 0.0, 0.7); });
  Mesh mesh = marching_cubes(grid.view());
  const Mesh before = mesh;
  ASSERT_LT(mesh.face_count(), 10000u);
  const SimplifyReport report = simplify_mesh(mesh);
  EXPECT_EQ(report.faces_after, before.face_count());
  EXPECT_EQ(mesh.indices, before.indices);
  EXPECT_EQ(mesh.vertices, before.vertices);
}

// A wavy sheet cut by the grid border: an open surface.
Mesh wavy_sheet() {
  const auto grid = test::sample_resolution(
      6, [](double x, double y, double z) { return 0.2 * std::sin(3 * x) * std::cos(2 * y) - z; });
  return marching_cubes(grid.view());
}

TEST(MeshSimplify, LockedBorderStaysPut) {
  Mesh mesh = wavy_sheet();
  auto border_vertices = [](const Mesh& m) {
    std::set<std::array<float, 3>> border;
    for (std::size_t n = 0; n < m.vertices.size(); n += 3) {
      const float* p = &m.vertices[n];
      for (int axis = 0; axis < 2; ++axis) {
        if (p[axis] == 0.0f || p[axis] == 64.0f) {
          border.insert({p[0], p[1], p[2]});
        }
      }
    }
    return border;
  };
  const auto before = border_vertices(mesh);
  ASSERT_GT(edge_report(mesh).boundary, 0u);
  simplify_mesh(mesh, {.target_faces = 1000});
  EXPECT_LE(mesh.face_count(), 1050u);
  EXPECT_EQ(border_vertices(mesh), before);
  EXPECT_EQ(edge_report(mesh).non_manifold, 0u);
  EXPECT_EQ(edge_report(mesh).misoriented, 0u);
}

TEST(MeshSimplify, SloppyFallbackOnlyWhenAllowed) {
  // 256 locked border vertices: the topology-keeping simplifier cannot get near 50 faces.
  Mesh strict = wavy_sheet();
  const SimplifyReport kept = simplify_mesh(strict, {.target_faces = 50});
  EXPECT_FALSE(kept.sloppy);
  EXPECT_GT(strict.face_count(), 200u);
  Mesh sloppy = wavy_sheet();
  const SimplifyReport report = simplify_mesh(sloppy, {.target_faces = 50, .allow_sloppy = true});
  EXPECT_TRUE(report.sloppy);
  EXPECT_LE(sloppy.face_count(), 53u);
  EXPECT_GT(sloppy.face_count(), 0u);
}

}  // namespace test_mesh_simplify
}  // namespace cube3d
