#include "analytic_shapes.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <thread>

#include "cube3d/core/constants.h"
#include "cube3d/core/error.h"

namespace cube3d::bench {
namespace {

// Distances are in world units (the grid spans 2.1); the field is steeper than a distance, as a
// model's logits are, so that marching cubes sees values well away from the level.
constexpr double kFieldScale = 20.0;

struct Vec {
  double x, y, z;
};
Vec operator-(Vec a, Vec b) { return {a.x - b.x, a.y - b.y, a.z - b.z}; }
Vec operator*(Vec a, double s) { return {a.x * s, a.y * s, a.z * s}; }
double vec_dot(Vec a, Vec b) { return a.x * b.x + a.y * b.y + a.z * b.z; }
double vec_length(Vec a) { return std::sqrt(vec_dot(a, a)); }

double sphere(Vec p, Vec centre, double radius) { return vec_length(p - centre) - radius; }

// A box with rounded edges: half extents (before rounding) and the rounding radius.
double round_box(Vec p, Vec centre, Vec half, double radius) {
  const Vec d = p - centre;
  const Vec q{std::abs(d.x) - half.x + radius, std::abs(d.y) - half.y + radius,
              std::abs(d.z) - half.z + radius};
  const Vec outside{std::max(q.x, 0.0), std::max(q.y, 0.0), std::max(q.z, 0.0)};
  return vec_length(outside) + std::min(std::max({q.x, q.y, q.z}), 0.0) - radius;
}

// The segment a-b swept by a sphere whose radius goes from ra (at a) to rb (at b).
double capsule(Vec p, Vec a, Vec b, double ra, double rb) {
  const Vec pa = p - a, ba = b - a;
  const double h = std::clamp(vec_dot(pa, ba) / vec_dot(ba, ba), 0.0, 1.0);
  return vec_length(pa - ba * h) - (ra + (rb - ra) * h);
}

// A cylinder along y between y0 and y1.
double cylinder_y(Vec p, double cx, double cz, double y0, double y1, double radius) {
  const double radial = std::hypot(p.x - cx, p.z - cz) - radius;
  const double axial = std::max(y0 - p.y, p.y - y1);
  const double outside = std::hypot(std::max(radial, 0.0), std::max(axial, 0.0));
  return outside + std::min(std::max(radial, axial), 0.0);
}

// An ellipsoid (a bound, not an exact distance: fine for a level set).
double ellipsoid(Vec p, Vec centre, Vec radii) {
  const Vec d = p - centre;
  const Vec a{d.x / radii.x, d.y / radii.y, d.z / radii.z};
  const Vec b{d.x / (radii.x * radii.x), d.y / (radii.y * radii.y), d.z / (radii.z * radii.z)};
  const double k0 = vec_length(a), k1 = vec_length(b);
  return k1 > 0 ? k0 * (k0 - 1.0) / k1 : -std::min({radii.x, radii.y, radii.z});
}

// Polynomial smooth minimum: blends two surfaces within k of each other.
double smooth_union(double a, double b, double k) {
  const double h = std::max(k - std::abs(a - b), 0.0) / k;
  return std::min(a, b) - h * h * k * 0.25;
}

double chair(Vec p) {
  double d = round_box(p, {0, -0.053, 0}, {0.46, 0.05, 0.44}, 0.02);  // seat
  for (const double sx : {-1.0, 1.0}) {
    for (const double sz : {-1.0, 1.0}) {
      // Legs, slightly splayed: tapered capsules.
      d = std::min(
          d, capsule(p, {sx * 0.38, -0.1, sz * 0.36}, {sx * 0.42, -0.95, sz * 0.40}, 0.045, 0.035));
    }
    // Back posts and a rail between the front legs.
    d = std::min(d, round_box(p, {sx * 0.38, 0.45, -0.38}, {0.04, 0.45, 0.035}, 0.01));
  }
  d = std::min(d, round_box(p, {0, -0.6, 0.38}, {0.38, 0.025, 0.025}, 0.01));
  d = std::min(d, round_box(p, {0, 0.8, -0.38}, {0.42, 0.1, 0.035}, 0.02));  // top rail
  for (int slat = -2; slat <= 2; ++slat) {                                   // five vertical slats
    d = std::min(d, round_box(p, {slat * 0.14, 0.35, -0.38}, {0.035, 0.36, 0.02}, 0.008));
  }
  return d;
}

double sword(Vec p) {
  // The blade: a flattened diamond section (two slabs), a point at the tip, along y.
  const double half_width = 0.085, thickness = 0.022;
  const double section = std::abs(p.x) / half_width + std::abs(p.z) / thickness - 1.0;
  double blade = std::max(section * std::min(half_width, thickness), std::max(-0.28 - p.y, 0.0));
  // The tip: two planes meeting at y = 0.98.
  blade = std::max(blade, (std::abs(p.x) * 0.9 + (p.y - 0.98) * 0.15) / std::hypot(0.9, 0.15));
  blade = std::max(blade, -0.28 - p.y);
  double d = blade;
  d = std::min(d, round_box(p, {0, -0.31, 0}, {0.26, 0.03, 0.05}, 0.015));  // guard
  d = std::min(d, capsule(p, {-0.26, -0.31, 0}, {-0.3, -0.25, 0}, 0.035, 0.03));
  d = std::min(d, capsule(p, {0.26, -0.31, 0}, {0.3, -0.25, 0}, 0.035, 0.03));
  // The grip, with rings of wrapping.
  const double wrap = 0.004 * std::sin(p.y * 120.0);
  d = std::min(d, cylinder_y(p, 0, 0, -0.7, -0.33, 0.036 + wrap));
  d = std::min(d, sphere(p, {0, -0.74, 0}, 0.065));  // pommel
  return d;
}

double boat(Vec p) {
  // A hull: the lower half of an ellipsoid, hollowed to a shell 0.035 thick, open at the deck.
  const double outer = ellipsoid(p, {0, 0.1, 0}, {0.95, 0.45, 0.36});
  const double inner = ellipsoid(p, {0, 0.1, 0}, {0.9, 0.41, 0.32});
  double hull = std::max(std::max(outer, -inner), p.y - 0.08);
  // Benches across the hull, a keel, a mast and a sail.
  for (const double bx : {-0.45, 0.0, 0.4}) {
    hull = std::min(hull, std::max(round_box(p, {bx, -0.05, 0}, {0.06, 0.02, 0.34}, 0.01), outer));
  }
  hull = std::min(hull, round_box(p, {0, -0.38, 0}, {0.75, 0.04, 0.015}, 0.01));
  hull = std::min(hull, cylinder_y(p, 0.05, 0, -0.3, 0.95, 0.022));
  hull = std::min(hull, round_box(p, {0.33, 0.55, 0}, {0.26, 0.33, 0.008}, 0.004));
  return hull;
}

double creature(Vec p) {
  const double k = 0.08;
  double d = capsule(p, {-0.45, 0.0, 0}, {0.3, 0.06, 0}, 0.22, 0.19);                // body
  d = smooth_union(d, capsule(p, {0.3, 0.06, 0}, {0.5, 0.3, 0}, 0.12, 0.1), k);      // neck
  d = smooth_union(d, ellipsoid(p, {0.6, 0.36, 0}, {0.2, 0.14, 0.13}), k);           // head
  d = smooth_union(d, capsule(p, {0.68, 0.33, 0}, {0.82, 0.28, 0}, 0.08, 0.05), k);  // snout
  for (const double sz : {-1.0, 1.0}) {
    d = smooth_union(d, capsule(p, {0.55, 0.46, sz * 0.06}, {0.5, 0.62, sz * 0.1}, 0.03, 0.012),
                     0.03);  // ears
    for (const double x : {-0.45, 0.2}) {
      // Legs: thigh and shin.
      const Vec hip{x, -0.05, sz * 0.13}, knee{x + 0.06, -0.38, sz * 0.17},
          foot{x + 0.02, -0.72, sz * 0.18};
      d = smooth_union(d, capsule(p, hip, knee, 0.08, 0.055), k);
      d = smooth_union(d, capsule(p, knee, foot, 0.055, 0.045), 0.04);
      d = smooth_union(d, ellipsoid(p, {foot.x + 0.04, -0.75, foot.z}, {0.08, 0.035, 0.05}), 0.03);
    }
  }
  // A tail of segments that thin and curl.
  Vec previous{-0.6, 0.02, 0};
  double radius = 0.07;
  for (int s = 1; s <= 8; ++s) {
    const double t = s / 8.0;
    const Vec next{-0.6 - 0.35 * t, 0.02 + 0.45 * t * t, 0.12 * std::sin(t * 3.0)};
    const double next_radius = 0.07 - 0.05 * t;
    d = smooth_union(d, capsule(p, previous, next, radius, next_radius), 0.03);
    previous = next;
    radius = next_radius;
  }
  return d;
}

// Value noise: random values on a lattice of kNoiseCells cells across the grid, smoothly
// interpolated, about half inside. Its surface is everywhere, as a random-weight model's is
// (3.2M marching-cubes faces at resolution 8).
constexpr double kNoiseCells = 16.0;

uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

double lattice_value(int64_t i, int64_t j, int64_t k) {
  const uint64_t key = (static_cast<uint64_t>(i) * 73856093u) ^
                       (static_cast<uint64_t>(j) * 19349663u) ^
                       (static_cast<uint64_t>(k) * 83492791u);
  return static_cast<double>(mix64(key) >> 11) * 0x1.0p-52 - 1.0;  // [-1, 1)
}

double noise(Vec p) {
  const double scale = kNoiseCells / (kGridBoundMax - kGridBoundMin);
  const double fx = (p.x - kGridBoundMin) * scale, fy = (p.y - kGridBoundMin) * scale,
               fz = (p.z - kGridBoundMin) * scale;
  const auto i = static_cast<int64_t>(std::floor(fx)), j = static_cast<int64_t>(std::floor(fy)),
             k = static_cast<int64_t>(std::floor(fz));
  const auto fade = [](double t) { return t * t * (3.0 - 2.0 * t); };
  const double u = fade(fx - i), v = fade(fy - j), w = fade(fz - k);
  double value = 0;
  for (int c = 0; c < 8; ++c) {
    const int a = c & 1, b = (c >> 1) & 1, e = (c >> 2) & 1;
    value +=
        (a ? u : 1 - u) * (b ? v : 1 - v) * (e ? w : 1 - w) * lattice_value(i + a, j + b, k + e);
  }
  return -value * 0.05;  // a "distance": negative inside, as the shapes' are
}

using Distance = double (*)(Vec);

struct NamedShape {
  const char* name;
  Distance distance;
};

constexpr NamedShape kShapes[] = {
    {"chair", chair}, {"sword", sword}, {"boat", boat}, {"creature", creature}, {"noise", noise}};

Distance find_shape(const std::string& name) {
  for (const NamedShape& shape : kShapes) {
    if (name == shape.name) return shape.distance;
  }
  std::string known;
  for (const std::string& n : analytic_shape_names()) known += (known.empty() ? "" : ", ") + n;
  throw invalid_argument("unknown analytic shape '" + name + "' (known: " + known + ")");
}

}  // namespace

const std::vector<std::string>& analytic_shape_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const NamedShape& shape : kShapes) out.emplace_back(shape.name);
    return out;
  }();
  return names;
}

