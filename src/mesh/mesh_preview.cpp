#include "cube3d/mesh/mesh_preview.h"

#include <png.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <limits>

#include "cube3d/core/error.h"
#include "cube3d/core/utf8.h"

namespace cube3d {
namespace {

constexpr int kMinSide = 16;
constexpr int kMaxSide = 4096;
constexpr int kMaxSupersample = 4;
constexpr double kPi = 3.14159265358979323846;

// Shading, in linear RGB. Clay: a neutral light grey, a touch warm, so that the shape reads as a
// shape and not as a material.
constexpr float kAlbedo[3] = {0.64f, 0.63f, 0.60f};
constexpr double kKeyIntensity = 0.80;
constexpr double kFillIntensity = 0.30;
constexpr double kSkyAmbient = 0.28;     // normals facing world +Y
constexpr double kGroundAmbient = 0.08;  // normals facing world -Y
constexpr double kBackFaceShade = 0.55;  // the inside of an open mesh: darker, still visible
// A corner takes its vertex's (smooth) normal unless that is further than this from the face's
// own: a cube's corners (55 degrees) stay sharp, a marching-cubes surface stays smooth.
const double kCosCrease = std::cos(50.0 * kPi / 180.0);

// Fixed point: positions on a 1/256-sample grid, so that edge functions are exact integers
// (no cracks, no double hits on shared edges) and the fill rule is exact.
constexpr int kSubpixelBits = 8;
constexpr int64_t kSubpixel = int64_t{1} << kSubpixelBits;
constexpr int64_t kHalfSubpixel = kSubpixel / 2;
// Samples in one band of the supersampled image (depth and colour of a band: 4 MiB): the image is
// drawn band by band, so a 2048 x 2048 preview at 3 x 3 samples needs no 600 MB of buffers.
constexpr int64_t kBandSamples = int64_t{1} << 18;

double radians(double degrees) { return degrees * kPi / 180.0; }

struct Vec3 {
  double x = 0, y = 0, z = 0;
};
Vec3 operator+(Vec3 a, Vec3 b) { return {a.x + b.x, a.y + b.y, a.z + b.z}; }
Vec3 operator-(Vec3 a, Vec3 b) { return {a.x - b.x, a.y - b.y, a.z - b.z}; }
Vec3 operator-(Vec3 a) { return {-a.x, -a.y, -a.z}; }
Vec3 operator*(Vec3 a, double s) { return {a.x * s, a.y * s, a.z * s}; }
double dot(Vec3 a, Vec3 b) { return a.x * b.x + a.y * b.y + a.z * b.z; }
Vec3 cross(Vec3 a, Vec3 b) {
  return {a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x};
}
double length(Vec3 a) { return std::sqrt(dot(a, a)); }
Vec3 normalized(Vec3 a) { return a * (1.0 / length(a)); }
Vec3 to_vec(const std::array<double, 3>& a) { return {a[0], a[1], a[2]}; }
bool finite(Vec3 a) { return std::isfinite(a.x) && std::isfinite(a.y) && std::isfinite(a.z); }

// Lights in camera space (x right, y up, z away from the viewer), each the direction towards the
// light: the key from the upper left in front, the fill from the right.
const Vec3 kKeyLight = normalized({-0.5, 0.7, -0.55});
const Vec3 kFillLight = normalized({0.75, 0.05, -0.6});

void require_range(const char* field, double value, double min, double max) {
  if (!(value >= min && value <= max)) {  // NaN fails too
    char text[160];
    std::snprintf(text, sizeof text, "%s: %g is outside [%g, %g]", field, value, min, max);
    throw invalid_argument(text);
  }
}

void require_finite(const char* field, const std::array<double, 3>& v) {
  if (!finite(to_vec(v))) throw invalid_argument(std::string(field) + " is not finite");
}

void validate_description(std::string_view text) {
  if (text.size() > kMaxPreviewDescriptionBytes) {
    throw invalid_argument("description: " + std::to_string(text.size()) +
                           " bytes, over the limit of " +
                           std::to_string(kMaxPreviewDescriptionBytes));
  }
  if (const auto at = find_invalid_utf8(text)) {
    throw invalid_argument("description is not valid UTF-8 (byte offset " + std::to_string(*at) +
                           ")");
  }
  if (text.find('\0') != std::string_view::npos) {
    throw invalid_argument("description holds a NUL byte (PNG text cannot)");
  }
}

// sRGB transfer function, both ways.
double srgb_to_linear(double c) {
  return c <= 0.04045 ? c / 12.92 : std::pow((c + 0.055) / 1.055, 2.4);
}
double linear_to_srgb(double c) {
  return c <= 0.0031308 ? c * 12.92 : 1.055 * std::pow(c, 1.0 / 2.4) - 0.055;
}

// Linear [0, 1] -> 8-bit sRGB through a table: three pow() a pixel would cost more than the
// rasterizing. 4096 steps: finer than one 8-bit level everywhere.
constexpr int kLutSize = 4096;
struct SrgbTable {
  uint8_t value[kLutSize];
  SrgbTable() {
    for (int i = 0; i < kLutSize; ++i) {
      const double s = linear_to_srgb(static_cast<double>(i) / (kLutSize - 1));
      value[i] = static_cast<uint8_t>(std::clamp(std::lround(s * 255.0), 0L, 255L));
    }
  }
  uint8_t operator()(float linear) const {
    const float clamped = std::clamp(linear, 0.0f, 1.0f);
    return value[static_cast<int>(clamped * (kLutSize - 1) + 0.5f)];
  }
};
const SrgbTable& srgb_table() {
  static const SrgbTable table;
  return table;
}

// Where the camera is and how camera space maps to samples.
struct Camera {
  Vec3 eye, right, up, forward;  // an orthonormal basis; forward looks into the scene
  double focal = 1;              // samples per unit of x / z
  double near = 1e-3;            // nearest depth drawn
  double width = 0, height = 0;  // the supersampled image, in samples
};

// The bounding sphere of the vertices faces use: the centre of their box, and the farthest of
// them from it.
struct Sphere {
  Vec3 centre;
  double radius = 0;
};
Sphere bounding_sphere(MeshView mesh) {
  Vec3 lo{std::numeric_limits<double>::max(), std::numeric_limits<double>::max(),
          std::numeric_limits<double>::max()};
  Vec3 hi = -lo;
  const auto& v = mesh.vertices;
  for (const uint32_t i : mesh.indices) {
    const Vec3 p{v[3 * size_t{i}], v[3 * size_t{i} + 1], v[3 * size_t{i} + 2]};
    lo = {std::min(lo.x, p.x), std::min(lo.y, p.y), std::min(lo.z, p.z)};
    hi = {std::max(hi.x, p.x), std::max(hi.y, p.y), std::max(hi.z, p.z)};
  }
  Sphere sphere{(lo + hi) * 0.5, 0.0};
  double farthest = 0;
  for (const uint32_t i : mesh.indices) {
    const Vec3 d =
        Vec3{v[3 * size_t{i}], v[3 * size_t{i} + 1], v[3 * size_t{i} + 2]} - sphere.centre;
    farthest = std::max(farthest, dot(d, d));
  }
  sphere.radius = std::sqrt(farthest);
  return sphere;
}

Camera make_view(const Sphere& sphere, const PreviewOptions& options) {
  Camera view;
  const int ss = options.supersample;
  view.width = static_cast<double>(options.width) * ss;
  view.height = static_cast<double>(options.height) * ss;
  const double half_fov = radians(options.fov_degrees) / 2;
  view.focal = std::min(view.width, view.height) / 2 / std::tan(half_fov);
  // A point mesh (every face degenerate) has no size: any scale frames it.
  const double radius = sphere.radius > 0 ? sphere.radius : 1.0;
  Vec3 world_up{0, 1, 0};
  if (options.camera) {
    view.eye = to_vec(options.camera->eye);
    view.forward = normalized(to_vec(options.camera->target) - view.eye);
    world_up = to_vec(options.camera->up);
    // On the camera's own scale (not the mesh's, which may be huge): 1/z depth keeps its
    // precision however near the plane is, and the guard band bounds what it projects.
    view.near = length(to_vec(options.camera->target) - view.eye) * 1e-5;
  } else {
    // The sphere's image is a circle of radius tan(alpha) * focal for a sphere seen under the
    // half-angle alpha: alpha = atan(fill * tan(half_fov)) makes it `fill` of the shorter side.
    const double alpha = std::atan(options.fill * std::tan(half_fov));
    const double distance = radius / std::sin(alpha);
    const double az = radians(options.azimuth_degrees);
    const double el = radians(options.elevation_degrees);
    const Vec3 towards_eye{std::sin(az) * std::cos(el), std::sin(el), std::cos(az) * std::cos(el)};
    view.eye = sphere.centre + towards_eye * distance;
    view.forward = -towards_eye;
    // Every vertex is at least distance - radius deep: nothing is ever clipped by the near plane.
    view.near = (distance - radius) * 0.5;
  }
  view.right = normalized(cross(view.forward, world_up));
  view.up = cross(view.right, view.forward);
  return view;
}

// A triangle's corner during clipping: camera-space position and linear colour.
struct ClipVertex {
  Vec3 p;
  float rgb[3];
};

// The planes a triangle is clipped against, as signed distances (inside >= 0): the near plane,
// and a guard band twice the image's size on each axis, so that projected positions stay small
// enough for the 64-bit edge functions whatever the camera sees.
constexpr int kPlanes = 5;
double plane_distance(const Camera& view, int plane, Vec3 p) {
  switch (plane) {
    case 0:
      return p.z - view.near;
    case 1:
      return view.width * p.z - view.focal * p.x;
    case 2:
      return view.width * p.z + view.focal * p.x;
    case 3:
      return view.height * p.z - view.focal * p.y;
    default:
      return view.height * p.z + view.focal * p.y;
  }
}
unsigned outcode(const Camera& view, Vec3 p) {
  unsigned code = 0;
  for (int plane = 0; plane < kPlanes; ++plane) {
    if (plane_distance(view, plane, p) < 0) code |= 1u << plane;
  }
  return code;
}

// Sutherland-Hodgman against the planes in `planes`: a convex polygon of at most 3 + 5 corners.
constexpr int kMaxPolygon = 3 + kPlanes;
int clip_polygon(const Camera& view, unsigned planes, ClipVertex* poly, int count) {
  ClipVertex scratch[kMaxPolygon];
  for (int plane = 0; plane < kPlanes && count >= 3; ++plane) {
    if (!(planes & (1u << plane))) continue;
    int out = 0;
    for (int i = 0; i < count; ++i) {
      const ClipVertex& a = poly[i];
      const ClipVertex& b = poly[(i + 1) % count];
      const double da = plane_distance(view, plane, a.p);
      const double db = plane_distance(view, plane, b.p);
      if (da >= 0) scratch[out++] = a;
      if ((da >= 0) != (db >= 0)) {
        const double t = da / (da - db);
        ClipVertex& c = scratch[out++];
        c.p = a.p + (b.p - a.p) * t;
        for (int k = 0; k < 3; ++k) {
          c.rgb[k] = static_cast<float>(a.rgb[k] + (b.rgb[k] - a.rgb[k]) * t);
        }
      }
    }
    std::copy(scratch, scratch + out, poly);
    count = out;
  }
  return count;
}

// A triangle ready to rasterize: fixed-point corners (positive area), its sample box, and the
// planes of 1/z (perspective-correct depth: larger is nearer) and of the colour over the screen.
struct ScreenTriangle {
  int32_t x[3], y[3];      // 1/256 sample
  int32_t x0, x1, y0, y1;  // samples it may cover, inclusive
  double depth[3];         // 1/z = depth[0] * sx + depth[1] * sy + depth[2]
  float depth_min, depth_max;
  float colour[3][3];  // channel k = colour[k][0] * sx + colour[k][1] * sy + colour[k][2]
};

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// Projects a corner onto the supersampled image (fixed point). Clipping keeps corners within the
// guard band, [-w/2, 3w/2]; the clamp, wider than that, only bounds what rounding makes of
// coordinates near float's limits (an edge from -1e30 to 1e30 cut at x = 4 loses every digit), so
// that the edge functions' products stay far inside 64 bits whatever the input.
void project(const Camera& view, Vec3 p, int32_t& x, int32_t& y) {
  const double sx =
      std::clamp(view.width / 2 + view.focal * p.x / p.z, -2 * view.width, 3 * view.width);
  const double sy =
      std::clamp(view.height / 2 - view.focal * p.y / p.z, -2 * view.height, 3 * view.height);
  x = static_cast<int32_t>(std::llround(sx * kSubpixel));
  y = static_cast<int32_t>(std::llround(sy * kSubpixel));
}

// Sets up one (clipped) triangle; false when it covers no sample.
bool set_up(const Camera& view, const ClipVertex& a, const ClipVertex& b, const ClipVertex& c,
            ScreenTriangle& t) {
  const ClipVertex* v[3] = {&a, &b, &c};
  for (int i = 0; i < 3; ++i) project(view, v[i]->p, t.x[i], t.y[i]);
  int64_t area = (int64_t{t.x[1]} - t.x[0]) * (int64_t{t.y[2]} - t.y[0]) -
                 (int64_t{t.y[1]} - t.y[0]) * (int64_t{t.x[2]} - t.x[0]);
  if (area == 0) return false;
  if (area < 0) {  // one orientation for the edge functions; facing was decided in 3-D
    std::swap(v[1], v[2]);
    std::swap(t.x[1], t.x[2]);
    std::swap(t.y[1], t.y[2]);
    area = -area;
  }
  // Sample (i, j) sits at ((i + 0.5), (j + 0.5)) samples: covered when its centre is inside.
  const int64_t min_x = std::min({t.x[0], t.x[1], t.x[2]});
  const int64_t max_x = std::max({t.x[0], t.x[1], t.x[2]});
  const int64_t min_y = std::min({t.y[0], t.y[1], t.y[2]});
  const int64_t max_y = std::max({t.y[0], t.y[1], t.y[2]});
  const int64_t x0 = std::max<int64_t>(0, -floor_div(-(min_x - kHalfSubpixel), kSubpixel));
  const int64_t x1 = std::min<int64_t>(static_cast<int64_t>(view.width) - 1,
                                       floor_div(max_x - kHalfSubpixel, kSubpixel));
  const int64_t y0 = std::max<int64_t>(0, -floor_div(-(min_y - kHalfSubpixel), kSubpixel));
  const int64_t y1 = std::min<int64_t>(static_cast<int64_t>(view.height) - 1,
                                       floor_div(max_y - kHalfSubpixel, kSubpixel));
  if (x0 > x1 || y0 > y1) return false;
  t.x0 = static_cast<int32_t>(x0);
  t.x1 = static_cast<int32_t>(x1);
  t.y0 = static_cast<int32_t>(y0);
  t.y1 = static_cast<int32_t>(y1);

  // Attribute planes over the snapped corners, in samples.
  const double px[3] = {t.x[0] / double(kSubpixel), t.x[1] / double(kSubpixel),
                        t.x[2] / double(kSubpixel)};
  const double py[3] = {t.y[0] / double(kSubpixel), t.y[1] / double(kSubpixel),
                        t.y[2] / double(kSubpixel)};
  const double det = static_cast<double>(area) / double(kSubpixel * kSubpixel);
  const auto plane = [&](const double value[3], double out[3]) {
    const double dx =
        ((value[1] - value[0]) * (py[2] - py[0]) - (value[2] - value[0]) * (py[1] - py[0])) / det;
    const double dy =
        ((value[2] - value[0]) * (px[1] - px[0]) - (value[1] - value[0]) * (px[2] - px[0])) / det;
    out[0] = dx;
    out[1] = dy;
    out[2] = value[0] - dx * px[0] - dy * py[0];
  };
  const double inverse_depth[3] = {1.0 / v[0]->p.z, 1.0 / v[1]->p.z, 1.0 / v[2]->p.z};
  plane(inverse_depth, t.depth);
  t.depth_min =
      static_cast<float>(std::min({inverse_depth[0], inverse_depth[1], inverse_depth[2]}));
  t.depth_max =
      static_cast<float>(std::max({inverse_depth[0], inverse_depth[1], inverse_depth[2]}));
  for (int k = 0; k < 3; ++k) {
    const double value[3] = {v[0]->rgb[k], v[1]->rgb[k], v[2]->rgb[k]};
    double p[3];
    plane(value, p);
    for (int i = 0; i < 3; ++i) t.colour[k][i] = static_cast<float>(p[i]);
  }
  return true;
}

// Lambert under the key and fill lights plus a sky/ground ambient; `n` is the unit normal on the
// viewer's side.
void shade(const Camera& view, Vec3 n, bool back_face, float rgb[3]) {
  const Vec3 camera{dot(n, view.right), dot(n, view.up), dot(n, view.forward)};
  const double ambient = kGroundAmbient + (kSkyAmbient - kGroundAmbient) * (0.5 + 0.5 * n.y);
  double light = ambient + kKeyIntensity * std::max(0.0, dot(camera, kKeyLight)) +
                 kFillIntensity * std::max(0.0, dot(camera, kFillLight));
  if (back_face) light *= kBackFaceShade;
  for (int k = 0; k < 3; ++k) rgb[k] = static_cast<float>(kAlbedo[k] * light);
}

void validate_mesh(MeshView mesh) {
  if (mesh.vertices.size() % 3 != 0) {
    throw invalid_argument("mesh has " + std::to_string(mesh.vertices.size()) +
                           " vertex coordinates, not a multiple of 3");
  }
  if (mesh.indices.size() % 3 != 0) {
    throw invalid_argument("mesh has " + std::to_string(mesh.indices.size()) +
                           " indices, not a multiple of 3");
  }
  for (size_t i = 0; i < mesh.vertices.size(); ++i) {
    if (!std::isfinite(mesh.vertices[i])) {
      throw invalid_argument("vertex " + std::to_string(i / 3) + " is not finite (coordinate " +
                             std::to_string(i % 3) + " is " + std::to_string(mesh.vertices[i]) +
                             ")");
    }
  }
  const size_t vertex_count = mesh.vertex_count();
  for (size_t i = 0; i < mesh.indices.size(); ++i) {
    if (mesh.indices[i] >= vertex_count) {
      throw invalid_argument("face " + std::to_string(i / 3) + " uses vertex " +
                             std::to_string(mesh.indices[i]) + ", out of range (" +
                             std::to_string(vertex_count) + " vertices)");
    }
  }
}

// Unit vertex normals weighted by each face's angle at the vertex (not by area, as
// vertex_normals for glTF does): independent of how a surface is split into triangles, so that a
// cube's corner normal is its diagonal however its faces are cut. (0, 0, 0) for a vertex of no
// proper face.
std::vector<Vec3> angle_weighted_normals(MeshView mesh) {
  const auto& v = mesh.vertices;
  std::vector<Vec3> normals(mesh.vertex_count());
  const auto position = [&](uint32_t i) {
    return Vec3{v[3 * size_t{i}], v[3 * size_t{i} + 1], v[3 * size_t{i} + 2]};
  };
  for (size_t f = 0; f < mesh.face_count(); ++f) {
    const uint32_t* corner = &mesh.indices[3 * f];
    const Vec3 p[3] = {position(corner[0]), position(corner[1]), position(corner[2])};
    const Vec3 face = cross(p[1] - p[0], p[2] - p[0]);
    const double twice_area = length(face);
    if (!(twice_area > 0) || !std::isfinite(twice_area)) continue;
    const Vec3 unit = face * (1.0 / twice_area);
    for (int k = 0; k < 3; ++k) {
      const Vec3 a = p[(k + 1) % 3] - p[k];
      const Vec3 b = p[(k + 2) % 3] - p[k];
      const double angle = std::atan2(length(cross(a, b)), dot(a, b));
      normals[corner[k]] = normals[corner[k]] + unit * angle;
    }
  }
  for (Vec3& n : normals) {
    const double l = length(n);
    n = l > 0 && std::isfinite(l) ? n * (1.0 / l) : Vec3{};
  }
  return normals;
}

// Every face clipped, projected and set up, in face order (so that equal depths resolve the
// same way every time).
std::vector<ScreenTriangle> set_up_faces(MeshView mesh, const Camera& view) {
  const auto& v = mesh.vertices;
  const std::vector<Vec3> smooth = angle_weighted_normals(mesh);
  std::vector<Vec3> camera(mesh.vertex_count());
  std::vector<unsigned> codes(mesh.vertex_count());
  for (size_t i = 0; i < camera.size(); ++i) {
    const Vec3 d = Vec3{v[3 * i], v[3 * i + 1], v[3 * i + 2]} - view.eye;
    camera[i] = {dot(d, view.right), dot(d, view.up), dot(d, view.forward)};
    codes[i] = outcode(view, camera[i]);
  }
  std::vector<ScreenTriangle> triangles;
  triangles.reserve(mesh.face_count());
  for (size_t f = 0; f < mesh.face_count(); ++f) {
    const uint32_t* corner = &mesh.indices[3 * f];
    const unsigned outside = codes[corner[0]] & codes[corner[1]] & codes[corner[2]];
    if (outside != 0) continue;  // wholly beyond one plane: behind the camera, or off screen
    Vec3 world[3];
    for (int k = 0; k < 3; ++k) {
      const size_t i = 3 * size_t{corner[k]};
      world[k] = {v[i], v[i + 1], v[i + 2]};
    }
    const Vec3 face = cross(world[1] - world[0], world[2] - world[0]);
    const double twice_area = length(face);
    if (!(twice_area > 0) || !std::isfinite(twice_area)) continue;  // degenerate: draws nothing
    Vec3 normal = face * (1.0 / twice_area);
    // Facing in 3-D (not by screen winding), so that it holds for clipped triangles too.
    const bool back_face = dot(normal, view.eye - world[0]) < 0;
    ClipVertex poly[kMaxPolygon];
    for (int k = 0; k < 3; ++k) {
      Vec3 n = smooth[corner[k]];
      if (dot(n, normal) < kCosCrease) n = normal;
      poly[k].p = camera[corner[k]];
      shade(view, back_face ? -n : n, back_face, poly[k].rgb);
    }
    const unsigned crossing = codes[corner[0]] | codes[corner[1]] | codes[corner[2]];
    const int count = crossing == 0 ? 3 : clip_polygon(view, crossing, poly, 3);
    for (int k = 1; k + 1 < count; ++k) {
      ScreenTriangle t;
      if (set_up(view, poly[0], poly[k], poly[k + 1], t)) triangles.push_back(t);
    }
  }
  return triangles;
}

// The supersampled image, one band of rows at a time.
struct Band {
  int64_t width = 0;  // samples
  int64_t first_row = 0, rows = 0;
  std::vector<float> depth;   // 1/z; 0: nothing drawn
  std::vector<float> colour;  // linear RGB
};

void rasterize(const ScreenTriangle& t, Band& band) {
  const int64_t row_begin = std::max<int64_t>(t.y0, band.first_row);
  const int64_t row_end = std::min<int64_t>(t.y1, band.first_row + band.rows - 1);
  // Edge k runs from corner k+1 to corner k+2; inside is where all three are positive. A sample
  // exactly on an edge belongs to the triangle only for a top or left edge (the top-left rule),
  // so that two triangles sharing an edge never both draw it nor both skip it: the other edges
  // are biased by -1, and "> 0" becomes ">= 0" for all.
  int64_t step_x[3], step_y[3], row_value[3];
  const int64_t sample_x = int64_t{t.x0} * kSubpixel + kHalfSubpixel;
  const int64_t sample_y = row_begin * kSubpixel + kHalfSubpixel;
  for (int k = 0; k < 3; ++k) {
    const int a = (k + 1) % 3;
    const int b = (k + 2) % 3;
    const int64_t ex = int64_t{t.x[b]} - t.x[a];
    const int64_t ey = int64_t{t.y[b]} - t.y[a];
    const bool top_left = (ey == 0 && ex > 0) || ey < 0;
    row_value[k] = ex * (sample_y - t.y[a]) - ey * (sample_x - t.x[a]) - (top_left ? 0 : 1);
    step_x[k] = -ey * kSubpixel;
    step_y[k] = ex * kSubpixel;
  }
  const int64_t width = t.x1 - t.x0 + 1;
  for (int64_t row = row_begin; row <= row_end; ++row) {
    // The row's covered span, exactly from the edge functions (no per-sample edge tests): edge k
    // at x0 + i is row_value[k] + i * step_x[k], and must be >= 0.
    int64_t first = 0, last = width - 1;
    for (int k = 0; k < 3 && first <= last; ++k) {
      const int64_t e = row_value[k];
      const int64_t s = step_x[k];
      if (s > 0) {
        if (e < 0) first = std::max(first, (-e + s - 1) / s);
      } else if (s < 0) {
        if (e < 0) {
          last = -1;
        } else {
          last = std::min(last, e / -s);
        }
      } else if (e < 0) {
        last = -1;
      }
    }
    for (int k = 0; k < 3; ++k) row_value[k] += step_y[k];
    if (first > last) continue;

    const double sy = static_cast<double>(row) + 0.5;
    const double depth_row = t.depth[1] * sy + t.depth[2];
    const float fy = static_cast<float>(sy);
    float colour_row[3];
    for (int k = 0; k < 3; ++k) colour_row[k] = t.colour[k][1] * fy + t.colour[k][2];
    const size_t offset = static_cast<size_t>((row - band.first_row) * band.width);
    float* const depth = band.depth.data() + offset;
    float* const colour = band.colour.data() + 3 * offset;
    for (int64_t x = t.x0 + first; x <= t.x0 + last; ++x) {
      const double sx = static_cast<double>(x) + 0.5;
      const float z =
          std::clamp(static_cast<float>(t.depth[0] * sx + depth_row), t.depth_min, t.depth_max);
      if (z > depth[x]) {
        depth[x] = z;
        const float fx = static_cast<float>(sx);
        for (int k = 0; k < 3; ++k) colour[3 * x + k] = t.colour[k][0] * fx + colour_row[k];
      }
    }
  }
}

// Box filter of a band's samples into its output rows.
void resolve_band(const Band& band, int ss, bool transparent, const float background[3],
                  Image& image) {
  const SrgbTable& srgb = srgb_table();
  const int n = ss * ss;
  const int64_t first = band.first_row / ss;
  const int64_t rows = band.rows / ss;
  for (int64_t oy = 0; oy < rows; ++oy) {
    uint8_t* out = image.rgba.data() + static_cast<size_t>((first + oy) * image.width) * 4;
    for (int64_t ox = 0; ox < image.width; ++ox, out += 4) {
      float sum[3] = {0, 0, 0};
      int covered = 0;
      for (int sy = 0; sy < ss; ++sy) {
        const size_t at = static_cast<size_t>((oy * ss + sy) * band.width + ox * ss);
        for (int sx = 0; sx < ss; ++sx) {
          if (band.depth[at + sx] > 0) {
            ++covered;
            for (int k = 0; k < 3; ++k) sum[k] += band.colour[3 * (at + sx) + k];
          }
        }
      }
      if (covered == 0) {
        if (transparent) {
          out[0] = out[1] = out[2] = out[3] = 0;
        } else {
          out[0] = kPreviewBackground[0];
          out[1] = kPreviewBackground[1];
          out[2] = kPreviewBackground[2];
          out[3] = 255;
        }
        continue;
      }
      for (int k = 0; k < 3; ++k) {
        // Averaged in linear light (as light adds), then encoded.
        const float linear = transparent
                                 ? sum[k] / static_cast<float>(covered)
                                 : (sum[k] + background[k] * static_cast<float>(n - covered)) /
                                       static_cast<float>(n);
        out[k] = srgb(linear);
      }
      out[3] = transparent ? static_cast<uint8_t>((255 * covered + n / 2) / n) : 255;
    }
  }
}

Image background_image(const PreviewOptions& options) {
  Image image;
  image.width = options.width;
  image.height = options.height;
  image.rgba.resize(static_cast<size_t>(options.width) * options.height * 4);
  for (size_t i = 0; i < image.rgba.size(); i += 4) {
    if (options.transparent_background) {
      image.rgba[i] = image.rgba[i + 1] = image.rgba[i + 2] = image.rgba[i + 3] = 0;
    } else {
      image.rgba[i] = kPreviewBackground[0];
      image.rgba[i + 1] = kPreviewBackground[1];
      image.rgba[i + 2] = kPreviewBackground[2];
      image.rgba[i + 3] = 255;
    }
  }
  return image;
}

// --- PNG ---------------------------------------------------------------------------------------

// What the libpng callbacks share with the encoder: the bytes written and the first error.
struct PngSink {
  std::string bytes;
  char error[256] = {};
};

// libpng reports errors by calling this, which must not return: it records the message and
// jumps back to the setjmp in write_png_chunks. No C++ exception may cross libpng's C frames.
void png_on_error(png_structp png, png_const_charp message) {
  auto* sink = static_cast<PngSink*>(png_get_error_ptr(png));
  std::snprintf(sink->error, sizeof sink->error, "%s", message ? message : "unknown error");
  png_longjmp(png, 1);
}

void png_on_warning(png_structp, png_const_charp) {
  // Warnings are about odd input data (none of ours); stderr is not the place for them.
}

void png_on_write(png_structp png, png_bytep data, size_t size) {
  bool failed = false;
  try {
    static_cast<PngSink*>(png_get_io_ptr(png))
        ->bytes.append(reinterpret_cast<const char*>(data), size);
  } catch (...) {
    failed = true;  // (out of memory) reported once the exception is gone
  }
  if (failed) png_error(png, "out of memory writing the PNG");
}

void png_on_flush(png_structp) {}

// Owns libpng's write structures.
class PngWriter {
 public:
  explicit PngWriter(PngSink& sink) {
    png_ = png_create_write_struct(PNG_LIBPNG_VER_STRING, &sink, png_on_error, png_on_warning);
    if (!png_) throw resource_exhausted("cannot create a PNG writer (out of memory)");
    info_ = png_create_info_struct(png_);
    if (!info_) {
      png_destroy_write_struct(&png_, nullptr);
      throw resource_exhausted("cannot create a PNG writer (out of memory)");
    }
    png_set_write_fn(png_, &sink, png_on_write, png_on_flush);
  }
  ~PngWriter() { png_destroy_write_struct(&png_, &info_); }
  PngWriter(const PngWriter&) = delete;
  PngWriter& operator=(const PngWriter&) = delete;
  png_structp png() const { return png_; }
  png_infop info() const { return info_; }

