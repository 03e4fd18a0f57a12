#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "cube3d/core/error.h"
#include "cube3d/mesh/marching_cubes.h"
#include "cube3d/mesh/mesh_stats.h"
#include "mesh_test_util.h"

namespace cube3d {
namespace test_marching_cubes {

using test::kPi;
using test::sample_resolution;
using test::SampledGrid;

struct Shape {
  std::string name;
  std::function<double(double, double, double)> field;  // positive inside
  int64_t euler;
  double area;
  double volume;
  // Relative area tolerance at resolution 7 (h = 2.1 / 128).
  double area_tolerance = 0.01;
};

// Sizes keep every feature several cells wide at resolution 5 (cell 0.066) and keep faces off
// the grid planes. The box: marching cubes cuts its 12 edges with chamfers at most one cell wide.
// They lose at most h^2 / 2 of volume per unit edge length (0.06% at resolution 7), but area to
// first order: a chamfer of width w replaces 2w of faces by sqrt(2) w, so the area may fall short
// by up to (2 - sqrt 2) h per unit edge length, 1.9% of this box at resolution 7 (measured:
// 1.0%). The box's area is checked against that bound; everything else within 1%.
std::vector<Shape> shapes() {
  constexpr double R = 0.6, r = 0.25;             // torus radii
  constexpr double a = 0.71, b = 0.52, c = 0.43;  // box half sizes
  return {
      {"sphere", [](double x, double y, double z) { return test::sphere(x, y, z, 0.0, 0.8); }, 2,
       4 * kPi * 0.64, 4.0 / 3.0 * kPi * 0.512},
      {"torus",
       [=](double x, double y, double z) {
         const double q = std::sqrt(x * x + y * y) - R;
         return r - std::sqrt(q * q + z * z);
       },
       0, 4 * kPi * kPi * R * r, 2 * kPi * kPi * R * r * r},
      {"two_spheres",
       [](double x, double y, double z) {
         return std::max(test::sphere(x, y, z, -0.5, 0.4), test::sphere(x, y, z, 0.5, 0.4));
       },
       4, 2 * 4 * kPi * 0.16, 2 * 4.0 / 3.0 * kPi * 0.064},
      {"box",
       [=](double x, double y, double z) {
         return std::min({a - std::abs(x), b - std::abs(y), c - std::abs(z)});
       },
       2, 8 * (a * b + b * c + c * a), 8 * a * b * c,
       (2 - std::sqrt(2.0)) * (2.1 / 128) * 8 * (a + b + c) / (8 * (a * b + b * c + c * a))},
  };
}

class MarchingCubesShapes : public ::testing::TestWithParam<int64_t> {};

TEST_P(MarchingCubesShapes, WatertightOutwardAndAccurate) {
  const int64_t resolution = GetParam();
  for (const Shape& shape : shapes()) {
    SCOPED_TRACE(shape.name + " at resolution " + std::to_string(resolution));
    const SampledGrid grid = sample_resolution(resolution, shape.field);
    Mesh mesh = marching_cubes(grid.view(), {.level = 0.0f, .threads = 2});
    ASSERT_FALSE(mesh.empty());
    const EdgeReport edges = edge_report(mesh);
    EXPECT_TRUE(edges.watertight()) << edges.boundary << " boundary, " << edges.misoriented
                                    << " misoriented, " << edges.non_manifold << " non-manifold";
    EXPECT_EQ(euler_characteristic(mesh), shape.euler);
    index_to_world(mesh, grid.dims);
    const double volume = signed_volume(mesh);
    const double area = surface_area(mesh);
    EXPECT_GT(volume, 0.0) << "normals point inwards";
    if (resolution >= 7) {
      EXPECT_NEAR(volume / shape.volume, 1.0, 0.01);
      EXPECT_NEAR(area / shape.area, 1.0, shape.area_tolerance);
      RecordProperty(shape.name + "_area_error", std::to_string(area / shape.area - 1.0));
      RecordProperty(shape.name + "_volume_error", std::to_string(volume / shape.volume - 1.0));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Resolutions, MarchingCubesShapes, ::testing::Values(5, 6, 7));

TEST(MarchingCubes, CoarseSphereAndBox) {
  for (const Shape& shape : shapes()) {
    if (shape.name != "sphere" && shape.name != "box") {
      continue;
    }
    const SampledGrid grid = sample_resolution(4, shape.field);
    const Mesh mesh = marching_cubes(grid.view());
    EXPECT_TRUE(edge_report(mesh).watertight()) << shape.name;
    EXPECT_EQ(euler_characteristic(mesh), 2) << shape.name;
    EXPECT_GT(signed_volume(mesh), 0.0) << shape.name;
  }
}

// A noisy field (many ambiguous faces and saddle cells) with an outside border.
SampledGrid noise_grid(uint32_t seed, int64_t n) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  SampledGrid grid;
  grid.dims = {n, n + 1, n + 2};
  grid.values.resize(static_cast<std::size_t>(n * (n + 1) * (n + 2)));
  std::size_t at = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n + 1; ++j) {
      for (int64_t k = 0; k < n + 2; ++k) {
        const bool border = i == 0 || j == 0 || k == 0 || i == n - 1 || j == n || k == n + 1;
        grid.values[at++] = border ? -1.0f : uniform(rng);
      }
    }
  }
  return grid;
}

TEST(MarchingCubes, RandomFieldsAreWatertight) {
  bool saw_centre = false;
  for (uint32_t seed = 1; seed <= 30; ++seed) {
    const SampledGrid grid = noise_grid(seed, 14);
    const Mesh mesh = marching_cubes(grid.view(), {.level = 0.0f, .threads = 3});
    const EdgeReport edges = edge_report(mesh);
    ASSERT_TRUE(edges.watertight())
        << "seed " << seed << ": " << edges.boundary << " boundary, " << edges.misoriented
        << " misoriented, " << edges.non_manifold << " non-manifold";
    EXPECT_GT(signed_volume(mesh), 0.0);
    // Count the crossing edges: the first that many vertices are they, the rest are centres.
    std::size_t crossings = 0;
    const auto& d = grid.dims;
    for (int64_t i = 0; i < d[0]; ++i) {
      for (int64_t j = 0; j < d[1]; ++j) {
        for (int64_t k = 0; k < d[2]; ++k) {
          const bool s = grid.view().at(i, j, k) > 0;
          crossings += (i + 1 < d[0] && s != (grid.view().at(i + 1, j, k) > 0));
          crossings += (j + 1 < d[1] && s != (grid.view().at(i, j + 1, k) > 0));
          crossings += (k + 1 < d[2] && s != (grid.view().at(i, j, k + 1) > 0));
        }
      }
    }
    ASSERT_GE(mesh.vertex_count(), crossings);
    saw_centre |= mesh.vertex_count() > crossings;
  }
  EXPECT_TRUE(saw_centre) << "the noise never exercised a saddle loop with a centre vertex";
}

TEST(MarchingCubes, OutputDoesNotDependOnThreads) {
  const auto torus = shapes()[1].field;
  const SampledGrid smooth = sample_resolution(6, torus);
  const SampledGrid noisy = noise_grid(99, 40);
  for (const SampledGrid* grid : {&smooth, &noisy}) {
    const Mesh reference = marching_cubes(grid->view(), {.level = 0.0f, .threads = 1});
    for (const int threads : {2, 3, 4, 7, 64}) {
      const Mesh other = marching_cubes(grid->view(), {.level = 0.0f, .threads = threads});
      EXPECT_EQ(other.vertices, reference.vertices) << threads << " threads";
      EXPECT_EQ(other.indices, reference.indices) << threads << " threads";
    }
  }
}

TEST(MarchingCubes, VerticesInterpolateEdges) {
  // value = x index - 2.25 along x: the crossing of every x-edge (2, j, k)-(3, j, k) is at 2.25.
  std::vector<float> values(5 * 3 * 4);
  for (int i = 0; i < 5; ++i) {
    for (int n = 0; n < 12; ++n) {
      values[static_cast<std::size_t>(i * 12 + n)] = 2.25f - static_cast<float>(i);
    }
  }
  const Mesh mesh = marching_cubes(GridView{values, {5, 3, 4}});
  ASSERT_EQ(mesh.vertex_count(), 12u);  // one per x-edge between planes 2 and 3
  for (std::size_t v = 0; v < mesh.vertex_count(); ++v) {
    EXPECT_FLOAT_EQ(mesh.vertices[v * 3], 2.25f);
  }
  EXPECT_EQ(mesh.face_count(), 2u * 2u * 3u);
  // Inside is x < 2.25: the plane's normal must point to +x.
  for (std::size_t f = 0; f < mesh.face_count(); ++f) {
    const float* a = &mesh.vertices[mesh.indices[f * 3] * 3];
    const float* b = &mesh.vertices[mesh.indices[f * 3 + 1] * 3];
    const float* c = &mesh.vertices[mesh.indices[f * 3 + 2] * 3];
    const float nx = (b[1] - a[1]) * (c[2] - a[2]) - (b[2] - a[2]) * (c[1] - a[1]);
    EXPECT_GT(nx, 0.0f);
  }
  // The open surface ends at the grid border without any non-manifold edge.
  const EdgeReport edges = edge_report(mesh);
  EXPECT_EQ(edges.non_manifold + edges.misoriented, 0u);
  EXPECT_EQ(edges.boundary, 2u * (2u + 3u));
}

TEST(MarchingCubes, LevelCrossing) {
  const std::vector<float> constant(27, -0.5f);
  const GridView flat{constant, {3, 3, 3}};
  EXPECT_FALSE(has_level_crossing(flat, 0.0f));
  EXPECT_TRUE(marching_cubes(flat).empty());
  EXPECT_FALSE(has_level_crossing(flat, -0.5f));  // inside means strictly above the level
  EXPECT_TRUE(has_level_crossing(flat, -0.6f) == false);
  std::vector<float> ramp(27);
  for (std::size_t n = 0; n < ramp.size(); ++n) {
    ramp[n] = static_cast<float>(n) - 13.5f;
  }
  EXPECT_TRUE(has_level_crossing(GridView{ramp, {3, 3, 3}}, 0.0f));
  EXPECT_TRUE(has_level_crossing(GridView{ramp, {3, 3, 3}}, 5.0f));
  EXPECT_FALSE(has_level_crossing(GridView{ramp, {3, 3, 3}}, 20.0f));
  // A level other than 0 moves the surface.
  const Mesh mesh = marching_cubes(GridView{ramp, {3, 3, 3}}, {.level = 5.0f, .threads = 1});
  EXPECT_FALSE(mesh.empty());
}

TEST(MarchingCubes, RejectsBadGrids) {
  std::vector<float> values(8, 1.0f);
  values[3] = std::nanf("");
  try {
    marching_cubes(GridView{values, {2, 2, 2}});
    FAIL() << "NaN accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
  }
  EXPECT_THROW(marching_cubes(GridView{values, {2, 2, 3}}), Error);
  EXPECT_THROW(marching_cubes(GridView{values, {1, 2, 4}}), Error);
}

TEST(MarchingCubes, InfiniteValuesStayFinite) {
  std::vector<float> values(27, -std::numeric_limits<float>::infinity());
  values[13] = std::numeric_limits<float>::infinity();  // the centre
  const Mesh mesh = marching_cubes(GridView{values, {3, 3, 3}});
  EXPECT_FALSE(mesh.empty());
  for (const float x : mesh.vertices) {
    EXPECT_TRUE(std::isfinite(x));
  }
}

// Every vertex of one set lies within tol (max-norm) of a vertex of the other.
double max_nearest_distance(const std::vector<double>& a, const std::vector<float>& b) {
  double worst = 0.0;
  for (std::size_t n = 0; n < a.size(); n += 3) {
    double best = 1e30;
    for (std::size_t m = 0; m < b.size(); m += 3) {
      const double d = std::max(
          {std::abs(a[n] - b[m]), std::abs(a[n + 1] - b[m + 1]), std::abs(a[n + 2] - b[m + 2])});
      best = std::min(best, d);
    }
    worst = std::max(worst, best);
  }
  return worst;
}

class MarchingCubesGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(MarchingCubesGolden, MatchesScikitImageVertices) {
  const std::string path =
      std::string(CUBE3D_TEST_DATA_DIR) + "/golden/" + GetParam() + "/expected.safetensors";
  const test::Tensor grid = test::read_safetensors(path, "grid_logits_res4");
  const test::Tensor level = test::read_safetensors(path, "mc_level");
  const test::Tensor golden = test::read_safetensors(path, "mc_vertices_index_space");
  const test::Tensor golden_faces = test::read_safetensors(path, "mc_faces");
  ASSERT_EQ(grid.shape, (std::vector<int64_t>{17, 17, 17}));
  const std::vector<float> values(grid.values.begin(), grid.values.end());
  const GridView view{values, {17, 17, 17}};
  const auto mc_level = static_cast<float>(level.values.at(0));
  EXPECT_EQ(has_level_crossing(view, 0.0f), mc_level == 0.0f);

