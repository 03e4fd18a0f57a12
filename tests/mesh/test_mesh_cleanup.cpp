#include <gtest/gtest.h>

#include "cube3d/mesh/marching_cubes.h"
#include "cube3d/mesh/mesh_cleanup.h"
#include "cube3d/mesh/mesh_stats.h"
#include "mesh_test_util.h"

namespace cube3d {
namespace test_mesh_cleanup {

Mesh strip() {
  Mesh mesh;
  // 0 --- 1 --- 2, 3 above; 4 lies on the segment 0-1, 5 duplicates 1's position.
  mesh.vertices = {0, 0, 0, 1, 0, 0, 2, 0, 0, 1, 1, 0, 0.5f, 0, 0, 1, 0, 0};
  return mesh;
}

TEST(MeshCleanup, DegenerateFaces) {
  Mesh mesh = strip();
  mesh.indices = {0, 1, 3,   // fine
                  0, 0, 3,   // repeated index
                  0, 4, 1,   // collinear: zero area
                  1, 2, 3};  // fine
  EXPECT_EQ(remove_degenerate_faces(mesh), 2u);
  EXPECT_EQ(mesh.indices, (std::vector<uint32_t>{0, 1, 3, 1, 2, 3}));
}

TEST(MeshCleanup, DuplicateFaces) {
  Mesh mesh = strip();
  mesh.indices = {0, 1, 3, 1, 2, 3, 3, 0, 1, 1, 0, 3, 2, 3, 1};
  EXPECT_EQ(remove_duplicate_faces(mesh), 3u);
  EXPECT_EQ(mesh.indices, (std::vector<uint32_t>{0, 1, 3, 1, 2, 3}));
}

TEST(MeshCleanup, OppositeFacesCancel) {
  Mesh mesh = strip();
  mesh.indices = {0, 1, 3,   // stays: the first face of the majority winding of {0, 1, 3}
                  1, 2, 3,   // cancels with the next face, its opposite
                  3, 2, 1,   //
                  1, 3, 0,   // same winding as the first (a rotation): cancels with
                  1, 0, 3};  // this opposite one
  EXPECT_EQ(cancel_opposite_faces(mesh), 4u);
  EXPECT_EQ(mesh.indices, (std::vector<uint32_t>{0, 1, 3}));
}

TEST(MeshCleanup, UnreferencedVertices) {
  Mesh mesh = strip();
  mesh.indices = {1, 2, 3};
  EXPECT_EQ(remove_unreferenced_vertices(mesh), 3u);
  EXPECT_EQ(mesh.indices, (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(mesh.vertices, (std::vector<float>{1, 0, 0, 2, 0, 0, 1, 1, 0}));
}

TEST(MeshCleanup, MergeDuplicateVertices) {
  Mesh mesh = strip();
  mesh.indices = {0, 5, 3, 5, 2, 3};
  EXPECT_EQ(merge_duplicate_vertices(mesh), 1u);
  EXPECT_EQ(mesh.indices, (std::vector<uint32_t>{0, 1, 3, 1, 2, 3}));
}

// Marching cubes of the union of spheres (centre x, radius) at resolution 6.
Mesh spheres(std::vector<std::pair<double, double>> balls) {
  const auto grid = test::sample_resolution(6, [&](double x, double y, double z) {
    double value = -1e9;
    for (const auto& [cx, radius] : balls) {
      value = std::max(value, test::sphere(x, y, z, cx, radius));
    }
    return value;
  });
  return marching_cubes(grid.view());
}

TEST(MeshCleanup, SmallFloaterGoesBigComponentStays) {
  const Mesh big = spheres({{-0.2, 0.6}});
  // A small sphere: diagonal 0.16 sqrt 3 = 0.28, about 11% of the whole mesh's 2.4.
  Mesh with_floater = spheres({{-0.2, 0.6}, {0.85, 0.08}});
  std::size_t components = 0;
  face_components(with_floater, &components);
  ASSERT_EQ(components, 2u);
  const CleanupReport report = cleanup_mesh(with_floater);
  EXPECT_GT(report.floater_faces, 0u);
  EXPECT_GT(report.unreferenced_vertices, 0u);
  // Away from the floater the field is the big sphere's alone: the same mesh, vertex for vertex.
  EXPECT_EQ(with_floater.vertices, big.vertices);
  EXPECT_EQ(with_floater.indices, big.indices);

  // A second sphere of diagonal 0.3 * 2 sqrt 3 = 1.04 (45% of the whole) stays.
  Mesh two = spheres({{-0.45, 0.5}, {0.6, 0.3}});
  const std::size_t faces = two.face_count();
  EXPECT_EQ(cleanup_mesh(two).floater_faces, 0u);
  EXPECT_EQ(two.face_count(), faces);

  // Switched off, or with a ratio of 5%, the floater stays too.
  Mesh kept = spheres({{-0.2, 0.6}, {0.85, 0.08}});
  const std::size_t all_faces = kept.face_count();
  EXPECT_EQ(cleanup_mesh(kept, {.remove_floaters = false}).floater_faces, 0u);
  EXPECT_EQ(remove_floaters(kept, 0.05), 0u);
  EXPECT_EQ(kept.face_count(), all_faces);
}

TEST(MeshCleanup, StepsCanBeSwitchedOff) {
  Mesh mesh = strip();
  mesh.indices = {0, 1, 3, 0, 0, 3, 3, 0, 1};
  CleanupOptions none{.merge_duplicate_vertices = false,
                      .remove_degenerate_faces = false,
                      .remove_duplicate_faces = false,
                      .remove_unreferenced_vertices = false,
                      .remove_floaters = false};
  const Mesh before = mesh;
  cleanup_mesh(mesh, none);
  EXPECT_EQ(mesh.indices, before.indices);
  EXPECT_EQ(mesh.vertices, before.vertices);
  const CleanupReport report = cleanup_mesh(mesh);
  EXPECT_EQ(report.degenerate_faces, 1u);
  EXPECT_EQ(report.duplicate_faces, 1u);
  EXPECT_EQ(report.unreferenced_vertices, 3u);
  EXPECT_EQ(mesh.face_count(), 1u);
  EXPECT_EQ(mesh.vertex_count(), 3u);
}

// Two closed tetrahedra that share their apex (vertex 0): a pinch.
Mesh touching_tetrahedra() {
  Mesh mesh;
  mesh.vertices = {0, 0, 0,  1,  0, 1,  -1, 0, 1, 0, 1, 1,  // apex, base of the first
                   1, 0, -1, -1, 0, -1, 0,  1, -1};         // base of the second
  mesh.indices = {0, 2, 1, 0, 1, 3, 0, 3, 2, 1, 2, 3,       // first, outward
                  0, 4, 5, 0, 6, 4, 0, 5, 6, 4, 6, 5};      // second, outward
  return mesh;
}

TEST(MeshCleanup, SplittingAPinchMakesTwoClosedPieces) {
  Mesh mesh = touching_tetrahedra();
  ASSERT_TRUE(edge_report(mesh).watertight());  // every edge has its two faces...
  ASSERT_EQ(non_manifold_vertices(mesh), (std::vector<uint32_t>{0}));  // ...but 0 is a pinch
  const Mesh before = mesh;
  EXPECT_EQ(split_pinched_vertices(mesh, {0}), 1u);
  EXPECT_EQ(mesh.vertex_count(), 8u);
  EXPECT_TRUE(non_manifold_vertices(mesh).empty());
  EXPECT_TRUE(edge_report(mesh).watertight());
  // Nothing moved: the new vertex sits on the apex, and the first fan (corner order) kept it.
  EXPECT_EQ(std::vector<float>(mesh.vertices.end() - 3, mesh.vertices.end()),
            (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(std::vector<uint32_t>(mesh.indices.begin(), mesh.indices.begin() + 12),
            std::vector<uint32_t>(before.indices.begin(), before.indices.begin() + 12));
  std::size_t components = 0;
  face_components(mesh, &components);
  EXPECT_EQ(components, 2u);
  // Only the listed vertices are split.
  Mesh untouched = touching_tetrahedra();
  EXPECT_EQ(split_pinched_vertices(untouched, {1, 2}), 0u);
  EXPECT_EQ(untouched.indices, before.indices);
}

TEST(MeshCleanup, MarchingCubesOutputIsAlreadyClean) {
  Mesh mesh = spheres({{0.0, 0.7}});
  const Mesh before = mesh;
  const CleanupReport report = cleanup_mesh(mesh);
  EXPECT_EQ(report.merged_vertices + report.degenerate_faces + report.duplicate_faces +
                report.unreferenced_vertices + report.floater_faces,
            0u);
  EXPECT_EQ(mesh.indices, before.indices);
}

}  // namespace test_mesh_cleanup
}  // namespace cube3d
