#include "cube3d/mesh/compact_mesh.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "cube3d/core/error.h"

namespace cube3d {
namespace {

uint64_t align4(uint64_t n) { return (n + 3) & ~uint64_t{3}; }

// Byte-wise little-endian stores and loads: the payload's byte order whatever the host's.
void put_u16(std::string& out, size_t at, uint16_t v) {
  out[at] = static_cast<char>(v & 0xff);
  out[at + 1] = static_cast<char>(v >> 8);
}
void put_u32(std::string& out, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) out[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
void put_f32(std::string& out, size_t at, float v) { put_u32(out, at, std::bit_cast<uint32_t>(v)); }

uint8_t byte_at(std::string_view in, size_t at) { return static_cast<uint8_t>(in[at]); }
uint16_t get_u16(std::string_view in, size_t at) {
  return static_cast<uint16_t>(byte_at(in, at) | (byte_at(in, at + 1) << 8));
}
uint32_t get_u32(std::string_view in, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | byte_at(in, at + static_cast<size_t>(i));
  return v;
}
float get_f32(std::string_view in, size_t at) { return std::bit_cast<float>(get_u32(in, at)); }

// Where each section of a payload starts, and where the payload ends.
struct Layout {
  uint64_t positions = kCompactMeshHeaderBytes;
  uint64_t normals = 0;  // 0: none
  uint64_t indices = 0;
  uint64_t end = 0;
};

Layout layout_of(uint64_t vertex_count, uint64_t triangle_count, uint8_t flags) {
  Layout l;
  const uint64_t position_bytes = vertex_count * 3 * ((flags & kCompactFlagQuantized) ? 2 : 4);
  uint64_t next = align4(l.positions + position_bytes);
  if (flags & kCompactFlagNormals) {
    l.normals = next;
    next = align4(next + vertex_count * 3);
  }
  l.indices = next;
  l.end = align4(next + triangle_count * 3 * ((flags & kCompactFlagIndices32) ? 4 : 2));
  return l;
}

uint16_t quantize(float p, float min, float max) {
  const double extent = static_cast<double>(max) - min;
  if (!(extent > 0)) return 0;
  const double q = std::round((static_cast<double>(p) - min) / extent * kCompactQuantSteps);
  return static_cast<uint16_t>(std::clamp(q, 0.0, static_cast<double>(kCompactQuantSteps)));
}

float dequantize(uint16_t q, float min, float max) {
  const auto p = static_cast<float>(static_cast<double>(min) +
                                    q * ((static_cast<double>(max) - min) / kCompactQuantSteps));
  // On an axis of a huge extent the double's rounding can step past a bound (fuzz_compact_mesh
  // found one: an extent of 3e16 and a bound of 1e-41); a position stays within its bounds.
  return std::clamp(p, min, max);
}

int8_t snorm8(float n) {
  return static_cast<int8_t>(std::lround(std::clamp(n, -1.0f, 1.0f) * kCompactNormalScale));
}

Error compact_error(const std::string& what, uint64_t offset) {
  return invalid_argument("compact mesh: " + what + " (byte offset " + std::to_string(offset) +
                          ")");
}

}  // namespace

std::string_view to_string(CompactPositions positions) {
  return positions == CompactPositions::kQuantized16 ? "quantized16" : "float32";
}

uint64_t compact_mesh_bytes(uint64_t vertex_count, uint64_t triangle_count, uint8_t flags) {
  return layout_of(vertex_count, triangle_count, flags).end;
}

std::string encode_compact_mesh(std::span<const float> vertices, std::span<const uint32_t> indices,
                                std::span<const float> normals, CompactPositions positions) {
  if (vertices.size() % 3 != 0) {
    throw invalid_argument("compact mesh: " + std::to_string(vertices.size()) +
                           " vertex coordinates, not three per vertex");
  }
  if (indices.size() % 3 != 0) {
    throw invalid_argument("compact mesh: " + std::to_string(indices.size()) +
                           " indices, not three per triangle");
  }
  const uint64_t vertex_count = vertices.size() / 3;
  const uint64_t triangle_count = indices.size() / 3;
  if (vertex_count > std::numeric_limits<uint32_t>::max() ||
      triangle_count > std::numeric_limits<uint32_t>::max()) {
    throw invalid_argument("compact mesh: more than 2^32 - 1 vertices or triangles");
  }
  if (!normals.empty() && normals.size() != vertices.size()) {
    throw invalid_argument("compact mesh: " + std::to_string(normals.size() / 3) + " normals for " +
                           std::to_string(vertex_count) + " vertices");
  }
  for (const uint32_t i : indices) {
    if (i >= vertex_count) {
      throw invalid_argument("compact mesh: index " + std::to_string(i) + " of " +
                             std::to_string(vertex_count) + " vertices");
    }
  }
  std::array<float, 3> lo{0, 0, 0}, hi{0, 0, 0};
  for (size_t v = 0; v < vertex_count; ++v) {
    for (size_t a = 0; a < 3; ++a) {
      const float p = vertices[3 * v + a];
      if (!std::isfinite(p)) throw invalid_argument("compact mesh: a position is not finite");
      lo[a] = v == 0 ? p : std::min(lo[a], p);
      hi[a] = v == 0 ? p : std::max(hi[a], p);
    }
  }
  for (const float n : normals) {
    if (!std::isfinite(n)) throw invalid_argument("compact mesh: a normal is not finite");
  }

  uint8_t flags = 0;
  if (positions == CompactPositions::kQuantized16) flags |= kCompactFlagQuantized;
  if (vertex_count > kCompactMaxU16Vertices) flags |= kCompactFlagIndices32;
  if (!normals.empty()) flags |= kCompactFlagNormals;
  const Layout layout = layout_of(vertex_count, triangle_count, flags);

  std::string out(layout.end, '\0');  // the padding stays zero
  std::memcpy(out.data(), kCompactMeshMagic.data(), kCompactMeshMagic.size());
  out[kCompactOffsetVersion] = static_cast<char>(kCompactMeshVersion);
  out[kCompactOffsetFlags] = static_cast<char>(flags);
  put_u16(out, kCompactOffsetHeaderBytes, static_cast<uint16_t>(kCompactMeshHeaderBytes));
  put_u32(out, kCompactOffsetVertexCount, static_cast<uint32_t>(vertex_count));
  put_u32(out, kCompactOffsetTriangleCount, static_cast<uint32_t>(triangle_count));
  for (size_t a = 0; a < 3; ++a) {
    put_f32(out, kCompactOffsetBoundsMin + 4 * a, lo[a]);
    put_f32(out, kCompactOffsetBoundsMax + 4 * a, hi[a]);
  }
  size_t at = layout.positions;
  for (size_t i = 0; i < vertices.size(); ++i) {
    if (flags & kCompactFlagQuantized) {
      put_u16(out, at, quantize(vertices[i], lo[i % 3], hi[i % 3]));
      at += 2;
    } else {
      put_f32(out, at, vertices[i]);
      at += 4;
    }
  }
  at = layout.normals;
  for (const float n : normals) out[at++] = static_cast<char>(snorm8(n));
  at = layout.indices;
  for (const uint32_t i : indices) {
    if (flags & kCompactFlagIndices32) {
      put_u32(out, at, i);
      at += 4;
    } else {
      put_u16(out, at, static_cast<uint16_t>(i));
      at += 2;
    }
  }
  return out;
}

CompactMesh decode_compact_mesh(std::string_view in) {
  if (in.size() < kCompactMeshHeaderBytes) {
    throw compact_error("a header is " + std::to_string(kCompactMeshHeaderBytes) +
                            " bytes, the payload " + std::to_string(in.size()),
                        0);
  }
  if (in.substr(0, kCompactMeshMagic.size()) != kCompactMeshMagic) {
    throw compact_error("magic is not \"C3DM\"", 0);
  }
  const uint8_t version = byte_at(in, kCompactOffsetVersion);
  if (version != kCompactMeshVersion) {
    throw compact_error("version " + std::to_string(version) + ", this reader knows version " +
                            std::to_string(kCompactMeshVersion),
                        kCompactOffsetVersion);
  }
  CompactMesh mesh;
  mesh.flags = byte_at(in, kCompactOffsetFlags);
  if (mesh.flags & ~kCompactKnownFlags) {
    throw compact_error(
        "flags " + std::to_string(mesh.flags) + " set a bit this version does not define",
        kCompactOffsetFlags);
  }
  const uint16_t header_bytes = get_u16(in, kCompactOffsetHeaderBytes);
  if (header_bytes != kCompactMeshHeaderBytes) {
    throw compact_error("header size " + std::to_string(header_bytes) + ", version 1's is " +
                            std::to_string(kCompactMeshHeaderBytes),
                        kCompactOffsetHeaderBytes);
  }
  const uint64_t vertex_count = get_u32(in, kCompactOffsetVertexCount);
  const uint64_t triangle_count = get_u32(in, kCompactOffsetTriangleCount);
  const Layout layout = layout_of(vertex_count, triangle_count, mesh.flags);
  if (layout.end != in.size()) {
    throw compact_error(std::to_string(vertex_count) + " vertices and " +
                            std::to_string(triangle_count) + " triangles with flags " +
                            std::to_string(mesh.flags) + " take " + std::to_string(layout.end) +
                            " bytes, the payload has " + std::to_string(in.size()),
                        kCompactOffsetVertexCount);
  }
  for (size_t a = 0; a < 3; ++a) {
    mesh.bounds_min[a] = get_f32(in, kCompactOffsetBoundsMin + 4 * a);
    mesh.bounds_max[a] = get_f32(in, kCompactOffsetBoundsMax + 4 * a);
    if (!std::isfinite(mesh.bounds_min[a]) || !std::isfinite(mesh.bounds_max[a]) ||
        mesh.bounds_min[a] > mesh.bounds_max[a]) {
      throw compact_error("bounds are not finite with min <= max on axis " + std::to_string(a),
                          kCompactOffsetBoundsMin + 4 * a);
    }
  }
  // Padding: every byte between a section's end and the next section (or the payload's end).
  const auto check_zero = [&](uint64_t from, uint64_t to) {
    for (uint64_t at = from; at < to; ++at) {
      if (byte_at(in, at) != 0) throw compact_error("padding is not zero", at);
    }
  };

  const bool quantized = mesh.quantized();
  mesh.vertices.resize(vertex_count * 3);
  uint64_t at = layout.positions;
  for (size_t i = 0; i < mesh.vertices.size(); ++i) {
    const size_t axis = i % 3;
    if (quantized) {
      mesh.vertices[i] = dequantize(get_u16(in, at), mesh.bounds_min[axis], mesh.bounds_max[axis]);
      at += 2;
    } else {
      const float p = get_f32(in, at);
      // Also refuses NaN, which no comparison would.
      if (!(p >= mesh.bounds_min[axis] && p <= mesh.bounds_max[axis])) {
        throw compact_error("position outside the header's bounds", at);
      }
      mesh.vertices[i] = p;
      at += 4;
    }
  }
  uint64_t section_end = at;
  if (mesh.flags & kCompactFlagNormals) {
    check_zero(section_end, layout.normals);
    mesh.normals.resize(vertex_count * 3);
    at = layout.normals;
    for (float& n : mesh.normals) {
      const auto q = static_cast<int8_t>(byte_at(in, at++));
      n = std::max(static_cast<float>(q) / kCompactNormalScale, -1.0f);
    }
    section_end = at;
  }
  check_zero(section_end, layout.indices);
  mesh.indices.resize(triangle_count * 3);
  at = layout.indices;
  const bool wide = (mesh.flags & kCompactFlagIndices32) != 0;
  for (uint32_t& index : mesh.indices) {
    index = wide ? get_u32(in, at) : get_u16(in, at);
    if (index >= vertex_count) {
      throw compact_error(
          "index " + std::to_string(index) + " of " + std::to_string(vertex_count) + " vertices",
          at);
    }
    at += wide ? 4 : 2;
  }
  check_zero(at, layout.end);
  return mesh;
}

}  // namespace cube3d
