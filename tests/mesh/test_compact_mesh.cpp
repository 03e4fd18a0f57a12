#include "cube3d/mesh/compact_mesh.h"

#include <gtest/gtest.h>

#include <cstring>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "expect_error.h"

namespace cube3d {
namespace test_compact_mesh {

using testing::expect_error;

std::string hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

// docs/mesh-encoding.md's worked example, byte for byte: one triangle, float32 positions, uint16
// indices, no normals.
TEST(CompactMesh, TheSpecExampleByteForByte) {
  const std::vector<float> vertices = {0, 0, 0, 1, 0, 0, 0, 2, 0};
  const std::vector<uint32_t> indices = {0, 1, 2};
  const std::string bytes = encode_compact_mesh(vertices, indices, {}, CompactPositions::kFloat32);
  EXPECT_EQ(hex(bytes),
            "4333444d"                  // "C3DM"
            "01"                        // version 1
            "00"                        // flags: float32, uint16, no normals
            "2800"                      // header size 40
            "03000000"                  // 3 vertices
            "01000000"                  // 1 triangle
            "000000000000000000000000"  // bounds min 0, 0, 0
            "0000803f0000004000000000"  // bounds max 1, 2, 0
            "000000000000000000000000"  // (0, 0, 0)
            "0000803f0000000000000000"  // (1, 0, 0)
            "000000000000004000000000"  // (0, 2, 0)
            "000001000200"              // 0 1 2
            "0000");                    // padding to 84
  EXPECT_EQ(bytes.size(), 84u);
  EXPECT_EQ(compact_mesh_bytes(3, 1, 0), 84u);
}

struct RandomMesh {
  std::vector<float> vertices;
  std::vector<uint32_t> indices;
  std::vector<float> normals;
};

RandomMesh random_mesh(size_t vertex_count, size_t triangle_count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> coordinate(-1.05f, 1.05f);
  std::uniform_real_distribution<float> component(-1.0f, 1.0f);
  std::uniform_int_distribution<uint32_t> index(0, static_cast<uint32_t>(vertex_count - 1));
  RandomMesh m;
  for (size_t i = 0; i < vertex_count * 3; ++i) m.vertices.push_back(coordinate(rng));
  for (size_t i = 0; i < triangle_count * 3; ++i) m.indices.push_back(index(rng));
  for (size_t v = 0; v < vertex_count; ++v) {
    const float x = component(rng), y = component(rng), z = component(rng);
    const float length = std::sqrt(x * x + y * y + z * z) + 1e-6f;
    m.normals.insert(m.normals.end(), {x / length, y / length, z / length});
  }
  return m;
}

TEST(CompactMesh, Float32RoundTripsExactly) {
  const RandomMesh m = random_mesh(1000, 1500, 1);
  const std::string bytes =
      encode_compact_mesh(m.vertices, m.indices, {}, CompactPositions::kFloat32);
  EXPECT_EQ(bytes.size(), compact_mesh_bytes(1000, 1500, 0));
  const CompactMesh back = decode_compact_mesh(bytes);
  EXPECT_EQ(back.flags, 0);
  EXPECT_EQ(back.vertices, m.vertices);
  EXPECT_EQ(back.indices, m.indices);
  EXPECT_TRUE(back.normals.empty());
}

TEST(CompactMesh, QuantizedIsWithinHalfAStepOfTheBounds) {
  const RandomMesh m = random_mesh(2000, 3000, 2);
  const std::string bytes =
      encode_compact_mesh(m.vertices, m.indices, m.normals, CompactPositions::kQuantized16);
  const CompactMesh back = decode_compact_mesh(bytes);
  EXPECT_EQ(back.flags, kCompactFlagQuantized | kCompactFlagNormals);
  EXPECT_EQ(back.indices, m.indices);
  ASSERT_EQ(back.vertices.size(), m.vertices.size());
  for (size_t i = 0; i < m.vertices.size(); ++i) {
    const size_t a = i % 3;
    const double step = (double{back.bounds_max[a]} - back.bounds_min[a]) / kCompactQuantSteps;
    EXPECT_LE(std::abs(double{back.vertices[i]} - m.vertices[i]), step / 2 + 1e-6) << i;
    EXPECT_GE(back.vertices[i], back.bounds_min[a]);
    EXPECT_LE(back.vertices[i], back.bounds_max[a]);
  }
  // The bounds are the mesh's own: the extremes come back exactly.
  for (size_t a = 0; a < 3; ++a) {
    float lo = m.vertices[a], hi = m.vertices[a];
    for (size_t i = a; i < m.vertices.size(); i += 3) {
      lo = std::min(lo, m.vertices[i]);
      hi = std::max(hi, m.vertices[i]);
    }
    EXPECT_EQ(back.bounds_min[a], lo);
    EXPECT_EQ(back.bounds_max[a], hi);
  }
  ASSERT_EQ(back.normals.size(), m.normals.size());
  for (size_t i = 0; i < m.normals.size(); ++i) {
    EXPECT_LE(std::abs(back.normals[i] - m.normals[i]), 0.5f / kCompactNormalScale + 1e-6f);
  }
  // Half the bytes of float32 positions, a quarter for the normals.
  EXPECT_EQ(bytes.size(), kCompactMeshHeaderBytes + 2000 * 6 + 2000 * 3 + 3000 * 6);
}

TEST(CompactMesh, QuantizedPositionsStayWithinHugeBounds) {
  // fuzz_compact_mesh's finding (fuzz/corpus/compact_mesh/regression_quantized_huge_extent):
  // y from -3e16 to -1e-41, where min + 65535 * (extent / 65535) in double lands a few units
  // past the upper bound.
  std::string bytes(40, '\0');
  bytes.replace(0, 4, "C3DM");
  bytes[4] = 1;  // version
  bytes[5] = 1;  // quantised, uint16 indices, no normals
  bytes[6] = 40;
  bytes[8] = 2;   // two vertices
  bytes[12] = 1;  // one triangle
  const auto put_f32 = [&bytes](size_t at, float value) {
    std::memcpy(bytes.data() + at, &value, sizeof value);
  };
  const float lo[3] = {0.0f, -3.041971790675968e16f, 0.0f};
  const float hi[3] = {1.0f, -1.3324947097264686e-41f, 1.0f};
  for (int a = 0; a < 3; ++a) {
    put_f32(16 + 4 * a, lo[a]);
    put_f32(28 + 4 * a, hi[a]);
  }
  for (const uint16_t q :
       {uint16_t{0}, uint16_t{0}, uint16_t{0}, uint16_t{65535}, uint16_t{65535}, uint16_t{65535}}) {
    bytes.append(reinterpret_cast<const char*>(&q), 2);
  }
  for (const uint16_t i : {uint16_t{0}, uint16_t{1}, uint16_t{0}}) {
    bytes.append(reinterpret_cast<const char*>(&i), 2);
  }
  bytes.resize((bytes.size() + 3) & ~size_t{3}, '\0');
  const CompactMesh mesh = decode_compact_mesh(bytes);
  ASSERT_EQ(mesh.vertices.size(), 6u);
  for (size_t i = 0; i < mesh.vertices.size(); ++i) {
    EXPECT_GE(mesh.vertices[i], lo[i % 3]) << i;
    EXPECT_LE(mesh.vertices[i], hi[i % 3]) << i;
  }
  EXPECT_EQ(mesh.vertices[4], hi[1]);  // the largest comes back exactly
}

TEST(CompactMesh, ManyVerticesTakeUint32Indices) {
  const size_t n = kCompactMaxU16Vertices + 1;
  const RandomMesh m = random_mesh(n, 10, 3);
  std::vector<uint32_t> indices = m.indices;
  indices.push_back(static_cast<uint32_t>(n - 1));
  indices.push_back(0);
  indices.push_back(1);
  const std::string bytes =
      encode_compact_mesh(m.vertices, indices, {}, CompactPositions::kFloat32);
  const CompactMesh back = decode_compact_mesh(bytes);
  EXPECT_EQ(back.flags, kCompactFlagIndices32);
  EXPECT_EQ(back.indices, indices);
  // At exactly 65,536 vertices uint16 still holds every index.
  const RandomMesh edge = random_mesh(kCompactMaxU16Vertices, 4, 4);
  EXPECT_EQ(decode_compact_mesh(encode_compact_mesh(edge.vertices, edge.indices, {},
                                                    CompactPositions::kQuantized16))
                .flags,
            kCompactFlagQuantized);
}

TEST(CompactMesh, EmptyAndFlatMeshes) {
  const CompactMesh empty =
      decode_compact_mesh(encode_compact_mesh({}, {}, {}, CompactPositions::kQuantized16));
  EXPECT_TRUE(empty.vertices.empty());
  EXPECT_TRUE(empty.indices.empty());
  EXPECT_EQ(empty.bounds_max, (std::array<float, 3>{0, 0, 0}));
  // A flat mesh (one axis of zero extent) quantises that axis to its one value.
  const std::vector<float> flat = {0, 0.5f, 1, 1, 0.5f, 1, 0, 0.5f, 2};
  const CompactMesh back = decode_compact_mesh(encode_compact_mesh(
      flat, std::vector<uint32_t>{0, 1, 2}, {}, CompactPositions::kQuantized16));
  EXPECT_EQ(back.vertices, flat);
}

TEST(CompactMesh, EncoderRefusesBadArrays) {
  const std::vector<float> v = {0, 0, 0, 1, 0, 0, 0, 1, 0};
  expect_error(
      [&] {
        encode_compact_mesh({v.data(), 8}, {}, {}, CompactPositions::kFloat32);
      },
      ErrorCode::kInvalidArgument, "three per vertex");
  const std::vector<uint32_t> two = {0, 1};
  expect_error([&] { encode_compact_mesh(v, two, {}, CompactPositions::kFloat32); },
               ErrorCode::kInvalidArgument, "three per triangle");
  const std::vector<uint32_t> out_of_range = {0, 1, 3};
  expect_error([&] { encode_compact_mesh(v, out_of_range, {}, CompactPositions::kFloat32); },
               ErrorCode::kInvalidArgument, "index 3 of 3 vertices");
  const std::vector<float> normals = {0, 0, 1};
  expect_error([&] { encode_compact_mesh(v, {}, normals, CompactPositions::kFloat32); },
               ErrorCode::kInvalidArgument, "1 normals for 3 vertices");
  std::vector<float> nan = v;
  nan[4] = std::nanf("");
  expect_error([&] { encode_compact_mesh(nan, {}, {}, CompactPositions::kFloat32); },
               ErrorCode::kInvalidArgument, "not finite");
}

std::string example() {
  const std::vector<float> vertices = {0, 0, 0, 1, 0, 0, 0, 2, 0};
  return encode_compact_mesh(vertices, std::vector<uint32_t>{0, 1, 2}, {},
                             CompactPositions::kFloat32);
}

TEST(CompactMesh, DecoderRefusesWhatTheSpecForbids) {
  const auto refused = [](std::string bytes, const std::string& needle) {
    expect_error([&] { decode_compact_mesh(bytes); }, ErrorCode::kInvalidArgument, needle);
  };
  std::string b = example();
  refused(b.substr(0, 39), "a header is 40 bytes");
  b[0] = 'X';
  refused(b, "magic");
  b = example();
  b[kCompactOffsetVersion] = 2;
  refused(b, "version 2");
  b = example();
  b[kCompactOffsetFlags] = 8;
  refused(b, "flags 8");
  b = example();
  b[kCompactOffsetHeaderBytes] = 44;
  refused(b, "header size 44");
  b = example();
  refused(b + std::string(4, '\0'), "take 84 bytes, the payload has 88");
  refused(b.substr(0, 80), "the payload has 80");
  b[kCompactOffsetFlags] = kCompactFlagIndices32;  // then the layout is longer
  refused(b, "take 88 bytes");
  b = example();
  b[82] = 1;  // the padding after the indices
  refused(b, "padding is not zero (byte offset 82)");
  b = example();
  b[80] = 3;  // the third index
  refused(b, "index 3 of 3 vertices (byte offset 80)");
  b = example();
  b[kCompactOffsetBoundsMax + 4 + 3] = 0x3f;  // max y from 2 to 0.5: (0, 2, 0) lies outside
  refused(b, "outside the header's bounds");
  b = example();
  b[kCompactOffsetBoundsMin + 3] = 0x7f;  // min x 0 -> a huge number above max x
  refused(b, "min <= max on axis 0");
  b = example();
  for (int i = 0; i < 4; ++i) b[kCompactOffsetBoundsMax + i] = static_cast<char>(0xff);  // NaN
  refused(b, "not finite");
}

TEST(CompactMesh, EveryTruncationIsRefused) {
  const RandomMesh m = random_mesh(50, 60, 5);
  const std::string bytes =
      encode_compact_mesh(m.vertices, m.indices, m.normals, CompactPositions::kQuantized16);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_THROW(decode_compact_mesh(std::string_view(bytes).substr(0, n)), Error) << n;
  }
  EXPECT_NO_THROW(decode_compact_mesh(bytes));
}

TEST(CompactMesh, PositionsNames) {
  EXPECT_EQ(to_string(CompactPositions::kFloat32), "float32");
  EXPECT_EQ(to_string(CompactPositions::kQuantized16), "quantized16");
}

}  // namespace test_compact_mesh
}  // namespace cube3d
