// Exhaustive checks of the generated cell triangulation: every case and every decision of its
// ambiguous faces, then every sign pattern of two neighbouring cells.
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <random>
#include <set>
#include <utility>

#include "cube3d/mesh/marching_cubes.h"
#include "cube3d/mesh/mc_triangulation.h"
#include "cube3d/mesh/mesh_stats.h"

namespace cube3d {
namespace test_mc_triangulation {

using mc::Triangulation;

bool inside(unsigned cell_case, unsigned corner) { return ((cell_case >> corner) & 1u) != 0; }

std::array<double, 3> corner_position(unsigned corner) {
  return {double(corner & 1u), double((corner >> 1) & 1u), double((corner >> 2) & 1u)};
}

// Edge vertices at the edge midpoints: no corner then lies on a face segment.
std::array<double, 3> edge_midpoint(unsigned edge) {
  unsigned c0 = 0, c1 = 0;
  mc::edge_corners(edge, c0, c1);
  const auto a = corner_position(c0);
  const auto b = corner_position(c1);
  return {(a[0] + b[0]) / 2, (a[1] + b[1]) / 2, (a[2] + b[2]) / 2};
}

// Faces (axis * 2 + side) that contain an edge, from its corners' positions.
std::set<unsigned> faces_of_edge(unsigned edge) {
  unsigned c0 = 0, c1 = 0;
  mc::edge_corners(edge, c0, c1);
  std::set<unsigned> faces;
  for (unsigned axis = 0; axis < 3; ++axis) {
    if (((c0 >> axis) & 1u) == ((c1 >> axis) & 1u)) {
      faces.insert(axis * 2 + ((c0 >> axis) & 1u));
    }
  }
  return faces;
}

bool crosses(unsigned cell_case, unsigned edge) {
  unsigned c0 = 0, c1 = 0;
  mc::edge_corners(edge, c0, c1);
  return inside(cell_case, c0) != inside(cell_case, c1);
}

TEST(MarchingCubesTable, EdgeCornersAreAdjacent) {
  std::set<std::pair<unsigned, unsigned>> seen;
  for (unsigned edge = 0; edge < 12; ++edge) {
    unsigned c0 = 0, c1 = 0;
    mc::edge_corners(edge, c0, c1);
    EXPECT_EQ(c0 ^ c1, 1u << (edge / 4));
    EXPECT_LT(c0, c1);
    seen.insert({c0, c1});
  }
  EXPECT_EQ(seen.size(), 12u);
}

TEST(MarchingCubesTable, EveryCaseIsClosedOrientedAndManifold) {
  const Triangulation& table = Triangulation::instance();
  std::size_t entries = 0;
  for (unsigned cell_case = 0; cell_case < 256; ++cell_case) {
    const auto faces = table.ambiguous_faces(cell_case);
    // Ambiguous faces: listed in face order, inside corners really inside, diagonals.
    for (std::size_t n = 0; n < faces.size(); ++n) {
      if (n > 0) {
        EXPECT_LT(faces[n - 1].face, faces[n].face);
      }
      const auto& f = faces[n];
      EXPECT_TRUE(inside(cell_case, f.inside[0]) && inside(cell_case, f.inside[1]));
      EXPECT_TRUE(!inside(cell_case, f.outside[0]) && !inside(cell_case, f.outside[1]));
      EXPECT_EQ(__builtin_popcount(f.inside[0] ^ f.inside[1]), 2);
      EXPECT_EQ(__builtin_popcount(f.outside[0] ^ f.outside[1]), 2);
    }
    for (unsigned mask = 0; mask < (1u << faces.size()); ++mask) {
      ++entries;
      SCOPED_TRACE("case " + std::to_string(cell_case) + " mask " + std::to_string(mask));
      const mc::CellTriangulation tri = table.triangulation(cell_case, mask);
      ASSERT_EQ(tri.refs.size() % 3, 0u);
      if (cell_case == 0 || cell_case == 255) {
        EXPECT_TRUE(tri.refs.empty());
        continue;
      }
      // Directed edges of the triangles.
      std::map<std::pair<unsigned, unsigned>, int> directed;
      std::set<unsigned> used;
      for (std::size_t t = 0; t < tri.refs.size(); t += 3) {
        for (int e = 0; e < 3; ++e) {
          const unsigned a = tri.refs[t + e];
          const unsigned b = tri.refs[t + (e + 1) % 3];
          ASSERT_NE(a, b);
          ++directed[{a, b}];
          used.insert(a);
        }
      }
      for (const unsigned ref : used) {
        if (ref < 12) {
          EXPECT_TRUE(crosses(cell_case, ref)) << "edge " << ref << " has no crossing";
        } else {
          EXPECT_LT(ref - mc::kCentreRef, tri.centre_loops.size());
        }
      }
      for (unsigned edge = 0; edge < 12; ++edge) {
        EXPECT_EQ(used.count(edge), crosses(cell_case, edge) ? 1u : 0u) << "edge " << edge;
      }
      // Inside the cell every edge pairs with its reverse once (manifold, consistently wound);
      // what is left is the boundary, which must run along the cell faces.
      std::map<unsigned, int> out_degree, in_degree;
      for (const auto& [edge, count] : directed) {
        EXPECT_EQ(count, 1);
        const auto [a, b] = edge;
        const bool paired = directed.count({b, a}) != 0;
        if (paired) {
          // A diagonal between two vertices on one face could also be used by the neighbour.
          if (a < 12 && b < 12) {
            std::set<unsigned> common;
            for (const unsigned f : faces_of_edge(a)) {
              if (faces_of_edge(b).count(f) != 0) {
                common.insert(f);
              }
            }
            EXPECT_TRUE(common.empty()) << "diagonal " << a << "-" << b << " lies on a face";
          }
          continue;
        }
        ASSERT_LT(a, 12u) << "a centre vertex on the boundary";
        ASSERT_LT(b, 12u) << "a centre vertex on the boundary";
        ++out_degree[a];
        ++in_degree[b];
        // The segment lies on the one face both edges share.
        std::vector<unsigned> common;
        for (const unsigned f : faces_of_edge(a)) {
          if (faces_of_edge(b).count(f) != 0) {
            common.push_back(f);
          }
        }
        ASSERT_EQ(common.size(), 1u) << "boundary " << a << "->" << b;
        const unsigned face = common[0];
        const unsigned axis = face / 2;
        const double normal_sign = (face % 2) != 0 ? 1.0 : -1.0;
        const auto p = edge_midpoint(a);
        const auto q = edge_midpoint(b);
        // Corners of the face split by the segment; the cut-off side (fewer corners) must be
        // inside if it lies to the right seen from outside, outside if it lies to the left.
        std::vector<unsigned> left, right;
        for (unsigned corner = 0; corner < 8; ++corner) {
          if (((corner >> axis) & 1u) != face % 2) {
            continue;
          }
          const auto x = corner_position(corner);
          const double d[3] = {q[0] - p[0], q[1] - p[1], q[2] - p[2]};
          const double r[3] = {x[0] - p[0], x[1] - p[1], x[2] - p[2]};
          const double cross[3] = {d[1] * r[2] - d[2] * r[1], d[2] * r[0] - d[0] * r[2],
                                   d[0] * r[1] - d[1] * r[0]};
          (cross[axis] * normal_sign > 0 ? left : right).push_back(corner);
        }
        ASSERT_EQ(left.size() + right.size(), 4u);
        if (right.size() <= left.size()) {
          for (const unsigned c : right) {
            EXPECT_TRUE(inside(cell_case, c)) << "segment " << a << "->" << b;
          }
        }
        if (left.size() <= right.size()) {
          for (const unsigned c : left) {
            EXPECT_FALSE(inside(cell_case, c)) << "segment " << a << "->" << b;
          }
        }
        // On an ambiguous face the decision picks which corners are cut off.
        for (std::size_t n = 0; n < faces.size(); ++n) {
          if (faces[n].face == face) {
            const bool joined = ((mask >> n) & 1u) != 0;
            ASSERT_EQ(std::min(left.size(), right.size()), 1u);
            const unsigned cut = left.size() == 1 ? left[0] : right[0];
            EXPECT_EQ(inside(cell_case, cut), !joined) << "face " << face;
          }
        }
      }
      // Every crossing starts one boundary segment and ends one: closed loops.
      for (unsigned edge = 0; edge < 12; ++edge) {
        if (crosses(cell_case, edge)) {
          EXPECT_EQ(out_degree[edge], 1) << "edge " << edge;
          EXPECT_EQ(in_degree[edge], 1) << "edge " << edge;
        }
      }
    }
  }
  EXPECT_GT(entries, 256u);
}

// A single inside corner: the triangle faces away from it.
TEST(MarchingCubesTable, SingleCornerFacesOutward) {
  const Triangulation& table = Triangulation::instance();
  for (unsigned corner = 0; corner < 8; ++corner) {
    const mc::CellTriangulation tri = table.triangulation(1u << corner, 0);
    ASSERT_EQ(tri.refs.size(), 3u);
    const auto a = edge_midpoint(tri.refs[0]);
    const auto b = edge_midpoint(tri.refs[1]);
    const auto c = edge_midpoint(tri.refs[2]);
    const double e1[3] = {b[0] - a[0], b[1] - a[1], b[2] - a[2]};
    const double e2[3] = {c[0] - a[0], c[1] - a[1], c[2] - a[2]};
    const double n[3] = {e1[1] * e2[2] - e1[2] * e2[1], e1[2] * e2[0] - e1[0] * e2[2],
                         e1[0] * e2[1] - e1[1] * e2[0]};
    const auto x = corner_position(corner);
    const double away = n[0] * (a[0] - x[0]) + n[1] * (a[1] - x[1]) + n[2] * (a[2] - x[2]);
    EXPECT_GT(away, 0.0) << "corner " << corner;
  }
}

// Two neighbouring cells along each axis, every sign pattern of their 12 corners (with equal and
// with random magnitudes, so that both decisions of a shared ambiguous face occur), inside an
// outside border: the mesh must be watertight with every solid part of positive volume.
TEST(MarchingCubesTable, NeighbouringCellsStitchWatertight) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> magnitude(0.05f, 1.0f);
  std::size_t checked = 0;
  for (unsigned axis = 0; axis < 3; ++axis) {
    std::array<int64_t, 3> dims{4, 4, 4};
    dims[axis] = 5;
    for (unsigned pattern = 0; pattern < 4096; ++pattern) {
      for (int variant = 0; variant < 2; ++variant) {
        std::vector<float> values(static_cast<std::size_t>(dims[0] * dims[1] * dims[2]), -1.0f);
        unsigned bit = 0;
        for (int64_t a = 0; a < 3; ++a) {
          for (int64_t b = 0; b < 2; ++b) {
            for (int64_t c = 0; c < 2; ++c) {
              std::array<int64_t, 3> p{};
              p[axis] = 1 + a;
              p[(axis + 1) % 3] = 1 + b;
              p[(axis + 2) % 3] = 1 + c;
              const float m = variant == 0 ? 1.0f : magnitude(rng);
              values[static_cast<std::size_t>((p[0] * dims[1] + p[1]) * dims[2] + p[2])] =
                  ((pattern >> bit) & 1u) != 0 ? m : -m;
              ++bit;
            }
          }
        }
        const Mesh mesh = marching_cubes(GridView{values, dims}, {.level = 0.0f, .threads = 1});
        if (pattern == 0) {
          EXPECT_TRUE(mesh.empty());
          continue;
        }
        const EdgeReport report = edge_report(mesh);
        ASSERT_TRUE(report.watertight())
            << "axis " << axis << " pattern " << pattern << " variant " << variant << ": "
            << report.boundary << " boundary, " << report.misoriented << " misoriented, "
            << report.non_manifold << " non-manifold of " << report.edges;
        // Every inside point touches the outside border, so there are no voids: each component
        // is a solid and must enclose a positive volume.
        std::size_t components = 0;
        const auto labels = face_components(mesh, &components);
        std::vector<Mesh> parts(components);
        for (std::size_t f = 0; f < labels.size(); ++f) {
          auto& part = parts[labels[f]];
          part.vertices = mesh.vertices;
          part.indices.insert(part.indices.end(), mesh.indices.begin() + f * 3,
                              mesh.indices.begin() + f * 3 + 3);
        }
        for (const Mesh& part : parts) {
          ASSERT_GT(signed_volume(part), 0.0) << "axis " << axis << " pattern " << pattern;
        }
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 3u * 4095u * 2u);
}

}  // namespace test_mc_triangulation
}  // namespace cube3d
