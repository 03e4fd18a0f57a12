#include "cube3d/mesh/hierarchical_occupancy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/mesh/marching_cubes.h"
#include "mesh_test_util.h"

namespace cube3d {
namespace test_hierarchical_occupancy {

using Field = std::function<double(double, double, double)>;

// Coarse cells of the default first level (r0 = 5) are 2.1 / 32 = 0.0656 wide.
constexpr double kCoarseCell = 2.1 / 32;

// Evaluates `field` exactly as test::sample does (same world coordinates, same rounding), so
// the dense reference and the sampler see identical values. Records every call's indices.
struct AnalyticEvaluator {
  int64_t resolution_base;
  Field field;
  std::vector<std::vector<int64_t>>* calls = nullptr;

  void operator()(std::span<const int64_t> flat, std::span<float> out) const {
    const int64_t n = grid_points_per_axis(resolution_base);
    const double step = (double{kGridBoundMax} - kGridBoundMin) / static_cast<double>(n - 1);
    for (std::size_t p = 0; p < flat.size(); ++p) {
      const int64_t i = flat[p] / (n * n), j = flat[p] / n % n, k = flat[p] % n;
      out[p] = static_cast<float>(
          field(kGridBoundMin + i * step, kGridBoundMin + j * step, kGridBoundMin + k * step));
    }
    if (calls != nullptr) {
      calls->emplace_back(flat.begin(), flat.end());
    }
  }
};

struct Comparison {
  test::SampledGrid dense;
  std::vector<float> sampled;
  OccupancySamplingReport report;
  Mesh dense_mesh;
  Mesh sampled_mesh;
  // Cells that the dense field's surface crosses with a corner whose sampled value differs.
  int64_t inexact_crossing_cells = 0;
  // Points whose sampled value lies on the other side of the level than the dense value.
  int64_t wrong_side_points = 0;

