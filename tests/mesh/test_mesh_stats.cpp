#include <gtest/gtest.h>

#include <cmath>

#include "cube3d/mesh/mesh_stats.h"

namespace cube3d {
namespace test_mesh_stats {

// The unit cube [0, 1]^3 with outward triangles.
Mesh unit_cube() {
  Mesh mesh;
  for (int c = 0; c < 8; ++c) {
    mesh.vertices.insert(mesh.vertices.end(),
                         {float(c & 1), float((c >> 1) & 1), float((c >> 2) & 1)});
  }
  // Two triangles per face, counter-clockwise seen from outside.
  mesh.indices = {0, 2, 3, 0, 3, 1,   // z = 0 (normal -z)
                  4, 5, 7, 4, 7, 6,   // z = 1
                  0, 1, 5, 0, 5, 4,   // y = 0
                  2, 6, 7, 2, 7, 3,   // y = 1
                  0, 4, 6, 0, 6, 2,   // x = 0
                  1, 3, 7, 1, 7, 5};  // x = 1
  return mesh;
}

TEST(MeshStats, UnitCube) {
  const Mesh cube = unit_cube();
  EXPECT_DOUBLE_EQ(surface_area(cube), 6.0);
  EXPECT_DOUBLE_EQ(signed_volume(cube), 1.0);
  EXPECT_EQ(euler_characteristic(cube), 2);
  const EdgeReport report = edge_report(cube);
  EXPECT_EQ(report.edges, 18u);
  EXPECT_TRUE(report.watertight());
  const BoundingBox box = bounding_box(cube);
  EXPECT_FLOAT_EQ(box.max[2], 1.0f);
  EXPECT_DOUBLE_EQ(box.diagonal(), std::sqrt(3.0));
}

TEST(MeshStats, BrokenCubes) {
  Mesh open = unit_cube();
  open.indices.resize(open.indices.size() - 3);
  EXPECT_EQ(edge_report(open).boundary, 3u);
  EXPECT_FALSE(edge_report(open).watertight());

  Mesh flipped = unit_cube();
  std::swap(flipped.indices[1], flipped.indices[2]);
  EXPECT_EQ(edge_report(flipped).misoriented, 3u);
  EXPECT_FALSE(edge_report(flipped).watertight());

  Mesh inverted = unit_cube();
  for (std::size_t f = 0; f < inverted.indices.size(); f += 3) {
    std::swap(inverted.indices[f + 1], inverted.indices[f + 2]);
  }
  EXPECT_DOUBLE_EQ(signed_volume(inverted), -1.0);
  EXPECT_TRUE(edge_report(inverted).watertight());
}

TEST(MeshStats, NonManifoldVertices) {
  EXPECT_TRUE(non_manifold_vertices(unit_cube()).empty());
  // Two cubes sharing only corner 7 of the first (= corner 0 of the second): a pinch.
  Mesh pinched = unit_cube();
  const Mesh cube = unit_cube();
  for (int c = 1; c < 8; ++c) {
    for (int axis = 0; axis < 3; ++axis) {
      pinched.vertices.push_back(cube.vertices[c * 3 + axis] + 1.0f);
    }
  }
  for (const uint32_t index : cube.indices) {
    pinched.indices.push_back(index == 0 ? 7 : index + 7);
  }
  EXPECT_TRUE(edge_report(pinched).watertight());  // edges alone do not see it
  EXPECT_EQ(non_manifold_vertices(pinched), (std::vector<uint32_t>{7}));
  // An edge with four faces: both its ends.
  Mesh fin = unit_cube();
  fin.vertices.insert(fin.vertices.end(), {0.5f, 2.0f, 0.0f, 0.5f, -1.0f, 0.0f});
  fin.indices.insert(fin.indices.end(), {0, 2, 8, 2, 0, 9});
  EXPECT_EQ(non_manifold_vertices(fin), (std::vector<uint32_t>{0, 2}));
}

TEST(MeshStats, ComponentsAndNormals) {
  Mesh two = unit_cube();
  const Mesh cube = unit_cube();
  for (std::size_t n = 0; n < cube.vertices.size(); ++n) {
    two.vertices.push_back(cube.vertices[n] + (n % 3 == 0 ? 3.0f : 0.0f));
  }
  for (const uint32_t index : cube.indices) {
    two.indices.push_back(index + 8);
  }
  std::size_t count = 0;
  const auto labels = face_components(two, &count);
  EXPECT_EQ(count, 2u);
  EXPECT_EQ(labels.front(), 0u);
  EXPECT_EQ(labels.back(), 1u);
  EXPECT_EQ(euler_characteristic(two), 4);

  // Corner normals of a cube point out along the diagonal.
  const auto normals = vertex_normals(cube);
  for (int c = 0; c < 8; ++c) {
    for (int axis = 0; axis < 3; ++axis) {
      const float expected = ((c >> axis) & 1) ? 1.0f : -1.0f;
      EXPECT_GT(normals[c * 3 + axis] * expected, 0.3f);
    }
  }
}

}  // namespace test_mesh_stats
}  // namespace cube3d
