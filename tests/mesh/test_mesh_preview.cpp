// The mesh preview: framing, shading, background and transparency, robustness (empty, degenerate,
// clipped, invalid meshes), determinism, and the PNG read back with libpng.
#include "cube3d/mesh/mesh_preview.h"

#include <gtest/gtest.h>
#include <png.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "cube3d/core/error.h"
#include "expect_error.h"

namespace cube3d {
namespace test_mesh_preview {

using testing::expect_error;

constexpr double kPi = 3.14159265358979323846;

// A closed mesh from triangles of given corners, each wound counter-clockwise seen from outside
// (flipped where needed: the shapes here are star-shaped around `inside`).
void add_outward(Mesh& mesh, std::array<float, 3> inside, uint32_t a, uint32_t b, uint32_t c) {
  const auto p = [&](uint32_t i, int k) { return double(mesh.vertices[3 * i + k]); };
  double e1[3], e2[3], centroid[3];
  for (int k = 0; k < 3; ++k) {
    e1[k] = p(b, k) - p(a, k);
    e2[k] = p(c, k) - p(a, k);
    centroid[k] = (p(a, k) + p(b, k) + p(c, k)) / 3 - inside[k];
  }
  const double n[3] = {e1[1] * e2[2] - e1[2] * e2[1], e1[2] * e2[0] - e1[0] * e2[2],
                       e1[0] * e2[1] - e1[1] * e2[0]};
  const bool outward = n[0] * centroid[0] + n[1] * centroid[1] + n[2] * centroid[2] >= 0;
  mesh.indices.insert(mesh.indices.end(), {a, outward ? b : c, outward ? c : b});
}

// An axis-aligned cube of side `size` centred at `centre`.
Mesh cube(std::array<float, 3> centre = {0, 0, 0}, float size = 1) {
  Mesh mesh;
  for (int c = 0; c < 8; ++c) {
    for (int k = 0; k < 3; ++k) {
      mesh.vertices.push_back(centre[k] + size * (((c >> k) & 1) ? 0.5f : -0.5f));
    }
  }
  const uint32_t quads[6][4] = {{0, 2, 3, 1}, {4, 5, 7, 6}, {0, 1, 5, 4},
                                {2, 6, 7, 3}, {0, 4, 6, 2}, {1, 3, 7, 5}};
  for (const auto& q : quads) {
    add_outward(mesh, centre, q[0], q[1], q[2]);
    add_outward(mesh, centre, q[0], q[2], q[3]);
  }
  return mesh;
}

// A UV sphere: 2 * slices * (stacks - 1) triangles.
Mesh sphere(std::array<float, 3> centre = {0, 0, 0}, float radius = 1, int stacks = 24,
            int slices = 48) {
  Mesh mesh;
  for (int i = 0; i <= stacks; ++i) {
    const double theta = kPi * i / stacks;
    for (int j = 0; j < slices; ++j) {
      const double phi = 2 * kPi * j / slices;
      mesh.vertices.push_back(centre[0] + float(radius * std::sin(theta) * std::cos(phi)));
      mesh.vertices.push_back(centre[1] + float(radius * std::cos(theta)));
      mesh.vertices.push_back(centre[2] + float(radius * std::sin(theta) * std::sin(phi)));
    }
  }
  const auto at = [&](int i, int j) { return uint32_t(i * slices + (j % slices)); };
  for (int i = 0; i < stacks; ++i) {
    for (int j = 0; j < slices; ++j) {
      if (i > 0) add_outward(mesh, centre, at(i, j), at(i + 1, j), at(i, j + 1));
      if (i + 1 < stacks) add_outward(mesh, centre, at(i, j + 1), at(i + 1, j), at(i + 1, j + 1));
    }
  }
  return mesh;
}

std::array<uint8_t, 4> pixel(const Image& image, int x, int y) {
  const size_t at = (size_t(y) * image.width + x) * 4;
  return {image.rgba[at], image.rgba[at + 1], image.rgba[at + 2], image.rgba[at + 3]};
}

bool is_background(const Image& image, int x, int y) {
  const auto p = pixel(image, x, y);
  return p[0] == kPreviewBackground[0] && p[1] == kPreviewBackground[1] &&
         p[2] == kPreviewBackground[2] && p[3] == 255;
}

// The fraction of pixels that show the mesh.
double coverage(const Image& image) {
  int64_t covered = 0;
  for (int y = 0; y < image.height; ++y) {
    for (int x = 0; x < image.width; ++x) covered += is_background(image, x, y) ? 0 : 1;
  }
  return double(covered) / (double(image.width) * image.height);
}

bool border_is_background(const Image& image) {
  for (int x = 0; x < image.width; ++x) {
    if (!is_background(image, x, 0) || !is_background(image, x, image.height - 1)) return false;
  }
  for (int y = 0; y < image.height; ++y) {
    if (!is_background(image, 0, y) || !is_background(image, image.width - 1, y)) return false;
  }
  return true;
}

double mean_brightness_of_mesh(const Image& image) {
  double sum = 0;
  int64_t n = 0;
  for (int y = 0; y < image.height; ++y) {
    for (int x = 0; x < image.width; ++x) {
      if (is_background(image, x, y)) continue;
      const auto p = pixel(image, x, y);
      sum += p[0] + p[1] + p[2];
      ++n;
    }
  }
  return n ? sum / (3.0 * n) : 0;
}

PreviewOptions sized(int width, int height) {
  PreviewOptions options;
  options.width = width;
  options.height = height;
  return options;
}

// libpng's simplified read API: the pixels as RGBA.
struct Decoded {
  int width = 0, height = 0;
  std::vector<uint8_t> rgba;
};
Decoded decode_png(const std::string& bytes) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  EXPECT_TRUE(png_image_begin_read_from_memory(&image, bytes.data(), bytes.size()))
      << image.message;
  image.format = PNG_FORMAT_RGBA;
  Decoded out;
  out.width = int(image.width);
  out.height = int(image.height);
  out.rgba.resize(PNG_IMAGE_SIZE(image));
  EXPECT_TRUE(png_image_finish_read(&image, nullptr, out.rgba.data(), 0, nullptr)) << image.message;
  png_image_free(&image);
  return out;
}

// The PNG's chunks as (type, data), in order (the CRCs are libpng's to check, above).
std::vector<std::pair<std::string, std::string>> chunks(const std::string& png) {
  std::vector<std::pair<std::string, std::string>> out;
  EXPECT_EQ(png.substr(0, 8), "\x89PNG\r\n\x1a\n");
  for (size_t at = 8; at + 12 <= png.size();) {
    const auto byte = [&](size_t i) { return uint32_t(uint8_t(png[i])); };
    const uint32_t length = byte(at) << 24 | byte(at + 1) << 16 | byte(at + 2) << 8 | byte(at + 3);
    out.emplace_back(png.substr(at + 4, 4), png.substr(at + 8, length));
    at += 12 + length;
  }
  return out;
}

TEST(MeshPreview, ACubeFillsTheMiddleAndLeavesTheCornersBackground) {
  const Image image = render_preview(cube(), sized(128, 96));
  ASSERT_EQ(image.width, 128);
  ASSERT_EQ(image.height, 96);
  ASSERT_EQ(image.rgba.size(), 128u * 96 * 4);
  EXPECT_FALSE(is_background(image, 64, 48));
  EXPECT_EQ(pixel(image, 64, 48)[3], 255);
  for (const auto& [x, y] : {std::pair{0, 0}, {127, 0}, {0, 95}, {127, 95}}) {
    EXPECT_TRUE(is_background(image, x, y)) << x << ", " << y;
  }
  EXPECT_TRUE(border_is_background(image));  // the whole shape fits, with a margin
}

TEST(MeshPreview, TheVisibleFacesAreShadedDifferently) {
  const Image image = render_preview(cube(), sized(200, 200));
  // A cube from front-right-above shows three faces, each one flat shade (sharp corners keep
  // their face normals): three big clusters of colour, not one.
  std::map<std::array<uint8_t, 4>, int> counts;
  int covered = 0;
  for (int y = 0; y < image.height; ++y) {
    for (int x = 0; x < image.width; ++x) {
      if (is_background(image, x, y)) continue;
      ++covered;
      ++counts[pixel(image, x, y)];
    }
  }
  ASSERT_GT(covered, 1000);
  std::vector<std::array<uint8_t, 4>> large;
  for (const auto& [colour, n] : counts) {
    if (n > covered / 20) large.push_back(colour);
  }
  ASSERT_EQ(large.size(), 3u) << "expected three face shades";
  for (size_t i = 0; i < large.size(); ++i) {
    for (size_t j = i + 1; j < large.size(); ++j) {
      const int difference = std::abs(int(large[i][0]) - int(large[j][0])) +
                             std::abs(int(large[i][1]) - int(large[j][1])) +
                             std::abs(int(large[i][2]) - int(large[j][2]));
      EXPECT_GT(difference, 15) << "faces " << i << " and " << j << " look alike";
    }
  }
  // Smooth shading on a sphere: many levels.
  std::map<std::array<uint8_t, 4>, int> sphere_colours;
  const Image ball = render_preview(sphere(), sized(128, 128));
  for (int y = 0; y < 128; ++y) {
    for (int x = 0; x < 128; ++x) ++sphere_colours[pixel(ball, x, y)];
  }
  EXPECT_GT(sphere_colours.size(), 50u);
}

TEST(MeshPreview, AShapeFarAwayOrHugeIsFramedTheSame) {
  const Image near = render_preview(sphere(), sized(160, 160));
  const Image far = render_preview(sphere({1000, -500, 2000}, 250), sized(160, 160));
  const Image tiny = render_preview(sphere({0.001f, 0.002f, 0}, 0.001f), sized(160, 160));
  // The bounding sphere's image spans `fill` (0.9) of the side: a disc of pi * 0.45^2 = 0.636
  // of the image (a little less for the polygonal sphere).
  EXPECT_NEAR(coverage(near), 0.636, 0.03);
  EXPECT_NEAR(coverage(far), coverage(near), 0.01);
  EXPECT_NEAR(coverage(tiny), coverage(near), 0.01);
  EXPECT_TRUE(border_is_background(far));
  // A wide image frames on its shorter side.
  const Image wide = render_preview(cube({5, 5, 5}, 40), sized(300, 100));
  EXPECT_TRUE(border_is_background(wide));
  EXPECT_FALSE(is_background(wide, 150, 50));
}

TEST(MeshPreview, AnEmptyMeshIsTheBackground) {
  for (const Mesh& mesh : {Mesh{}, Mesh{{0, 0, 0, 1, 1, 1}, {}}}) {
    const Image image = render_preview(mesh, sized(32, 16));
    ASSERT_EQ(image.rgba.size(), 32u * 16 * 4);
    EXPECT_EQ(coverage(image), 0.0);
  }
  PreviewOptions transparent = sized(16, 16);
  transparent.transparent_background = true;
  const Image image = render_preview(Mesh{}, transparent);
  for (size_t i = 3; i < image.rgba.size(); i += 4) ASSERT_EQ(image.rgba[i], 0);
}

TEST(MeshPreview, DegenerateFacesDrawNothing) {
  Mesh mesh;
  mesh.vertices = {0, 0, 0, 1, 1, 1, 2, 2, 2, 0, 0, 0};
  mesh.indices = {0, 1, 2,   // collinear
                  0, 3, 1,   // two corners at one point
                  1, 1, 1};  // one vertex thrice
  EXPECT_EQ(coverage(render_preview(mesh, sized(64, 64))), 0.0);
  // Beside a real shape they change nothing.
  Mesh both = cube();
  const uint32_t base = uint32_t(both.vertex_count());
  both.vertices.insert(both.vertices.end(), {0, 0, 0, 0.5f, 0.5f, 0.5f, 0.25f, 0.25f, 0.25f});
  both.indices.insert(both.indices.end(), {base, base + 1, base + 2, base, base, base});
  EXPECT_EQ(render_preview(both, sized(64, 64)).rgba, render_preview(cube(), sized(64, 64)).rgba);
}

TEST(MeshPreview, TransparentBackgroundHasAlphaZeroAndSoftEdges) {
  PreviewOptions options = sized(96, 96);
  options.transparent_background = true;
  const Image image = render_preview(sphere(), options);
  EXPECT_EQ(pixel(image, 0, 0)[3], 0);
  EXPECT_EQ(pixel(image, 95, 95)[3], 0);
  EXPECT_EQ(pixel(image, 48, 48)[3], 255);
  int partial = 0;
  for (size_t i = 3; i < image.rgba.size(); i += 4) {
    partial += image.rgba[i] > 0 && image.rgba[i] < 255;
  }
  EXPECT_GT(partial, 50) << "the silhouette is antialiased";
  // Opaque, the same edge pixels blend into the background colour instead.
  const Image opaque = render_preview(sphere(), sized(96, 96));
  for (size_t i = 3; i < opaque.rgba.size(); i += 4) ASSERT_EQ(opaque.rgba[i], 255);
}

TEST(MeshPreview, BackFacesAreDarkerNotGone) {
  // One open square in the z = 0 plane, its front facing +Z.
  Mesh square;
  square.vertices = {-1, -1, 0, 1, -1, 0, 1, 1, 0, -1, 1, 0};
  square.indices = {0, 1, 2, 0, 2, 3};
  PreviewOptions front = sized(96, 96);
  PreviewOptions back = front;
  back.azimuth_degrees = 180 + 35;  // from behind
  const Image seen_front = render_preview(square, front);
  const Image seen_back = render_preview(square, back);
  EXPECT_GT(coverage(seen_back), 0.2);
  EXPECT_NEAR(coverage(seen_back), coverage(seen_front), 0.02);
  EXPECT_LT(mean_brightness_of_mesh(seen_back), mean_brightness_of_mesh(seen_front) - 20);
}

TEST(MeshPreview, SharedEdgesLeaveNoCracks) {
  // A square that fills the whole view, split along a diagonal and into a fan: every pixel shows
  // it (a crack along an inner edge would show the background).
  Mesh fan;
  fan.vertices = {-10, -10, 0, 10, -10, 0, 10, 10, 0, -10, 10, 0, 0.3f, -0.2f, 0};
  fan.indices = {4, 0, 1, 4, 1, 2, 4, 2, 3, 4, 3, 0};
  PreviewOptions options = sized(64, 48);
  options.supersample = 1;
  options.camera = PreviewCamera{{0.1, 0.2, 5}, {0.1, 0.2, 0}, {0, 1, 0}};
  EXPECT_EQ(coverage(render_preview(fan, options)), 1.0);
}

TEST(MeshPreview, TrianglesBehindOrAcrossTheCameraAreClipped) {
  // A floor under an explicit camera at the origin, reaching far behind it: its near part is
  // clipped away, the rest fills the lower half of the view.
  Mesh floor;
  floor.vertices = {-50, -1, -50, 50, -1, -50, 0, -1, 50};
  floor.indices = {0, 2, 1};
  PreviewOptions options = sized(64, 64);
  options.camera = PreviewCamera{{0, 0, 0}, {0, 0, -1}, {0, 1, 0}};
  const Image image = render_preview(floor, options);
  EXPECT_FALSE(is_background(image, 32, 60));  // the floor in front, below the horizon
  EXPECT_TRUE(is_background(image, 32, 4));    // the sky
  // A triangle wholly behind the camera, and one through its eye: nothing, no crash.
  Mesh behind;
  behind.vertices = {-1, -1, 1, 1, -1, 1, 0, 1, 1, -1, -1, -1, 1, -1, 1, 0, 0, 0};
  behind.indices = {0, 1, 2, 3, 4, 5};
  EXPECT_NO_THROW(render_preview(behind, options));
  EXPECT_EQ(coverage(render_preview(Mesh{{-1, -1, 1, 1, -1, 1, 0, 1, 1}, {0, 1, 2}}, options)),
            0.0);
  // Large coordinates far beside the view: clipped to the guard band around it.
  Mesh wall;
  wall.vertices = {-1e6f, -0.25f, -2, 1e6f, -0.25f, -2, 0, 1e6f, -2};
  wall.indices = {0, 1, 2};
  const Image image_of_wall = render_preview(wall, options);
  EXPECT_FALSE(is_background(image_of_wall, 32, 32));
  EXPECT_TRUE(is_background(image_of_wall, 32, 60));  // below its edge at y = -0.25
  // Near float's limits the cut points lose their digits, but nothing overflows.
  for (float& c : wall.vertices) c = std::abs(c) > 1e5f ? std::copysign(1e38f, c) : c;
  EXPECT_NO_THROW(render_preview(wall, options));
}

TEST(MeshPreview, BadOptionsAreRefusedNamingTheField) {
  const Mesh mesh = cube();
  // The default options with one change are refused, by the renderer and by validate().
  const auto refused = [&](const std::function<void(PreviewOptions&)>& change,
                           const std::string& field) {
    SCOPED_TRACE(field);
    PreviewOptions options;
    change(options);
    expect_error([&] { render_preview(mesh, options); }, ErrorCode::kInvalidArgument, field);
    expect_error([&] { options.validate(); }, ErrorCode::kInvalidArgument, field);
  };
  using O = PreviewOptions;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  refused([](O& o) { o.width = 15; }, "width");
  refused([](O& o) { o.width = 4097; }, "width");
  refused([](O& o) { o.height = 0; }, "height");
  refused([](O& o) { o.supersample = 5; }, "supersample");
  refused([](O& o) { o.fov_degrees = std::numeric_limits<double>::quiet_NaN(); }, "fov_degrees");
  refused([](O& o) { o.elevation_degrees = 90; }, "elevation_degrees");
  refused([](O& o) { o.fill = 0; }, "fill");
  refused([](O& o) { o.camera = PreviewCamera{{0, 0, 1}, {0, 0, 1}, {0, 1, 0}}; }, "camera.target");
  refused([](O& o) { o.camera = PreviewCamera{{0, 5, 0}, {0, 0, 0}, {0, 1, 0}}; }, "camera.up");
  refused([](O& o) { o.camera = PreviewCamera{{0, kInf, 0}, {0, 0, 0}, {0, 1, 0}}; }, "camera.eye");
  refused([](O& o) { o.description = "bad \xff byte"; }, "description");
  refused([](O& o) { o.description = std::string("nul\0byte", 8); }, "description");
  refused([](O& o) { o.description = std::string(65537, 'a'); }, "description");
  PreviewOptions o;
  o.width = 16;
  o.height = 4096;
  EXPECT_NO_THROW(o.validate());
}

TEST(MeshPreview, BadMeshesAreRefusedNamingTheVertexOrFace) {
  // A cube with one change is refused with a message that holds each of the needles.
  const auto refused = [](const std::function<void(Mesh&)>& change,
                          const std::vector<std::string>& needles) {
    SCOPED_TRACE(needles.front());
    Mesh mesh = cube();
    change(mesh);
    expect_error([&] { render_preview(mesh); }, ErrorCode::kInvalidArgument, needles);
  };
  refused([](Mesh& m) { m.vertices[3 * 5 + 1] = std::numeric_limits<float>::quiet_NaN(); },
          {"vertex 5"});
  refused([](Mesh& m) { m.vertices[3 * 7] = -std::numeric_limits<float>::infinity(); },
          {"vertex 7"});
  refused([](Mesh& m) { m.indices[3 * 4 + 2] = 8; }, {"face 4", "vertex 8"});
  refused([](Mesh& m) { m.indices.push_back(0); }, {"multiple of 3"});
  refused([](Mesh& m) { m.vertices.pop_back(); }, {"multiple of 3"});
}

TEST(MeshPreview, AViewOfArraysElsewhereDrawsAsTheMeshDoes) {
  // The HTTP door draws a response's arrays where they are (a MeshView over the protobuf's
  // repeated fields): the same pixels as the Mesh they hold, and the same refusals.
  const Mesh ball = sphere();
  const std::vector<float> vertices = ball.vertices;  // another owner's arrays
  const std::vector<uint32_t> indices = ball.indices;
  const MeshView view(std::span<const float>(vertices.data(), vertices.size()),
                      std::span<const uint32_t>(indices.data(), indices.size()));
  EXPECT_EQ(view.vertex_count(), ball.vertex_count());
  EXPECT_EQ(view.face_count(), ball.face_count());
  EXPECT_EQ(render_preview(view, sized(64, 48)).rgba, render_preview(ball, sized(64, 48)).rgba);
  EXPECT_EQ(preview_png(view, sized(40, 40)), preview_png(ball, sized(40, 40)));
  EXPECT_EQ(render_preview(MeshView(), sized(16, 16)).rgba,
            render_preview(Mesh{}, sized(16, 16)).rgba);
  const std::vector<uint32_t> out_of_range = {0, 1, static_cast<uint32_t>(ball.vertex_count())};
  expect_error([&] { render_preview(MeshView(vertices, out_of_range)); },
               ErrorCode::kInvalidArgument, {"face 0", "vertex"});
}

TEST(MeshPreview, ThePngDecodesToTheSamePixels) {
  for (const bool transparent : {false, true}) {
    PreviewOptions options = sized(72, 40);
    options.transparent_background = transparent;
    const Image image = render_preview(sphere(), options);
    const std::string png = encode_png(image);
    const Decoded decoded = decode_png(png);
    EXPECT_EQ(decoded.width, 72);
    EXPECT_EQ(decoded.height, 40);
    EXPECT_EQ(decoded.rgba, image.rgba) << "transparent " << transparent;
    const auto list = chunks(png);
    ASSERT_GE(list.size(), 4u);
    EXPECT_EQ(list.front().first, "IHDR");
    EXPECT_EQ(uint8_t(list.front().second[9]), transparent ? 6 : 2);  // RGBA : RGB
    EXPECT_EQ(list.back().first, "IEND");
    int software = 0;
    for (const auto& [type, data] : list) {
      EXPECT_NE(type, "tIME");  // (no time stamp: the same bytes every time)
      if (type == "tEXt" && data == std::string("Software\0cube3d-server", 22)) ++software;
    }
    EXPECT_EQ(software, 1);
  }
}

TEST(MeshPreview, TheDescriptionIsAPngText) {
  PreviewOptions options = sized(16, 16);
  options.description = "a wooden chair";
  auto list = chunks(preview_png(cube(), options));
  int found = 0;
  for (const auto& [type, data] : list) {
    found += type == "tEXt" && data == std::string("Description\0a wooden chair", 26);
  }
  EXPECT_EQ(found, 1);
  // Beyond ASCII: iTXt (UTF-8), uncompressed, no language.
  options.description = "une chaise en b\xc3\xa9tula \xe2\x9c\x93";
  list = chunks(preview_png(cube(), options));
  found = 0;
  for (const auto& [type, data] : list) {
    found +=
        type == "iTXt" && data == std::string("Description\0\0\0\0\0", 16) + options.description;
  }
  EXPECT_EQ(found, 1);
  expect_error(
      [] {
        encode_png(Image{4, 4, std::vector<uint8_t>(10)});
      },
      ErrorCode::kInvalidArgument, "bytes");
  expect_error([] { encode_png(Image{}); }, ErrorCode::kInvalidArgument, "0 x 0");
}

TEST(MeshPreview, OutputIsDeterministic) {
  PreviewOptions options = sized(100, 80);
  options.description = "same";
  const Mesh mesh = sphere({0.2f, 0.1f, -0.3f}, 0.7f);
  const std::string first = preview_png(mesh, options);
  const Mesh copy = mesh;
  EXPECT_EQ(preview_png(copy, options), first);
  EXPECT_EQ(preview_png(mesh, options), first);
  // ... and depends on the view.
  options.azimuth_degrees = -35;
  EXPECT_NE(preview_png(cube(), options), preview_png(cube(), sized(100, 80)));
}

TEST(MeshPreview, LargeMeshesAndImagesRender) {
  // 200k faces (a sphere of 250 x 400), at the largest size in bands.
  const Mesh ball = sphere({0, 0, 0}, 1, 251, 400);
  ASSERT_GT(ball.face_count(), 199'000u);
  const Image small = render_preview(ball, sized(64, 64));
  EXPECT_NEAR(coverage(small), 0.636, 0.05);
  PreviewOptions big = sized(2048, 2048);
  big.supersample = 2;
  const Image large = render_preview(cube(), big);
  EXPECT_FALSE(is_background(large, 1024, 1024));
  EXPECT_TRUE(border_is_background(large));
}

}  // namespace test_mesh_preview
}  // namespace cube3d
