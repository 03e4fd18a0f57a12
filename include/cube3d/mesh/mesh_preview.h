// A still image of a mesh, for thumbnails: a small software rasterizer of our own (a z-buffer
// over fixed-point edge functions, supersampled, Lambert-shaded clay) and a PNG encoder (libpng).
// Why our own: an off-screen OpenGL (OSMesa, or EGL with llvmpipe) would bring Mesa and LLVM,
// 100+ MB, into the CPU image for one thumbnail, and VTK or Filament are larger still; a thumbnail
// needs one lit, antialiased view, which is a few hundred lines.
//
// The view: a product shot from front-right-above (azimuth 35 degrees from +Z towards +X,
// elevation 25 degrees, +Y up as in glTF and Roblox), in perspective, framed on the mesh's
// bounding sphere so that the whole shape fits with a margin whatever its size and position.
// Back faces (of open meshes) are drawn a shade darker rather than left out. Lights follow the
// camera (a key light from the upper left, a weaker fill from the right, a sky/ground ambient),
// so every view is lit alike.
//
// Deterministic: the same mesh and options give the same pixels and the same PNG bytes (single
// thread, no time stamp in the file).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cube3d/mesh/mesh.h"

namespace cube3d {

// The arrays a preview draws, borrowed for the call: a Mesh, or a response's raw arrays as they
// are (the HTTP door's PNG answer draws the protobuf's repeated fields without copying them).
struct MeshView {
  std::span<const float> vertices;    // x, y, z per vertex
  std::span<const uint32_t> indices;  // three per triangle

  MeshView() = default;
  MeshView(std::span<const float> vertices_in, std::span<const uint32_t> indices_in)
      : vertices(vertices_in), indices(indices_in) {}
  // Implicit: every Mesh is a view of itself.
  MeshView(const Mesh& mesh)  // NOLINT(google-explicit-constructor)
      : vertices(mesh.vertices), indices(mesh.indices) {}

  std::size_t vertex_count() const { return vertices.size() / 3; }
  std::size_t face_count() const { return indices.size() / 3; }
  bool empty() const { return indices.empty(); }
};

// The opaque background, sRGB: a light cool grey that a light-grey shape still stands out on.
inline constexpr std::array<uint8_t, 3> kPreviewBackground = {236, 239, 243};

// The PNG "Software" text of every preview.
inline constexpr const char* kPreviewSoftware = "cube3d-server";
// The longest PNG "Description" text, in bytes.
inline constexpr size_t kMaxPreviewDescriptionBytes = 65536;

// A camera placed by hand, instead of the product-shot framing.
struct PreviewCamera {
  std::array<double, 3> eye = {0, 0, 3};
  std::array<double, 3> target = {0, 0, 0};
  std::array<double, 3> up = {0, 1, 0};  // need not be orthogonal to the view, only not parallel
};

struct PreviewOptions {
  int width = 512;   // pixels, 16..4096
  int height = 512;  // pixels, 16..4096
  // Samples per pixel along each axis (1..4): 3 gives 9 samples a pixel, box-filtered down, for
  // antialiased edges.
  int supersample = 3;
  // Alpha 0 where the background shows (and partial alpha on edges) instead of
  // kPreviewBackground.
  bool transparent_background = false;
  double azimuth_degrees = 35;    // around +Y, from +Z (the front) towards +X (the right)
  double elevation_degrees = 25;  // above the horizontal, -89..89
  double fov_degrees = 30;        // field of view across the shorter side, 5..120
  // The bounding sphere's image spans this fraction of the shorter side (0.05..1): the margin.
  double fill = 0.9;
  // Set: this camera (with fov_degrees) instead of azimuth, elevation and fill. Parts of the
  // mesh behind it or beside it are clipped away.
  std::optional<PreviewCamera> camera;
  // The PNG's "Description" text (e.g. the prompt), UTF-8, at most kMaxPreviewDescriptionBytes,
  // no NUL; empty: none.
  std::string description;

  // Throws invalid_argument naming the field ("width", "camera.up", ...) and its allowed range.
  void validate() const;
};

// 8-bit RGBA, rows top to bottom, straight (not premultiplied) alpha; sRGB.
struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgba;  // width * height * 4
};

// The mesh as options.validate() allows. A mesh without faces gives the background alone.
// Throws invalid_argument naming the vertex for a NaN or infinite coordinate, naming the face for
// an index out of range, and for vertex or index arrays not a multiple of three long.
// Degenerate faces draw nothing.
Image render_preview(MeshView mesh, const PreviewOptions& options = {});

// The image as PNG bytes: 8-bit RGB when every pixel is opaque, else RGBA; a tEXt "Software"
// chunk (kPreviewSoftware) and, when `description` is not empty, a "Description" one (iTXt when
// it is not plain ASCII). Throws invalid_argument for an image whose size and pixels disagree or
// a description that options.validate() would refuse.
std::string encode_png(const Image& image, std::string_view description = {});

// encode_png(render_preview(mesh, options), options.description).
std::string preview_png(MeshView mesh, const PreviewOptions& options = {});

}  // namespace cube3d