 private:
  png_structp png_ = nullptr;
  png_infop info_ = nullptr;
};

// Every libpng call that can fail, under one setjmp. longjmp skips C++ destructors, so this
// function holds none (the caller owns the writer, the texts and the pixels) and reads no local
// that changed after setjmp once it has jumped. False when libpng reported an error.
bool write_png_chunks(png_structp png, png_infop info, const Image& image, bool opaque,
                      png_text* texts, int text_count) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_IHDR(png, info, static_cast<png_uint_32>(image.width),
               static_cast<png_uint_32>(image.height), 8,
               opaque ? PNG_COLOR_TYPE_RGB : PNG_COLOR_TYPE_RGB_ALPHA, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_set_text(png, info, texts, text_count);
  // No row filter: measured on previews (flat background, smooth shading), it gives the
  // smallest files at zlib's default level and encodes 2-3 times faster than libpng's adaptive
  // choice (512 x 512: 46 KB in 9 ms against 51 KB in 23 ms).
  png_set_filter(png, PNG_FILTER_TYPE_BASE, PNG_FILTER_NONE);
  png_write_info(png, info);
  // RGB: the rows are RGBA, and libpng drops the fourth byte of each pixel.
  if (opaque) png_set_filler(png, 0, PNG_FILLER_AFTER);
  const size_t stride = static_cast<size_t>(image.width) * 4;
  for (int row = 0; row < image.height; ++row) {
    png_write_row(png, image.rgba.data() + stride * static_cast<size_t>(row));
  }
  png_write_end(png, info);
  return true;
}

bool plain_ascii(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u < 0x80;
  });
}

}  // namespace