  double reduction() const {
    return static_cast<double>(report.dense_points) / static_cast<double>(report.points_evaluated);
  }
};

Comparison compare(int64_t r, const Field& field, const OccupancySamplingOptions& options = {}) {
  Comparison c;
  c.dense = test::sample_resolution(r, field);
  c.sampled = sample_occupancy(r, AnalyticEvaluator{r, field}, options, &c.report);
  const MarchingCubesOptions mc{.level = options.level, .threads = 2};
  c.dense_mesh = marching_cubes(c.dense.view(), mc);
  c.sampled_mesh = marching_cubes(GridView{c.sampled, c.dense.dims}, mc);
  const int64_t n = c.dense.dims[0];
  const auto& d = c.dense.values;
  const auto at = [n](int64_t i, int64_t j, int64_t k) {
    return static_cast<std::size_t>((i * n + j) * n + k);
  };
  for (std::size_t p = 0; p < d.size(); ++p) {
    c.wrong_side_points += (d[p] > options.level) != (c.sampled[p] > options.level);
  }
  for (int64_t i = 0; i + 1 < n; ++i) {
    for (int64_t j = 0; j + 1 < n; ++j) {
      for (int64_t k = 0; k + 1 < n; ++k) {
        int inside = 0;
        bool exact = true;
        for (int corner = 0; corner < 8; ++corner) {
          const std::size_t p = at(i + (corner >> 2), j + (corner >> 1 & 1), k + (corner & 1));
          inside += d[p] > options.level;
          exact &= d[p] == c.sampled[p];
        }
        c.inexact_crossing_cells += inside != 0 && inside != 8 && !exact;
      }
    }
  }
  return c;
}

::testing::AssertionResult same_meshes(const Comparison& c) {
  if (c.dense_mesh.vertices == c.sampled_mesh.vertices &&
      c.dense_mesh.indices == c.sampled_mesh.indices) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "dense: " << c.dense_mesh.vertex_count() << " vertices, " << c.dense_mesh.face_count()
         << " faces; sampled: " << c.sampled_mesh.vertex_count() << " vertices, "
         << c.sampled_mesh.face_count() << " faces; " << c.inexact_crossing_cells
         << " crossing cells with an inexact corner, " << c.wrong_side_points
         << " points on the wrong side";
}

// The full set of guarantees for a field whose features span at least two coarse cells.
void expect_exact(const Comparison& c) {
  EXPECT_FALSE(c.dense_mesh.empty());
  EXPECT_TRUE(same_meshes(c));
  EXPECT_EQ(c.inexact_crossing_cells, 0);
  EXPECT_EQ(c.wrong_side_points, 0);
  EXPECT_EQ(c.report.points_evaluated,
            std::accumulate(c.report.points_per_level.begin(), c.report.points_per_level.end(),
                            int64_t{0}));
}

// --- Fields (positive inside) ---------------------------------------------------------------

double distance(double x, double y, double z, double cx, double cy, double cz) {
  return std::sqrt((x - cx) * (x - cx) + (y - cy) * (y - cy) + (z - cz) * (z - cz));
}

Field sphere(double cx, double cy, double cz, double radius) {
  return [=](double x, double y, double z) { return radius - distance(x, y, z, cx, cy, cz); };
}

Field torus(double major, double minor) {
  return [=](double x, double y, double z) {
    // Tilted about the x axis so that no grid plane is a symmetry plane.
    const double c = std::cos(0.4), s = std::sin(0.4);
    const double y2 = c * y - s * z, z2 = s * y + c * z;
    const double q = std::sqrt((x - 0.03) * (x - 0.03) + y2 * y2) - major;
    return minor - std::sqrt(q * q + z2 * z2);
  };
}

// The solid between two concentric spheres.
Field shell(double outer, double thickness) {
  return [=](double x, double y, double z) {
    const double d = distance(x, y, z, 0.02, -0.01, 0.03);
    return std::min(outer - d, d - (outer - thickness));
  };
}

// A deterministic jittered 3 x 3 x 3 lattice of small balls (radius 0.07 to 0.1: at least two
// coarse cells across), far enough apart not to touch.
Field blobs() {
  struct Ball {
    double x, y, z, radius;
  };
  std::vector<Ball> balls;
  uint32_t state = 12345;
  const auto uniform = [&state] {
    state = state * 1664525u + 1013904223u;
    return static_cast<double>(state >> 8) / static_cast<double>(1u << 24);
  };
  for (int i = -1; i <= 1; ++i) {
    for (int j = -1; j <= 1; ++j) {
      for (int k = -1; k <= 1; ++k) {
        const double jx = uniform(), jy = uniform(), jz = uniform(), r = uniform();
        balls.push_back({0.6 * i + 0.2 * (jx - 0.5), 0.6 * j + 0.2 * (jy - 0.5),
                         0.6 * k + 0.2 * (jz - 0.5), 0.07 + 0.03 * r});
      }
    }
  }
  return [balls](double x, double y, double z) {
    double value = -std::numeric_limits<double>::infinity();
    for (const Ball& b : balls) {
      value = std::max(value, b.radius - distance(x, y, z, b.x, b.y, b.z));
    }
    return value;
  };
}

// A sphere's distance field quantized to steps of 1/8: plateaus of values exactly at the level
// (0: outside), and crossings whose vertices land on grid points.
Field terraced_sphere() {
  return [](double x, double y, double z) {
    return std::floor(8.0 * (0.6 - distance(x, y, z, 0.05, -0.04, 0.02))) / 8.0;
  };
}

// World coordinate of grid point `index` of level r (as test::sample computes it).
double world(int64_t r, double index) {
  return kGridBoundMin + index * ((double{kGridBoundMax} - kGridBoundMin) / double(1 << r));
}

// --- Tests ------------------------------------------------------------------------------------

TEST(HierarchicalOccupancy, SpheresMatchDense) {
  struct Case {
    int64_t r;
    double cx, cy, cz, radius;
  };
  for (const Case& s : {Case{6, 0.0, 0.0, 0.0, 0.5}, Case{6, 0.13, -0.21, 0.07, 0.31},
                        Case{7, -0.11, 0.05, 0.19, 0.8}, Case{7, 0.31, 0.27, -0.4, 0.22},
                        Case{7, 0.013, -0.027, 0.041, 0.55}}) {
    SCOPED_TRACE("sphere r=" + std::to_string(s.r) + " radius " + std::to_string(s.radius));
    const Comparison c = compare(s.r, sphere(s.cx, s.cy, s.cz, s.radius));
    expect_exact(c);
    EXPECT_EQ(c.report.points_per_level.size(), static_cast<std::size_t>(s.r - 5 + 1));
    EXPECT_EQ(c.report.points_per_level[0], 33 * 33 * 33);
    EXPECT_GT(c.reduction(), 2.5);
  }
}

TEST(HierarchicalOccupancy, SphereAtResolution8EvaluatesTenTimesFewerPoints) {
  const Comparison c = compare(8, sphere(0.013, -0.027, 0.041, 0.55));
  expect_exact(c);
  EXPECT_EQ(c.report.dense_points, 257 * 257 * 257);
  // Measured: 703,821 points of 16,974,593 (24x).
  EXPECT_GE(c.reduction(), 10.0) << c.report.points_evaluated << " points";
  // One call per level (5, 6, 7, 8): the dilation margin leaves the repair nothing to chase.
  EXPECT_EQ(c.report.evaluator_calls, 4);
  EXPECT_EQ(c.report.repair_passes, 0);
}

TEST(HierarchicalOccupancy, TorusMatchesDense) {
  for (const int64_t r : {6, 7}) {
    SCOPED_TRACE("r=" + std::to_string(r));
    const Comparison c = compare(r, torus(0.6, 0.2));
    expect_exact(c);
    EXPECT_GT(c.reduction(), r == 7 ? 8.0 : 3.0);
  }
}

TEST(HierarchicalOccupancy, ThinShellMatchesDense) {
  // Two coarse cells thick: the inner and outer surfaces' refinement bands overlap.
  const Comparison c = compare(7, shell(0.75, 2 * kCoarseCell + 0.001));
  expect_exact(c);
  EXPECT_GT(c.reduction(), 4.0);
}

TEST(HierarchicalOccupancy, ManySmallBlobsMatchDense) {
  for (const int64_t r : {6, 7}) {
    SCOPED_TRACE("r=" + std::to_string(r));
    const Comparison c = compare(r, blobs());
    expect_exact(c);
    EXPECT_GT(c.reduction(), r == 7 ? 10.0 : 3.0);
  }
}

TEST(HierarchicalOccupancy, ValuesExactlyAtTheLevel) {
  // Plateaus of exact zeros (outside) next to 1/8 (inside).
  expect_exact(compare(7, terraced_sphere()));
  // The same field meshed at another level: the plateau at 1/8 is now outside.
  expect_exact(compare(7, terraced_sphere(), {.level = 0.125f}));
  // A half-space whose boundary plane holds grid points of every level, valued exactly 0.
  const double plane = world(5, 14);
  expect_exact(compare(7, [plane](double x, double, double) { return x - plane; }));
}

// The fill is the trilinear interpolation of the coarse cell: exact (up to float rounding) for a
// field that is trilinear itself, far from the surface too.
TEST(HierarchicalOccupancy, FillIsTrilinear) {
  const Field trilinear = [](double x, double y, double z) {
    return 0.2 + 0.5 * x - 0.3 * y + 0.25 * z + 0.4 * x * y - 0.2 * y * z + 0.3 * x * z +
           0.6 * x * y * z;
  };
  const Comparison c = compare(7, trilinear);
  expect_exact(c);
  float worst = 0.0f;
  for (std::size_t p = 0; p < c.sampled.size(); ++p) {
    worst = std::max(worst, std::abs(c.sampled[p] - c.dense.values[p]));
  }
  EXPECT_LT(worst, 1e-5f);
}

// The refined region, recomputed by brute force: at r = 6 from r0 = 5, the second level evaluates
// exactly the new points (an odd coordinate) of the cells within `dilation` cells (a box) of a
// coarse cell whose corners straddle the level. Covers both dilation paths (repeated passes up to
// 3, one sweep per axis beyond).
TEST(HierarchicalOccupancy, RefinesExactlyTheDilatedCrossingCells) {
  const Field field = blobs();
  const test::SampledGrid dense = test::sample_resolution(6, field);
  const auto value = [&](int64_t i, int64_t j, int64_t k) { return dense.view().at(i, j, k); };
  constexpr int64_t cells = 32;
  std::vector<std::array<int64_t, 3>> crossing;
  for (int64_t a = 0; a < cells; ++a) {
    for (int64_t b = 0; b < cells; ++b) {
      for (int64_t c = 0; c < cells; ++c) {
        int inside = 0;
        for (int corner = 0; corner < 8; ++corner) {
          inside += value(2 * (a + (corner >> 2)), 2 * (b + (corner >> 1 & 1)),
                          2 * (c + (corner & 1))) > 0.0f;
        }
        if (inside != 0 && inside != 8) {
          crossing.push_back({a, b, c});
        }
      }
    }
  }
  ASSERT_FALSE(crossing.empty());
  for (const int64_t dilation : {0, 1, 2, 3, 4, 6, 40}) {
    std::vector<uint8_t> covered(65 * 65 * 65, 0);
    for (const auto& cell : crossing) {
      int64_t lo[3], hi[3];
      for (int axis = 0; axis < 3; ++axis) {
        lo[axis] = 2 * std::max<int64_t>(cell[axis] - dilation, 0);
        hi[axis] = 2 * (std::min<int64_t>(cell[axis] + dilation, cells - 1) + 1);
      }
      for (int64_t x = lo[0]; x <= hi[0]; ++x) {
        for (int64_t y = lo[1]; y <= hi[1]; ++y) {
          for (int64_t z = lo[2]; z <= hi[2]; ++z) {
            covered[static_cast<std::size_t>((x * 65 + y) * 65 + z)] = (x | y | z) & 1;
          }
        }
      }
    }
    const int64_t expected = std::count(covered.begin(), covered.end(), uint8_t{1});
    OccupancySamplingReport report;
    (void)sample_occupancy(6, AnalyticEvaluator{6, field},
                           {.dilation = dilation, .max_repair_passes = 0}, &report);
    ASSERT_EQ(report.points_per_level.size(), 2u);
    EXPECT_EQ(report.points_per_level[1], expected) << "dilation " << dilation;
  }
}

// The documented limit: a feature that fits between the coarsest samples is lost unless a
// coarsest sample lands in it. Here a ball of radius 0.025 sits at the centre of a level-5 cell
// (its corners are 0.057 away): the default run sees no surface at all.
TEST(HierarchicalOccupancy, FeatureSmallerThanACoarseCellNeedsAFinerFirstLevel) {
  const double centre = world(5, 16.5);
  const Field tiny = sphere(centre, centre, centre, 0.025);
  const Comparison missed = compare(7, tiny);
  EXPECT_FALSE(missed.dense_mesh.empty());
  EXPECT_TRUE(missed.sampled_mesh.empty());
  EXPECT_FALSE(has_level_crossing(GridView{missed.sampled, missed.dense.dims}, 0.0f));
  EXPECT_EQ(missed.report.points_evaluated, 33 * 33 * 33);  // the first level only
  EXPECT_EQ(missed.report.evaluator_calls, 1);
  // A larger dilation cannot help (there is nothing to dilate); a finer first level samples
  // the ball's centre (a level-6 point) and then refines it exactly.
  EXPECT_TRUE(compare(7, tiny, {.dilation = 4}).sampled_mesh.empty());
  expect_exact(compare(7, tiny, {.coarsest_resolution_base = 6}));
}

// The same ball two coarse cells beyond a resolved surface (a half-space): the dilation margin
// decides. With the default margin (1) the ball is dropped cleanly (the result is exactly the
// half-space alone); with a margin of 2 its coarse cell is refined and it comes out exactly.
TEST(HierarchicalOccupancy, FeatureSmallerThanACoarseCellNearASurfaceNeedsALargerDilation) {
  const double wall = world(5, 12.3);  // crosses the coarse cells of layer 12
  const Field half_space = [wall](double x, double, double) { return wall - x; };
  const Field ball = sphere(world(5, 14.5), world(5, 16.5), world(5, 16.5), 0.025);  // layer 14
  const Field both = [&](double x, double y, double z) {
    return std::max(half_space(x, y, z), ball(x, y, z));
  };
  const Comparison missed = compare(7, both);
  EXPECT_FALSE(same_meshes(missed));
  EXPECT_GT(missed.dense_mesh.face_count(), missed.sampled_mesh.face_count());
  const Comparison wall_only = compare(7, half_space);
  EXPECT_EQ(missed.sampled_mesh.vertices, wall_only.dense_mesh.vertices);
  EXPECT_EQ(missed.sampled_mesh.indices, wall_only.dense_mesh.indices);
  expect_exact(compare(7, both, {.dilation = 2}));
}

// Negative controls, so that the equalities above cannot hold vacuously: without the margin and
// without the repair passes the refinement misses what it should catch, and the comparison says
// so. Each time, the margin alone or the repair passes alone restore the exact result.
//
// First a sign change: a half-space y < y0 (y0 just below coarse row 12) with a sharp ridge along
// z that rises 1.4 coarse cells above it, narrower than a coarse cell at its foot, so the coarse
// samples see a flat floor. Without a margin only the floor's cells are refined; the ridge tip
// pokes into filled (outside) cells, and points inside the ridge come out on the wrong side.
TEST(HierarchicalOccupancy, NegativeControlMissedSignChange) {
  const double xc = world(5, 16.5), y0 = world(5, 12) - 0.1 * kCoarseCell;
  const Field ridge = [=](double x, double y, double) {
    const double peak =
        1.4 * kCoarseCell * std::max(0.0, 1.0 - std::abs(x - xc) / (0.5 * kCoarseCell));
    return y0 + peak - y;
  };
  const Comparison bare = compare(7, ridge, {.dilation = 0, .max_repair_passes = 0});
  EXPECT_FALSE(same_meshes(bare));
  EXPECT_GT(bare.inexact_crossing_cells, 0);
  EXPECT_GT(bare.wrong_side_points, 0);

  expect_exact(compare(7, ridge));                                 // the default margin of one cell
  const Comparison repaired = compare(7, ridge, {.dilation = 0});  // repair passes only
  expect_exact(repaired);
  EXPECT_GT(repaired.report.repair_passes, 0);
}

// Then misplaced vertices: the blobs, whose finer surfaces leave the coarse crossing cells by a
// fraction of a cell. The signs stay right, but corners of crossing cells hold filled values.
TEST(HierarchicalOccupancy, NegativeControlInexactCrossingCorners) {
  const Comparison bare = compare(7, blobs(), {.dilation = 0, .max_repair_passes = 0});
  EXPECT_FALSE(same_meshes(bare));
  EXPECT_GT(bare.inexact_crossing_cells, 0);
  EXPECT_EQ(bare.report.repair_passes, 0);

  const Comparison repaired = compare(7, blobs(), {.dilation = 0});
  expect_exact(repaired);
  EXPECT_GT(repaired.report.repair_passes, 0);
  EXPECT_EQ(repaired.report.evaluator_calls, 3 + repaired.report.repair_passes);
}

TEST(HierarchicalOccupancy, EntirelyInsideOrOutsideEvaluatesTheFirstLevelOnly) {
  struct Case {
    const char* name;
    Field field;
  };
  for (const Case& f : {Case{"inside", [](double, double, double) { return 1.0; }},
                        Case{"outside", [](double, double, double) { return -1.0; }},
                        Case{"at the level", [](double, double, double) { return 0.0; }},
                        Case{"inside, varying",
                             [](double x, double y, double z) { return 1.5 + x * x + y * z; }}}) {
    SCOPED_TRACE(f.name);
    const Comparison c = compare(7, f.field);
    EXPECT_TRUE(c.dense_mesh.empty());
    EXPECT_TRUE(c.sampled_mesh.empty());
    EXPECT_EQ(c.wrong_side_points, 0);
    EXPECT_EQ(c.report.points_evaluated, 33 * 33 * 33);
    EXPECT_EQ(c.report.points_per_level, (std::vector<int64_t>{33 * 33 * 33, 0, 0}));
    EXPECT_EQ(c.report.evaluator_calls, 1);
  }
  // Constants fill exactly.
  const Comparison c = compare(6, [](double, double, double) { return -0.75; });
  EXPECT_EQ(c.sampled, c.dense.values);
}

TEST(HierarchicalOccupancy, DenseRunCallsOnceInOrderAndReproducesTheGrid) {
  const Field field = torus(0.6, 0.2);
  const test::SampledGrid dense = test::sample_resolution(6, field);
  for (const OccupancySamplingOptions& options :
       {OccupancySamplingOptions{.hierarchical = false},
        OccupancySamplingOptions{.coarsest_resolution_base = 6},
        OccupancySamplingOptions{.coarsest_resolution_base = 9}}) {
    std::vector<std::vector<int64_t>> calls;
    OccupancySamplingReport report;
    const std::vector<float> values =
        sample_occupancy(6, AnalyticEvaluator{6, field, &calls}, options, &report);
    ASSERT_EQ(calls.size(), 1u);
    std::vector<int64_t> expected(dense.values.size());
    std::iota(expected.begin(), expected.end(), int64_t{0});
    EXPECT_EQ(calls[0], expected);
    EXPECT_EQ(values, dense.values);
    EXPECT_EQ(report.points_evaluated, 65 * 65 * 65);
    EXPECT_EQ(report.dense_points, 65 * 65 * 65);
    EXPECT_EQ(report.points_per_level, std::vector<int64_t>{65 * 65 * 65});
    EXPECT_EQ(report.evaluator_calls, 1);
  }
}

// Every call holds points of one level only (on that level's sub-grid), no point is evaluated
// twice, and the field holds the evaluated value at every evaluated point.
TEST(HierarchicalOccupancy, EvaluatorContract) {
  constexpr int64_t r = 7, n = 129;
  const Field field = blobs();
  std::vector<std::vector<int64_t>> calls;
  OccupancySamplingReport report;
  const std::vector<float> values =
      sample_occupancy(r, AnalyticEvaluator{r, field, &calls}, {}, &report);
  const test::SampledGrid dense = test::sample_resolution(r, field);
  ASSERT_EQ(calls.size(), 3u);
  ASSERT_EQ(report.points_per_level.size(), 3u);
  std::vector<uint8_t> seen(static_cast<std::size_t>(n * n * n), 0);
  for (std::size_t level = 0; level < calls.size(); ++level) {
    const int64_t stride = int64_t{1} << (2 - level);
    EXPECT_EQ(static_cast<int64_t>(calls[level].size()), report.points_per_level[level]);
    for (const int64_t p : calls[level]) {
      ASSERT_GE(p, 0);
      ASSERT_LT(p, n * n * n);
      EXPECT_EQ(seen[static_cast<std::size_t>(p)]++, 0) << p;
      EXPECT_EQ(p / (n * n) % stride + p / n % n % stride + p % n % stride, 0) << p;
      EXPECT_EQ(values[static_cast<std::size_t>(p)], dense.values[static_cast<std::size_t>(p)]);
    }
  }
}

TEST(HierarchicalOccupancy, EvaluatorExceptionsPropagate) {
  int calls = 0;
  const OccupancyEvaluator evaluate = [&calls](std::span<const int64_t>, std::span<float> out) {
    if (++calls == 2) {
      throw cancelled("request cancelled");
    }
    for (std::size_t p = 0; p < out.size(); ++p) {
      out[p] = p % 7 == 0 ? 1.0f : -1.0f;
    }
  };
  try {
    (void)sample_occupancy(6, evaluate);
    FAIL() << "expected an exception";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kCancelled);
  }
  EXPECT_EQ(calls, 2);
}

TEST(HierarchicalOccupancy, RejectsInvalidArguments) {
  const OccupancyEvaluator evaluate = [](std::span<const int64_t>, std::span<float> out) {
    std::fill(out.begin(), out.end(), 1.0f);
  };
  const auto expect_invalid = [&](int64_t r, const OccupancySamplingOptions& options,
                                  const std::string& names) {
    try {
      (void)sample_occupancy(r, evaluate, options);
      ADD_FAILURE() << "accepted " << names;
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(error.what()).find(names), std::string::npos) << error.what();
    }
  };
  expect_invalid(0, {}, "resolution_base");
  expect_invalid(kMaxResolutionBase + 1, {}, "resolution_base");
  expect_invalid(6, {.coarsest_resolution_base = 0}, "coarsest_resolution_base");
  expect_invalid(6, {.dilation = -1}, "dilation");
  expect_invalid(6, {.dilation = int64_t{1} << 20}, "dilation");
  expect_invalid(6, {.max_repair_passes = -1}, "max_repair_passes");
  expect_invalid(6, {.level = std::numeric_limits<float>::quiet_NaN()}, "level");
  expect_invalid(6, {.level = std::numeric_limits<float>::infinity()}, "level");
}

