// The linear, parallel clean-up and checks against the plain sort-based versions they replaced
// (mesh_reference.h), on random meshes made to hold every awkward case: coincident vertices,
// repeated indices, duplicate and opposite faces, edges of three or four faces, pinches. Sizes on
// both sides of the passes' partitioning thresholds.
#include <gtest/gtest.h>

#include <random>

#include "cube3d/mesh/mesh_cleanup.h"
#include "cube3d/mesh/mesh_pipeline.h"
#include "cube3d/mesh/mesh_stats.h"
#include "mesh_reference.h"

namespace cube3d {
namespace test_mesh_linear_passes {

// `vertices` vertices at positions drawn from a small lattice (so that many coincide, some as
// -0 and +0), `faces` faces: mostly random, some repeated as they are, reversed or rotated, some
// with a repeated index.
Mesh awkward_mesh(std::size_t vertices, std::size_t faces, uint32_t seed) {
  std::mt19937 random(seed);
  Mesh mesh;
  std::uniform_int_distribution<int> coordinate(-4, 4);
  for (std::size_t v = 0; v < vertices; ++v) {
    for (int axis = 0; axis < 3; ++axis) {
      const int c = coordinate(random);
      mesh.vertices.push_back(c == 0 && (random() & 1) ? -0.0f : static_cast<float>(c) * 0.5f);
    }
  }
  std::uniform_int_distribution<uint32_t> vertex(0, static_cast<uint32_t>(vertices - 1));
  // Faces among a few neighbouring vertices, so that edges repeat.
  const auto local = [&](uint32_t around) {
    return std::min<uint32_t>(static_cast<uint32_t>(vertices - 1), around + random() % 6);
  };
  while (mesh.face_count() < faces) {
    const std::size_t kind = random() % 10;
    if (kind < 2 && mesh.face_count() > 0) {
      const std::size_t f = random() % mesh.face_count();
      uint32_t a = mesh.indices[f * 3], b = mesh.indices[f * 3 + 1], c = mesh.indices[f * 3 + 2];
      if (kind == 0) std::swap(b, c);                                  // opposite
      if (random() & 1) std::tie(a, b, c) = std::make_tuple(b, c, a);  // rotated
      mesh.indices.insert(mesh.indices.end(), {a, b, c});
    } else if (kind == 2) {
      const uint32_t a = vertex(random);
      mesh.indices.insert(mesh.indices.end(), {a, a, local(a)});
    } else {
      const uint32_t a = vertex(random);
      mesh.indices.insert(mesh.indices.end(), {a, local(a), local(a)});
    }
  }
  return mesh;
}

class LinearPasses : public ::testing::TestWithParam<std::pair<std::size_t, std::size_t>> {};

TEST_P(LinearPasses, MatchTheSortBasedReference) {
  const auto [vertices, faces] = GetParam();
  for (const uint32_t seed : {1u, 2u, 3u}) {
    const Mesh input = awkward_mesh(vertices, faces, seed);
    {
      Mesh fast = input, plain = input;
      EXPECT_EQ(merge_duplicate_vertices(fast), reference::merge_duplicate_vertices(plain));
      EXPECT_EQ(fast.indices, plain.indices) << "seed " << seed;
    }
    {
      Mesh fast = input, plain = input;
      EXPECT_EQ(remove_duplicate_faces(fast), reference::remove_duplicate_faces(plain));
      EXPECT_EQ(fast.indices, plain.indices) << "seed " << seed;
    }
    {
      Mesh fast = input, plain = input;
      EXPECT_EQ(cancel_opposite_faces(fast), reference::cancel_opposite_faces(plain));
      EXPECT_EQ(fast.indices, plain.indices) << "seed " << seed;
    }
    EXPECT_EQ(non_manifold_vertices(input), reference::non_manifold_vertices(input))
        << "seed " << seed;
  }
}

// Small meshes take the passes' one-partition paths; 100k vertices the partitioned ones.
INSTANTIATE_TEST_SUITE_P(Sizes, LinearPasses,
                         ::testing::Values(std::pair<std::size_t, std::size_t>{40, 120},
                                           std::pair<std::size_t, std::size_t>{2000, 9000},
                                           std::pair<std::size_t, std::size_t>{100000, 250000}));

TEST(LinearPasses, UnreferencedVerticesKeepTheirOrder) {
  Mesh mesh = awkward_mesh(100000, 20000, 7);  // most vertices unused
  std::vector<uint8_t> used(mesh.vertex_count(), 0);
  for (const uint32_t v : mesh.indices) used[v] = 1;
  std::vector<float> expected;
  for (std::size_t v = 0; v < mesh.vertex_count(); ++v) {
    if (used[v])
      expected.insert(expected.end(),
                      {mesh.vertices[v * 3], mesh.vertices[v * 3 + 1], mesh.vertices[v * 3 + 2]});
  }
  const Mesh before = mesh;
  const std::size_t removed = remove_unreferenced_vertices(mesh);
  EXPECT_EQ(removed, before.vertex_count() - expected.size() / 3);
  EXPECT_EQ(mesh.vertices, expected);
  for (std::size_t i = 0; i < mesh.indices.size(); ++i) {
    for (int axis = 0; axis < 3; ++axis) {
      EXPECT_EQ(mesh.vertices[mesh.indices[i] * 3 + axis],
                before.vertices[before.indices[i] * 3 + axis]);
    }
  }
}

}  // namespace test_mesh_linear_passes
}  // namespace cube3d