void PreviewOptions::validate() const {
  require_in_range("width", width, kMinSide, kMaxSide);
  require_in_range("height", height, kMinSide, kMaxSide);
  require_in_range("supersample", supersample, 1, kMaxSupersample);
  require_range("azimuth_degrees", azimuth_degrees, -360, 360);
  require_range("elevation_degrees", elevation_degrees, -89, 89);
  require_range("fov_degrees", fov_degrees, 5, 120);
  require_range("fill", fill, 0.05, 1);
  if (camera) {
    require_finite("camera.eye", camera->eye);
    require_finite("camera.target", camera->target);
    require_finite("camera.up", camera->up);
    const Vec3 view = to_vec(camera->target) - to_vec(camera->eye);
    if (!(length(view) > 0) || !std::isfinite(length(view))) {
      throw invalid_argument("camera.target: it must differ from camera.eye (and be finite)");
    }
    const Vec3 up = to_vec(camera->up);
    const Vec3 side = cross(normalized(view), up);
    if (!(length(up) > 0) || !(length(side) > 1e-6 * length(up))) {
      throw invalid_argument("camera.up is zero or parallel to the view direction");
    }
  }
  validate_description(description);
}

Image render_preview(MeshView mesh, const PreviewOptions& options) {
  options.validate();
  validate_mesh(mesh);
  Image image = background_image(options);
  if (mesh.empty()) return image;

  const Camera view = make_view(bounding_sphere(mesh), options);
  const std::vector<ScreenTriangle> triangles = set_up_faces(mesh, view);
  if (triangles.empty()) return image;

  const int ss = options.supersample;
  Band band;
  band.width = int64_t{options.width} * ss;
  const int64_t sample_rows = int64_t{options.height} * ss;
  // Whole output rows in a band (ss sample rows each), at least one.
  const int64_t band_rows = std::max<int64_t>(1, kBandSamples / (band.width * ss)) * ss;
  const int64_t band_count = (sample_rows + band_rows - 1) / band_rows;

  // Triangles by band (a counting sort keeps the face order within each).
  std::vector<uint32_t> starts(static_cast<size_t>(band_count) + 1, 0);
  for (const ScreenTriangle& t : triangles) {
    for (int64_t b = t.y0 / band_rows; b <= t.y1 / band_rows; ++b) ++starts[b + 1];
  }
  for (size_t b = 1; b < starts.size(); ++b) starts[b] += starts[b - 1];
  std::vector<uint32_t> binned(starts.back());
  {
    std::vector<uint32_t> fill_at(starts.begin(), starts.end() - 1);
    for (size_t i = 0; i < triangles.size(); ++i) {
      for (int64_t b = triangles[i].y0 / band_rows; b <= triangles[i].y1 / band_rows; ++b) {
        binned[fill_at[b]++] = static_cast<uint32_t>(i);
      }
    }
  }

  float background[3];
  for (int k = 0; k < 3; ++k) {
    background[k] = static_cast<float>(srgb_to_linear(kPreviewBackground[k] / 255.0));
  }
  band.depth.resize(static_cast<size_t>(band.width * band_rows));
  band.colour.resize(band.depth.size() * 3);
  for (int64_t b = 0; b < band_count; ++b) {
    if (starts[b] == starts[b + 1]) continue;  // nothing here: the background stays
    band.first_row = b * band_rows;
    band.rows = std::min(band_rows, sample_rows - band.first_row);
    std::fill(band.depth.begin(), band.depth.end(), 0.0f);
    for (uint32_t i = starts[b]; i < starts[b + 1]; ++i) rasterize(triangles[binned[i]], band);
    resolve_band(band, ss, options.transparent_background, background, image);
  }
  return image;
}

