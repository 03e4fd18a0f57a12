#include <gtest/gtest.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cube3d/core/error.h"
#include "cube3d/mesh/marching_cubes.h"
#include "cube3d/mesh/mesh_io.h"
#include "cube3d/mesh/mesh_stats.h"
#include "mesh_test_util.h"

namespace cube3d {
namespace {

Mesh sample_mesh() {
  const auto grid = test::sample_resolution(
      4, [](double x, double y, double z) { return test::sphere(x, y, z, 0.1, 0.6); });
  Mesh mesh = marching_cubes(grid.view());
  index_to_world(mesh, grid.dims);
  return mesh;
}

template <typename T>
T read_at(const std::string& bytes, std::size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

TEST(MeshIo, ObjRoundTrip) {
  const Mesh mesh = sample_mesh();
  for (const bool with_normals : {false, true}) {
    std::istringstream in(encode_obj(mesh, with_normals));
    Mesh back;
    std::size_t normals = 0;
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string tag;
      fields >> tag;
      if (tag == "v") {
        for (int axis = 0; axis < 3; ++axis) {
          std::string number;
          fields >> number;
          float value = 0;
          std::from_chars(number.data(), number.data() + number.size(), value);
          back.vertices.push_back(value);
        }
      } else if (tag == "vn") {
        ++normals;
      } else if (tag == "f") {
        for (int corner = 0; corner < 3; ++corner) {
          std::string ref;
          fields >> ref;
          back.indices.push_back(static_cast<uint32_t>(std::stoul(ref)) - 1);
          if (with_normals) {
            EXPECT_NE(ref.find("//"), std::string::npos);
          }
        }
      }
    }
    EXPECT_EQ(back.vertices, mesh.vertices);  // shortest round-trip decimals: exact
    EXPECT_EQ(back.indices, mesh.indices);
    EXPECT_EQ(normals, with_normals ? mesh.vertex_count() : 0u);
  }
}

TEST(MeshIo, PlyRoundTrip) {
  const Mesh mesh = sample_mesh();
  const std::string bytes = encode_ply(mesh);
  const std::string end = "end_header\n";
  const std::size_t body = bytes.find(end) + end.size();
  const std::string header = bytes.substr(0, body);
  EXPECT_EQ(header.rfind("ply\nformat binary_little_endian 1.0\n", 0), 0u);
  EXPECT_NE(header.find("element vertex " + std::to_string(mesh.vertex_count()) + "\n"),
            std::string::npos);
  EXPECT_NE(header.find("element face " + std::to_string(mesh.face_count()) + "\n"),
            std::string::npos);
  EXPECT_NE(header.find("property list uchar uint vertex_indices\n"), std::string::npos);
  ASSERT_EQ(bytes.size(), body + mesh.vertices.size() * 4 + mesh.face_count() * 13);
  std::vector<float> vertices(mesh.vertices.size());
  std::memcpy(vertices.data(), bytes.data() + body, vertices.size() * 4);
  EXPECT_EQ(vertices, mesh.vertices);
  std::size_t at = body + vertices.size() * 4;
  for (std::size_t f = 0; f < mesh.face_count(); ++f) {
    ASSERT_EQ(static_cast<uint8_t>(bytes[at]), 3);
    for (int corner = 0; corner < 3; ++corner) {
      ASSERT_EQ(read_at<uint32_t>(bytes, at + 1 + corner * 4), mesh.indices[f * 3 + corner]);
    }
    at += 13;
  }
}

struct Glb {
  nlohmann::json json;
  std::string bin;
};

Glb parse_glb(const std::string& bytes) {
  Glb glb;
  EXPECT_EQ(read_at<uint32_t>(bytes, 0), 0x46546C67u);  // "glTF"
  EXPECT_EQ(read_at<uint32_t>(bytes, 4), 2u);
  EXPECT_EQ(read_at<uint32_t>(bytes, 8), bytes.size());
  EXPECT_EQ(bytes.size() % 4, 0u);
  const uint32_t json_length = read_at<uint32_t>(bytes, 12);
  EXPECT_EQ(read_at<uint32_t>(bytes, 16), 0x4E4F534Au);  // "JSON"
  EXPECT_EQ(json_length % 4, 0u);
  const std::string json = bytes.substr(20, json_length);
  EXPECT_TRUE(json.find_last_not_of(' ') + 1 >= json.size() - 3);  // padded with spaces
  glb.json = nlohmann::json::parse(json);
  const std::size_t bin_at = 20 + json_length;
  if (bin_at < bytes.size()) {
    const uint32_t bin_length = read_at<uint32_t>(bytes, bin_at);
    EXPECT_EQ(read_at<uint32_t>(bytes, bin_at + 4), 0x004E4942u);  // "BIN\0"
    EXPECT_EQ(bin_length % 4, 0u);
    EXPECT_EQ(bin_at + 8 + bin_length, bytes.size());
    glb.bin = bytes.substr(bin_at + 8, bin_length);
  }
  return glb;
}

TEST(MeshIo, GlbStructure) {
  const Mesh mesh = sample_mesh();
  const Glb glb = parse_glb(encode_glb(mesh));
  const auto& j = glb.json;
  EXPECT_EQ(j["asset"]["version"], "2.0");
  ASSERT_EQ(j["meshes"].size(), 1u);
  const auto& primitive = j["meshes"][0]["primitives"][0];
  const auto& position = j["accessors"][primitive["attributes"]["POSITION"].get<int>()];
  const auto& normal = j["accessors"][primitive["attributes"]["NORMAL"].get<int>()];
  const auto& indices = j["accessors"][primitive["indices"].get<int>()];
  EXPECT_EQ(position["count"], mesh.vertex_count());
  EXPECT_EQ(normal["count"], mesh.vertex_count());
  EXPECT_EQ(indices["count"], mesh.indices.size());
  EXPECT_EQ(indices["componentType"], 5125);
  EXPECT_EQ(position["type"], "VEC3");
  EXPECT_GE(j["buffers"][0]["byteLength"].get<std::size_t>() + 3, glb.bin.size());

  auto view_bytes = [&](const nlohmann::json& accessor) {
    const auto& view = j["bufferViews"][accessor["bufferView"].get<int>()];
    return glb.bin.substr(view.value("byteOffset", std::size_t{0}),
                          view["byteLength"].get<std::size_t>());
  };
  std::vector<float> positions(mesh.vertices.size());
  std::memcpy(positions.data(), view_bytes(position).data(), positions.size() * 4);
  EXPECT_EQ(positions, mesh.vertices);
  std::vector<uint32_t> index_data(mesh.indices.size());
  std::memcpy(index_data.data(), view_bytes(indices).data(), index_data.size() * 4);
  EXPECT_EQ(index_data, mesh.indices);
  std::vector<float> normals(mesh.vertices.size());
  std::memcpy(normals.data(), view_bytes(normal).data(), normals.size() * 4);
  for (std::size_t n = 0; n < normals.size(); n += 3) {
    const float length = std::sqrt(normals[n] * normals[n] + normals[n + 1] * normals[n + 1] +
                                   normals[n + 2] * normals[n + 2]);
    EXPECT_NEAR(length, 1.0f, 1e-5f);
    // Sphere centred at x = 0.1: normals point away from the centre.
    EXPECT_GT(normals[n] * (positions[n] - 0.1f) + normals[n + 1] * positions[n + 1] +
                  normals[n + 2] * positions[n + 2],
              0.0f);
  }
  // min / max: exactly the bounding box of the positions.
  for (int axis = 0; axis < 3; ++axis) {
    float lo = positions[axis], hi = positions[axis];
    for (std::size_t n = axis; n < positions.size(); n += 3) {
      lo = std::min(lo, positions[n]);
      hi = std::max(hi, positions[n]);
    }
    EXPECT_EQ(position["min"][axis].get<double>(), double{lo});
    EXPECT_EQ(position["max"][axis].get<double>(), double{hi});
  }
}

TEST(MeshIo, EmptyMeshEncodes) {
  const Mesh empty;
  const Glb glb = parse_glb(encode_glb(empty));
  EXPECT_EQ(glb.json["asset"]["version"], "2.0");
  EXPECT_TRUE(glb.bin.empty());
  EXPECT_FALSE(glb.json.contains("meshes"));
  EXPECT_EQ(encode_obj(empty), "# cube3d-server\n");
  EXPECT_NE(encode_ply(empty).find("element face 0"), std::string::npos);
}

TEST(MeshIo, RejectsOutOfRangeIndices) {
  Mesh mesh;
  mesh.vertices = {0, 0, 0, 1, 0, 0, 0, 1, 0};
  mesh.indices = {0, 1, 3};
  EXPECT_THROW(encode_glb(mesh), Error);
  EXPECT_THROW(encode_ply(mesh), Error);
  EXPECT_THROW(encode_obj(mesh), Error);
}

TEST(MeshIo, FormatFromPath) {
  EXPECT_EQ(mesh_format_from_path("a/b.obj"), MeshFormat::kObj);
  EXPECT_EQ(mesh_format_from_path("B.PLY"), MeshFormat::kPly);
  EXPECT_EQ(mesh_format_from_path("/tmp/x.y/mesh.Glb"), MeshFormat::kGlb);
  for (const char* bad : {"mesh.stl", "mesh", "dir.obj/mesh", "mesh.obj.gz"}) {
    try {
      mesh_format_from_path(bad);
      FAIL() << bad << " accepted";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
      const std::string message = error.what();
      EXPECT_NE(message.find(bad), std::string::npos) << message;
      EXPECT_NE(message.find(".obj, .ply or .glb"), std::string::npos) << message;
    }
  }
}

TEST(MeshIo, WriteMeshPicksFormatByExtension) {
  const Mesh mesh = sample_mesh();
  const std::string dir = ::testing::TempDir();
  for (const auto& [name, format] : {std::pair{"cube3d_mesh_io.obj", MeshFormat::kObj},
                                     std::pair{"cube3d_mesh_io.ply", MeshFormat::kPly},
                                     std::pair{"cube3d_mesh_io.glb", MeshFormat::kGlb}}) {
    const std::string path = dir + "/" + name;
    write_mesh(path, mesh);
    std::ifstream file(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(file)),
                            std::istreambuf_iterator<char>());
    EXPECT_EQ(bytes, encode_mesh(mesh, format)) << name;
    std::remove(path.c_str());
  }
  EXPECT_THROW(write_mesh(dir + "/cube3d_mesh_io.stl", mesh), Error);
  EXPECT_THROW(write_mesh("/nonexistent-dir-cube3d/mesh.obj", mesh), Error);
}

}  // namespace
}  // namespace cube3d