double analytic_field(const std::string& name, double x, double y, double z) {
  return -find_shape(name)({x, y, z}) * kFieldScale;
}

AnalyticGrid sample_analytic_shape(const std::string& name, int64_t resolution_base, int threads) {
  const Distance distance = find_shape(name);
  validate_resolution_base(resolution_base, kMaxResolutionBase);
  const int64_t n = grid_points_per_axis(resolution_base);
  AnalyticGrid grid;
  grid.name = name;
  grid.resolution_base = resolution_base;
  grid.dims = {n, n, n};
  grid.values.resize(static_cast<std::size_t>(n * n * n));
  const double step = (kGridBoundMax - kGridBoundMin) / static_cast<double>(n - 1);
  const auto fill = [&](int64_t i) {
    float* out = grid.values.data() + static_cast<std::size_t>(i * n * n);
    const double x = kGridBoundMin + static_cast<double>(i) * step;
    for (int64_t j = 0; j < n; ++j) {
      const double y = kGridBoundMin + static_cast<double>(j) * step;
      for (int64_t k = 0; k < n; ++k) {
        const double z = kGridBoundMin + static_cast<double>(k) * step;
        *out++ = static_cast<float>(-distance({x, y, z}) * kFieldScale);
      }
    }
  };
  const int workers =
      threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  {
    std::vector<std::jthread> pool;  // joined at the end of this scope
    for (int t = 0; t < workers; ++t) {
      pool.emplace_back([&, t] {
        for (int64_t i = t; i < n; i += workers) fill(i);
      });
    }
  }
  return grid;
}

}  // namespace cube3d::bench