std::string encode_png(const Image& image, std::string_view description) {
  if (image.width < 1 || image.height < 1 || image.width > (1 << 16) || image.height > (1 << 16)) {
    throw invalid_argument("image is " + std::to_string(image.width) + " x " +
                           std::to_string(image.height) + ": each side must be 1..65536");
  }
  const size_t expected = static_cast<size_t>(image.width) * image.height * 4;
  if (image.rgba.size() != expected) {
    throw invalid_argument(
        "image of " + std::to_string(image.width) + " x " + std::to_string(image.height) + " has " +
        std::to_string(image.rgba.size()) + " bytes of RGBA, not " + std::to_string(expected));
  }
  validate_description(description);
  bool opaque = true;
  for (size_t i = 3; i < image.rgba.size() && opaque; i += 4) opaque = image.rgba[i] == 255;

  // libpng copies the texts in png_set_text; these outlive the call anyway.
  std::string software_key = "Software";
  std::string software = kPreviewSoftware;
  std::string description_key = "Description";
  std::string description_text(description);
  std::string empty;
  png_text texts[2] = {};
  texts[0].compression = PNG_TEXT_COMPRESSION_NONE;
  texts[0].key = software_key.data();
  texts[0].text = software.data();
  texts[0].text_length = software.size();
  int text_count = 1;
  if (!description.empty()) {
    png_text& t = texts[text_count++];
    // tEXt is Latin-1: UTF-8 beyond ASCII goes in an iTXt chunk, which is UTF-8.
    const bool ascii = plain_ascii(description);
    t.compression = ascii ? PNG_TEXT_COMPRESSION_NONE : PNG_ITXT_COMPRESSION_NONE;
    t.key = description_key.data();
    t.text = description_text.data();
    if (ascii) {
      t.text_length = description_text.size();
    } else {
      t.itxt_length = description_text.size();
      t.lang = empty.data();
      t.lang_key = empty.data();
    }
  }

  PngSink sink;
  sink.bytes.reserve(expected / 4);
  {
    const PngWriter writer(sink);
    if (!write_png_chunks(writer.png(), writer.info(), image, opaque, texts, text_count)) {
      throw internal_error(std::string("PNG encoding failed: ") + sink.error);
    }
  }
  return std::move(sink.bytes);
}

std::string preview_png(MeshView mesh, const PreviewOptions& options) {
  return encode_png(render_preview(mesh, options), options.description);
}

}  // namespace cube3d
