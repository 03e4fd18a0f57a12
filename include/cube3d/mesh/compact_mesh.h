// The compact mesh encoding (MESH_FORMAT_COMPACT): a triangle mesh as one small binary payload that
// a script can read with fixed-offset little-endian loads (Luau's buffer.readf32 / readu16 after
// EncodingService:Base64Decode; numpy.frombuffer; a DataView), instead of a JSON array of
// numbers. docs/mesh-encoding.md is its specification, byte for byte; this file is the
// reference encoder and decoder, and the constants below are the ones the spec, the Python
// reference (clients/python/cube3d_compact.py) and the Roblox kit (clients/roblox/) are tested
// against.
//
//   header (40 bytes): magic "C3DM", version, flags, header size, vertex count, triangle
//                      count, bounds min xyz, bounds max xyz (float32)
//   positions:         float32 xyz per vertex, or uint16 xyz quantised within the bounds
//   normals:           int8 xyz per vertex (snorm8), when the flags say so
//   indices:           uint16 per corner when there are at most 65,536 vertices, else uint32
// Every section starts at a multiple of 4 bytes (zero padding), and the payload ends padded to
// one. All numbers little-endian.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cube3d {

inline constexpr std::string_view kCompactMeshMagic = "C3DM";
inline constexpr uint8_t kCompactMeshVersion = 1;
inline constexpr size_t kCompactMeshHeaderBytes = 40;
// Byte offsets of the header's fields.
inline constexpr size_t kCompactOffsetVersion = 4;
inline constexpr size_t kCompactOffsetFlags = 5;
inline constexpr size_t kCompactOffsetHeaderBytes = 6;
inline constexpr size_t kCompactOffsetVertexCount = 8;
inline constexpr size_t kCompactOffsetTriangleCount = 12;
inline constexpr size_t kCompactOffsetBoundsMin = 16;
inline constexpr size_t kCompactOffsetBoundsMax = 28;
// The flags byte.
inline constexpr uint8_t kCompactFlagQuantized = 1;  // positions uint16, else float32
inline constexpr uint8_t kCompactFlagIndices32 = 2;  // indices uint32, else uint16
inline constexpr uint8_t kCompactFlagNormals = 4;    // a normals section follows the positions
inline constexpr uint8_t kCompactKnownFlags = 7;
// Indices fit in uint16 up to this many vertices.
inline constexpr uint64_t kCompactMaxU16Vertices = 65'536;
// A quantised coordinate q stands for min + q * (max - min) / kCompactQuantSteps.
inline constexpr uint32_t kCompactQuantSteps = 65'535;
// An int8 normal component q stands for max(q / kCompactNormalScale, -1).
inline constexpr int kCompactNormalScale = 127;

enum class CompactPositions {
  kFloat32,      // exact: the mesh's own floats
  kQuantized16,  // within (max - min) / 131070 of each coordinate, half the bytes
};

// What a request asks of the encoding.
struct CompactMeshOptions {
  CompactPositions positions = CompactPositions::kFloat32;
  bool normals = false;  // per-vertex normals (mesh.h vertex_normals), snorm8
  bool operator==(const CompactMeshOptions&) const = default;
};

// "float32", "quantized16".
std::string_view to_string(CompactPositions positions);

// `vertices` xyz per vertex, `indices` three per triangle (each < vertex count), `normals` xyz
// per vertex or empty for none. Throws invalid_argument for arrays of the wrong length, an
// index out of range, or a position or normal that is not finite.
std::string encode_compact_mesh(std::span<const float> vertices, std::span<const uint32_t> indices,
                                std::span<const float> normals, CompactPositions positions);

// A payload read back: the arrays as the encoder took them (quantised positions dequantised,
// normals as their snorm8 values read back), and the header's fields.
struct CompactMesh {
  uint8_t flags = 0;
  std::array<float, 3> bounds_min{0, 0, 0};
  std::array<float, 3> bounds_max{0, 0, 0};
  std::vector<float> vertices;    // xyz per vertex
  std::vector<uint32_t> indices;  // three per triangle
  std::vector<float> normals;     // xyz per vertex; empty without the normals flag
  bool quantized() const { return (flags & kCompactFlagQuantized) != 0; }
};

// The total length of a payload with these counts and flags (header, sections and padding).
uint64_t compact_mesh_bytes(uint64_t vertex_count, uint64_t triangle_count, uint8_t flags);

// Checks everything the spec requires (magic, version, known flags, header size, the exact
// length, zero padding, finite bounds with min <= max, float32 positions within the bounds,
// every index below the vertex count) and throws invalid_argument naming the field and its byte
// offset otherwise. Never reads past `bytes`.
CompactMesh decode_compact_mesh(std::string_view bytes);

}  // namespace cube3d