// --- Development tools (disabled; run with --gtest_also_run_disabled_tests) -----------------

// The numbers behind the defaults: points evaluated and whether the meshes match, per field,
// resolution and option set.
TEST(HierarchicalOccupancyDev, DISABLED_Table) {
  struct Named {
    const char* name;
    Field field;
  };
  const std::vector<Named> fields = {
      {"sphere 0.55", sphere(0.013, -0.027, 0.041, 0.55)},
      {"sphere 0.22", sphere(0.31, 0.27, -0.4, 0.22)},
      {"torus", torus(0.6, 0.2)},
      {"shell", shell(0.75, 2 * kCoarseCell + 0.001)},
      {"blobs", blobs()},
      {"terraced", terraced_sphere()},
  };
  struct Setting {
    int64_t r0, dilation, repair;
  };
  for (const int64_t r : {6, 7, 8}) {
    for (const Named& f : fields) {
      for (const Setting s : {Setting{4, 1, 8}, Setting{5, 1, 8}, Setting{6, 1, 8},
                              Setting{5, 2, 8}, Setting{5, 0, 8}, Setting{5, 0, 0}}) {
        const Comparison c = compare(r, f.field,
                                     {.coarsest_resolution_base = s.r0,
                                      .dilation = s.dilation,
                                      .max_repair_passes = s.repair});
        std::string levels;
        for (const int64_t p : c.report.points_per_level) {
          levels += ' ';
          levels += std::to_string(p);
        }
        std::printf("r=%d %-12s r0=%d d=%d repair=%d: %8lld of %8lld (%6.1fx) calls %lld %s |%s\n",
                    static_cast<int>(r), f.name, static_cast<int>(s.r0),
                    static_cast<int>(s.dilation), static_cast<int>(s.repair),
                    static_cast<long long>(c.report.points_evaluated),
                    static_cast<long long>(c.report.dense_points), c.reduction(),
                    static_cast<long long>(c.report.evaluator_calls),
                    same_meshes(c) ? "same" : "DIFF", levels.c_str());
      }
    }
  }
}

// The sampler's own time (without the evaluator) at r = 8 and 9.
TEST(HierarchicalOccupancyDev, DISABLED_Overhead) {
  for (const int64_t r : {8, 9}) {
    const AnalyticEvaluator inner{r, sphere(0.013, -0.027, 0.041, 0.55)};
    double evaluator_s = 0.0;
    const OccupancyEvaluator timed = [&](std::span<const int64_t> p, std::span<float> out) {
      const auto start = std::chrono::steady_clock::now();
      inner(p, out);
      evaluator_s +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    OccupancySamplingReport report;
    const auto start = std::chrono::steady_clock::now();
    const std::vector<float> field = sample_occupancy(r, timed, {}, &report);
    const double total =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("r=%d: %.3f s, of which the evaluator %.3f s; %lld points\n", static_cast<int>(r),
                total, evaluator_s, static_cast<long long>(report.points_evaluated));
  }
}

}  // namespace test_hierarchical_occupancy
}  // namespace cube3d