  const Mesh mesh = marching_cubes(view, {.level = mc_level, .threads = 2});
  ASSERT_EQ(mesh.vertex_count(), golden.values.size() / 3);
  const std::vector<double> ours(mesh.vertices.begin(), mesh.vertices.end());
  const std::vector<float> theirs(golden.values.begin(), golden.values.end());
  EXPECT_LT(max_nearest_distance(golden.values, mesh.vertices), 1e-4);
  EXPECT_LT(max_nearest_distance(ours, theirs), 1e-4);

  Mesh reference;
  reference.vertices = theirs;
  reference.indices.assign(golden_faces.values.begin(), golden_faces.values.end());
  EXPECT_NEAR(surface_area(mesh) / surface_area(reference), 1.0, 0.005);
  // Same vertices and outward winding: the signed volumes agree (open or closed).
  EXPECT_NEAR(signed_volume(mesh) / signed_volume(reference), 1.0, 0.005);
  EXPECT_EQ(edge_report(mesh).non_manifold, 0u);
  EXPECT_EQ(edge_report(mesh).misoriented, 0u);
}

INSTANTIATE_TEST_SUITE_P(Golden, MarchingCubesGolden, ::testing::Values("tiny_v01", "tiny_v05"));

}  // namespace test_marching_cubes
}  // namespace cube3d
