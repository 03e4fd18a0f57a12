#include <gtest/gtest.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/mesh/marching_cubes.h"
#include "cube3d/mesh/mesh_io.h"
#include "cube3d/mesh/mesh_stats.h"
#include "mesh_test_util.h"

namespace cube3d {
namespace test_mesh_io {

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
  EXPECT_EQ(mesh_format_from_path("mesh.c3dm"), MeshFormat::kCompact);
  for (const char* bad : {"mesh.stl", "mesh", "dir.obj/mesh", "mesh.obj.gz"}) {
    try {
      mesh_format_from_path(bad);
      FAIL() << bad << " accepted";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
      const std::string message = error.what();
      EXPECT_NE(message.find(bad), std::string::npos) << message;
      EXPECT_NE(message.find(".obj, .ply, .glb or .c3dm"), std::string::npos) << message;
    }
  }
}

TEST(MeshIo, WriteMeshPicksFormatByExtension) {
  const Mesh mesh = sample_mesh();
  const std::string dir = ::testing::TempDir();
  for (const auto& [name, format] : {std::pair{"cube3d_mesh_io.obj", MeshFormat::kObj},
                                     std::pair{"cube3d_mesh_io.ply", MeshFormat::kPly},
                                     std::pair{"cube3d_mesh_io.glb", MeshFormat::kGlb},
                                     std::pair{"cube3d_mesh_io.c3dm", MeshFormat::kCompact}}) {
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

// --- metadata ---------------------------------------------------------------------------------

Mesh one_triangle() {
  Mesh mesh;
  mesh.vertices = {0, 0, 0, 1, 0, 0, 0, 1, 0};
  mesh.indices = {0, 1, 2};
  return mesh;
}

// A prompt that tries every way out of a header line: newlines, a PLY end_header and OBJ data of
// its own, NUL, quotes and a backslash, DEL, non-ASCII (an emoji above the BMP, an accent, U+2028),
// and the words trimesh looks for anywhere in a header (an end_header token, TextureFile, mtllib;
// "\xC3\xBEnd_header" escapes to ...00fend_header, a keyword that starts inside an escape).
std::string hostile_prompt() {
  static constexpr char kText[] =
      "a chair\n# evil\r\nend_header\nv 1 2 3\nf 1 1 1\n\0 \"quoted\" \\ \x7f "
      "\xF0\x9F\x98\x80 caf\xC3\xA9 \xE2\x80\xA8 end end_header TextureFile x.png mtllib "
      "../evil.mtl MTLLIB usemtl \xC3\xBEnd_header\\";
  return std::string(kText, sizeof(kText) - 1);  // the NUL inside too
}

MeshMetadata sample_metadata() {
  MeshMetadata metadata;
  metadata.add("prompt", hostile_prompt())
      .add("seed", std::numeric_limits<uint64_t>::max())
      .add("top_p", double{0.9f})
      .add("offset", int64_t{-5})
      .add("guidance_scale", 3.0)
      .add("greedy", false)
      .add("bounding_box", std::vector<double>{1.0, 0.5, double{1.925f}})
      .add("server_version", "1.2.3 (abc)");
  return metadata;
}

// The lines of `text` up to and including the first one equal to `end` (all when none is).
std::vector<std::string> header_lines(const std::string& text, const std::string& end) {
  std::vector<std::string> lines;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t eol = text.find('\n', at);
    lines.push_back(text.substr(at, eol - at));
    at = eol == std::string::npos ? text.size() : eol + 1;
    if (lines.back() == end) break;
  }
  return lines;
}

TEST(MeshMetadata, KeysAreIdentifiersAndValuesAreJson) {
  MeshMetadata metadata;
  EXPECT_TRUE(metadata.empty());
  metadata.add("a_1", "text");
  EXPECT_FALSE(metadata.empty());
  EXPECT_EQ(metadata.size(), 1u);
  // A string literal is a string, not a bool.
  ASSERT_NE(metadata.find("a_1"), nullptr);
  EXPECT_EQ(std::get<std::string>(*metadata.find("a_1")), "text");
  EXPECT_EQ(metadata.find("b"), nullptr);
  for (const char* bad : {"", "Prompt", "1st", "a-b", "a b", "a:b", "\xC3\xA9", "a\n"}) {
    try {
      metadata.add(bad, int64_t{1});
      FAIL() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("'" + std::string(bad) + "'"), std::string::npos)
          << e.what();
    }
  }
  const auto expect_refused = [&](const std::string& key, MeshMetadataValue value,
                                  const std::string& needle) {
    try {
      metadata.add(key, std::move(value));
      FAIL() << key;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  expect_refused("a_1", int64_t{2}, "already set");
  expect_refused("nan", std::numeric_limits<double>::quiet_NaN(), "finite");
  expect_refused("box", std::vector<double>{1, std::numeric_limits<double>::infinity()}, "finite");
  expect_refused("bytes", std::string("ok \xFF"), "UTF-8 (byte offset 3)");
  EXPECT_EQ(metadata.size(), 1u);  // nothing refused was kept

  EXPECT_EQ(metadata_json(std::string("a\"b\\c\n\t\x01")), R"("a\"b\\c\n\t\u0001")");
  EXPECT_EQ(metadata_json(std::string("caf\xC3\xA9 \xF0\x9F\x98\x80")),
            "\"caf\xC3\xA9 \xF0\x9F\x98\x80\"");
  EXPECT_EQ(metadata_json(std::string("caf\xC3\xA9 \xF0\x9F\x98\x80"), true),
            R"("caf\u00e9 \ud83d\ude00")");
  EXPECT_EQ(metadata_json(int64_t{-5}), "-5");
  EXPECT_EQ(metadata_json(std::numeric_limits<uint64_t>::max()), "18446744073709551615");
  EXPECT_EQ(metadata_json(double{0.9f}), "0.8999999761581421");  // the float's exact double
  EXPECT_EQ(metadata_json(0.1), "0.1");
  EXPECT_EQ(metadata_json(3.0), "3.0");  // stays a double for JSON readers
  EXPECT_EQ(metadata_json(1e300), "1e+300");
  EXPECT_EQ(metadata_json(true), "true");
  EXPECT_EQ(metadata_json(std::vector<double>{1, 0.5}), "[1.0,0.5]");
  EXPECT_EQ(metadata_json(std::vector<double>{}), "[]");
  EXPECT_EQ(metadata_json(MeshMetadata{}), "{}");
  MeshMetadata two;
  two.add("z", int64_t{1}).add("a", "x");
  EXPECT_EQ(metadata_json(two), R"({"z":1,"a":"x"})");  // in order, not sorted
}

TEST(MeshMetadata, GlbAssetExtrasRoundTrip) {
  const MeshMetadata metadata = sample_metadata();
  for (const Mesh& mesh : {sample_mesh(), Mesh{}}) {
    const std::string bytes = encode_glb(mesh, metadata);
    const Glb glb = parse_glb(bytes);
    const nlohmann::json& asset = glb.json["asset"];
    EXPECT_EQ(asset["version"], "2.0");
    EXPECT_EQ(asset["generator"], "cube3d-server 1.2.3 (abc)");
    const nlohmann::json& extras = asset["extras"];
    EXPECT_EQ(extras["prompt"].get<std::string>(), hostile_prompt());
    EXPECT_EQ(extras["seed"].get<uint64_t>(), std::numeric_limits<uint64_t>::max());
    EXPECT_EQ(extras["top_p"].get<double>(), double{0.9f});
    EXPECT_EQ(extras["offset"].get<int64_t>(), -5);
    EXPECT_EQ(extras["guidance_scale"].get<double>(), 3.0);
    EXPECT_EQ(extras["greedy"].get<bool>(), false);
    EXPECT_EQ(extras["bounding_box"].get<std::vector<double>>(),
              (std::vector<double>{1.0, 0.5, double{1.925f}}));
    // The members in the order they were added.
    const uint32_t json_length = read_at<uint32_t>(bytes, 12);
    const auto ordered = nlohmann::ordered_json::parse(bytes.substr(20, json_length));
    std::vector<std::string> keys;
    for (const auto& [key, value] : ordered["asset"]["extras"].items()) keys.push_back(key);
    EXPECT_EQ(keys, (std::vector<std::string>{"prompt", "seed", "top_p", "offset", "guidance_scale",
                                              "greedy", "bounding_box", "server_version"}));
    // Everything else is as without metadata.
    nlohmann::json without = parse_glb(encode_glb(mesh)).json;
    nlohmann::json with = glb.json;
    with["asset"].erase("extras");
    with["asset"]["generator"] = "cube3d-server";
    EXPECT_EQ(with, without);
    EXPECT_EQ(glb.bin, parse_glb(encode_glb(mesh)).bin);
  }
  // No server_version: the generator stays as it is.
  MeshMetadata plain;
  plain.add("prompt", "a chair");
  const Glb glb = parse_glb(encode_glb(sample_mesh(), plain));
  EXPECT_EQ(glb.json["asset"]["generator"], "cube3d-server");
  EXPECT_EQ(glb.json["asset"]["extras"], (nlohmann::json{{"prompt", "a chair"}}));
}

// The header holds none of the words that readers match anywhere (any case), and no line but the
// PLY's own ends it.
void expect_no_reader_keywords(std::string header, const std::string& allowed_end) {
  for (char& c : header) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!allowed_end.empty()) {
    ASSERT_EQ(header.find(allowed_end), header.size() - allowed_end.size());
    header.erase(header.size() - allowed_end.size());
  }
  for (const char* word : {"end_header", "texturefile", "mtllib", "usemtl"}) {
    EXPECT_EQ(header.find(word), std::string::npos) << word;
  }
}

TEST(MeshMetadata, ReaderKeywordsAreHiddenInComments) {
  MeshMetadata metadata;
  metadata.add("prompt", "a end_header TextureFile mtllib usemtl \xC3\xBEnd_header")
      .add("plain", "no keywords here");
  const std::string obj = encode_obj(one_triangle(), false, metadata);
  const std::vector<std::string> lines = header_lines(obj, "");
  EXPECT_EQ(lines[2], R"(# prompt: "a end_heade\u0072 TextureFil\u0065 mtlli\u0062 usemt\u006c )"
                      R"(\u00fend_heade\u0072")");
  EXPECT_EQ(nlohmann::json::parse(lines[2].substr(10)).get<std::string>(),
            std::get<std::string>(*metadata.find("prompt")));
  EXPECT_EQ(lines[3], R"(# plain: "no keywords here")");  // as metadata_json writes it
}

TEST(MeshMetadata, ObjProvenanceCommentsCannotInjectLines) {
  const Mesh mesh = sample_mesh();
  const MeshMetadata metadata = sample_metadata();
  for (const bool with_normals : {false, true}) {
    const std::string text = encode_obj(mesh, with_normals, metadata);
    // Every byte printable ASCII or a newline: nothing a reader could take for a line break.
    for (const char c : text) {
      ASSERT_TRUE(c == '\n' || (c >= 0x20 && c < 0x7F)) << static_cast<int>(c);
    }
    const std::vector<std::string> lines = header_lines(text, "");
    ASSERT_GE(lines.size(), 2 + metadata.size());
    EXPECT_EQ(lines[0], "# cube3d-server");
    EXPECT_EQ(lines[1], "# cube3d provenance");
    for (std::size_t i = 0; i < metadata.size(); ++i) {
      const MeshMetadataEntry& entry = metadata.entries()[i];
      const std::string prefix = "# " + entry.key + ": ";
      const std::string& line = lines[2 + i];
      ASSERT_EQ(line.rfind(prefix, 0), 0u) << line;
      // Reads back as the value (strings with reader keywords differ from metadata_json only
      // in escapes).
      EXPECT_EQ(nlohmann::json::parse(line.substr(prefix.size())),
                nlohmann::json::parse(metadata_json(entry.value)))
          << line;
    }
    expect_no_reader_keywords(text.substr(0, text.find("\nv ")), "");
    const nlohmann::json prompt = nlohmann::json::parse(lines[2].substr(10));
    EXPECT_EQ(prompt.get<std::string>(), hostile_prompt());
    // The data: exactly the lines without metadata, after the comments.
    const std::string plain = encode_obj(mesh, with_normals);
    const std::size_t data = plain.find('\n') + 1;
    EXPECT_EQ(text.substr(text.size() - (plain.size() - data)), plain.substr(data));
    std::size_t comments = 0;
    for (std::size_t at = 0; at < text.size(); at = text.find('\n', at) + 1) {
      comments += text[at] == '#' ? 1 : 0;
    }
    EXPECT_EQ(comments, 2 + metadata.size());
  }
}

TEST(MeshMetadata, PlyProvenanceCommentsCannotInjectLines) {
  const Mesh mesh = sample_mesh();
  const MeshMetadata metadata = sample_metadata();
  const std::string bytes = encode_ply(mesh, metadata);
  const std::string plain = encode_ply(mesh);
  const std::string end = "end_header\n";
  // The first end_header is the real one: the body follows it, as without metadata.
  const std::size_t body = bytes.find(end) + end.size();
  const std::size_t plain_body = plain.find(end) + end.size();
  EXPECT_EQ(bytes.substr(body), plain.substr(plain_body));
  const std::string header = bytes.substr(0, body);
  for (const char c : header) {
    ASSERT_TRUE(c == '\n' || (c >= 0x20 && c < 0x7F)) << static_cast<int>(c);
  }
  const std::vector<std::string> lines = header_lines(header, "end_header");
  EXPECT_EQ(lines[0], "ply");
  EXPECT_EQ(lines[1], "format binary_little_endian 1.0");
  EXPECT_EQ(lines[2], "comment cube3d-server");
  for (std::size_t i = 0; i < metadata.size(); ++i) {
    const MeshMetadataEntry& entry = metadata.entries()[i];
    const std::string prefix = "comment " + entry.key + ": ";
    ASSERT_EQ(lines[3 + i].rfind(prefix, 0), 0u) << lines[3 + i];
    EXPECT_EQ(nlohmann::json::parse(lines[3 + i].substr(prefix.size())),
              nlohmann::json::parse(metadata_json(entry.value)));
  }
  expect_no_reader_keywords(header, "end_header\n");
  // trimesh's test for the end of a header: a line with an end_header token.
  for (std::size_t i = 0; i + 1 < lines.size(); ++i) {
    std::istringstream tokens(lines[i]);
    std::string token;
    while (tokens >> token) EXPECT_NE(token, "end_header") << lines[i];
  }
  EXPECT_EQ(lines[3 + metadata.size()].rfind("element vertex ", 0), 0u);
  EXPECT_EQ(nlohmann::json::parse(lines[3].substr(16)).get<std::string>(), hostile_prompt());
  // Without the comment lines, the header is the one without metadata.
  std::string rest;
  for (const std::string& line : lines) {
    if (line.rfind("comment ", 0) != 0 || line == "comment cube3d-server") rest += line + "\n";
  }
  EXPECT_EQ(rest, plain.substr(0, plain_body));
}

TEST(MeshMetadata, EmptyMetadataGivesTheBytesOfBefore) {
  // The encoders' output before metadata existed, pinned for one triangle.
  const Mesh mesh = one_triangle();
  EXPECT_EQ(encode_obj(mesh, false, {}), "# cube3d-server\nv 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n");
  const std::string ply = encode_ply(mesh, {});
  EXPECT_EQ(ply.substr(0, ply.find("end_header\n") + 11),
            "ply\nformat binary_little_endian 1.0\ncomment cube3d-server\nelement vertex 3\n"
            "property float x\nproperty float y\nproperty float z\nelement face 1\n"
            "property list uchar uint vertex_indices\nend_header\n");
  const std::string glb = encode_glb(mesh, {});
  const uint32_t json_length = read_at<uint32_t>(glb, 12);
  std::string json = glb.substr(20, json_length);
  json.erase(json.find_last_not_of(' ') + 1);
  EXPECT_EQ(
      json,
      R"({"accessors":[{"bufferView":0,"componentType":5126,"count":3,"max":[1.0,1.0,0.0],)"
      R"("min":[0.0,0.0,0.0],"type":"VEC3"},{"bufferView":1,"componentType":5126,"count":3,)"
      R"("type":"VEC3"},{"bufferView":2,"componentType":5125,"count":3,"type":"SCALAR"}],)"
      R"("asset":{"generator":"cube3d-server","version":"2.0"},"bufferViews":[{"buffer":0,)"
      R"("byteLength":36,"byteOffset":0,"target":34962},{"buffer":0,"byteLength":36,)"
      R"("byteOffset":36,"target":34962},{"buffer":0,"byteLength":12,"byteOffset":72,)"
      R"("target":34963}],"buffers":[{"byteLength":84}],"meshes":[{"primitives":[{"attributes":)"
      R"({"NORMAL":1,"POSITION":0},"indices":2,"mode":4}]}],"nodes":[{"mesh":0}],"scene":0,)"
      R"("scenes":[{"nodes":[0]}]})");
  EXPECT_EQ(glb.size(), 12 + 8 + json_length + 8 + 84u);
  for (const MeshFormat format : {MeshFormat::kObj, MeshFormat::kPly, MeshFormat::kGlb}) {
    EXPECT_EQ(encode_mesh(mesh, format, {}), encode_mesh(mesh, format));
  }
}

TEST(MeshMetadata, WriteMeshWritesIt) {
  const std::string path = ::testing::TempDir() + "/cube3d_mesh_metadata.glb";
  write_mesh(path, one_triangle(), sample_metadata());
  std::ifstream file(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes, encode_glb(one_triangle(), sample_metadata()));
  std::remove(path.c_str());
}

}  // namespace test_mesh_io
}  // namespace cube3d
