#include "cube3d/mesh/mesh_io.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <limits>
#include <string_view>
#include <variant>
#include <vector>

#include "cube3d/core/error.h"

namespace cube3d {
namespace {

// The binary formats are little-endian; the server runs on x86-64 and aarch64 Linux.
static_assert(std::endian::native == std::endian::little,
              "mesh writers assume a little-endian host");

template <typename T>
void append_raw(std::string& out, const T& value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

void append_float(std::string& out, float value) {
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  out.append(buffer, result.ptr);
}

void append_uint(std::string& out, uint64_t value) {
  char buffer[24];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  out.append(buffer, result.ptr);
}

void check_indices(const Mesh& mesh) {
  const std::size_t count = mesh.vertex_count();
  if (mesh.vertices.size() % 3 != 0 || mesh.indices.size() % 3 != 0) {
    throw invalid_argument("mesh: vertex and index arrays must hold whole triples");
  }
  for (const uint32_t index : mesh.indices) {
    if (index >= count) {
      throw invalid_argument("mesh: index " + std::to_string(index) + " is out of range for " +
                             std::to_string(count) + " vertices");
    }
  }
}

// Words that common readers look for anywhere in a header, not only at the start of a line:
// trimesh ends a PLY header at any line with an "end_header" token, takes a texture file name from
// any PLY header line holding "TextureFile" (any case), and opens the material library named
// after the first "mtllib" anywhere in an OBJ (comments included).
constexpr std::string_view kReaderKeywords[] = {"end_header", "texturefile", "mtllib", "usemtl"};

// Writes the last letter of each reader keyword in `json` (ASCII JSON text) as a \u escape: the
// same string to a JSON reader, no keyword to a line-based one. The last letter is never inside
// an escape of its own (it is not a hex digit, or the letter before it is not), and the escape
// adds only digits, so no keyword survives or appears.
std::string hide_reader_keywords(const std::string& json) {
  std::string lower = json;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::vector<bool> hide(json.size(), false);
  bool any = false;
  for (const std::string_view keyword : kReaderKeywords) {
    for (std::size_t at = lower.find(keyword); at != std::string::npos;
         at = lower.find(keyword, at + 1)) {
      hide[at + keyword.size() - 1] = true;
      any = true;
    }
  }
  if (!any) return json;
  std::string out;
  out.reserve(json.size() + 16);
  for (std::size_t i = 0; i < json.size(); ++i) {
    if (!hide[i]) {
      out += json[i];
      continue;
    }
    static constexpr char kHex[] = "0123456789abcdef";
    const auto c = static_cast<unsigned char>(json[i]);
    out += "\\u00";
    out += kHex[c >> 4];
    out += kHex[c & 0xF];
  }
  return out;
}

// One "<prefix><key>: <value>\n" header line per entry. ASCII-only JSON escapes every control
// character and non-ASCII code point, so a value (a prompt) can neither end the line early nor
// put bytes a text-format reader chokes on into the header; reader keywords are hidden too.
// Keys are plain identifiers chosen by our code, not by a caller.
void append_comment_lines(std::string& out, std::string_view prefix, const MeshMetadata& metadata) {
  for (const MeshMetadataEntry& entry : metadata.entries()) {
    out += prefix;
    out += entry.key;
    out += ": ";
    out += hide_reader_keywords(metadata_json(entry.value, /*ensure_ascii=*/true));
    out += '\n';
  }
}

void pad_to_four(std::string& out, char fill) {
  while (out.size() % 4 != 0) {
    out.push_back(fill);
  }
}

}  // namespace

MeshFormat mesh_format_from_path(std::string_view path) {
  const std::size_t dot = path.rfind('.');
  const std::size_t slash = path.find_last_of("/\\");
  std::string extension;
  if (dot != std::string_view::npos && (slash == std::string_view::npos || dot > slash)) {
    for (const char c : path.substr(dot + 1)) {
      extension.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    }
  }
  if (extension == "obj") {
    return MeshFormat::kObj;
  }
  if (extension == "ply") {
    return MeshFormat::kPly;
  }
  if (extension == "glb") {
    return MeshFormat::kGlb;
  }
  if (extension == "c3dm") {
    return MeshFormat::kCompact;
  }
  throw invalid_argument("mesh path '" + std::string(path) +
                         "' has no known extension: use .obj, .ply, .glb or .c3dm");
}

std::string encode_obj(const Mesh& mesh, bool with_normals, const MeshMetadata& metadata) {
  check_indices(mesh);
  std::string out;
  out.reserve(mesh.vertices.size() * (with_normals ? 20 : 10) + mesh.indices.size() * 8);
  out += "# cube3d-server\n";
  if (!metadata.empty()) {
    out += "# cube3d provenance\n";
    append_comment_lines(out, "# ", metadata);
  }
  for (std::size_t n = 0; n < mesh.vertices.size(); n += 3) {
    out += "v ";
    append_float(out, mesh.vertices[n]);
    out += ' ';
    append_float(out, mesh.vertices[n + 1]);
    out += ' ';
    append_float(out, mesh.vertices[n + 2]);
    out += '\n';
  }
  if (with_normals) {
    const std::vector<float> normals = vertex_normals(mesh);
    for (std::size_t n = 0; n < normals.size(); n += 3) {
      out += "vn ";
      append_float(out, normals[n]);
      out += ' ';
      append_float(out, normals[n + 1]);
      out += ' ';
      append_float(out, normals[n + 2]);
      out += '\n';
    }
  }
  for (std::size_t n = 0; n < mesh.indices.size(); n += 3) {
    out += 'f';
    for (int corner = 0; corner < 3; ++corner) {
      const uint64_t index = uint64_t{mesh.indices[n + corner]} + 1;
      out += ' ';
      append_uint(out, index);
      if (with_normals) {
        out += "//";
        append_uint(out, index);
      }
    }
    out += '\n';
  }
  return out;
}

std::string encode_ply(const Mesh& mesh, const MeshMetadata& metadata) {
  check_indices(mesh);
  std::string out = "ply\nformat binary_little_endian 1.0\ncomment cube3d-server\n";
  append_comment_lines(out, "comment ", metadata);
  out += "element vertex " + std::to_string(mesh.vertex_count()) +
         "\nproperty float x\nproperty float y\nproperty float z\nelement face " +
         std::to_string(mesh.face_count()) +
         "\nproperty list uchar uint vertex_indices\nend_header\n";
  const std::size_t header = out.size();
  out.resize(header + mesh.vertices.size() * sizeof(float) + mesh.face_count() * 13);
  char* p = out.data() + header;
  // memcpy from an empty vector's null data() is undefined even for 0 bytes (UBSan).
  if (!mesh.vertices.empty()) {
    std::memcpy(p, mesh.vertices.data(), mesh.vertices.size() * sizeof(float));
    p += mesh.vertices.size() * sizeof(float);
  }
  for (std::size_t n = 0; n < mesh.indices.size(); n += 3) {
    *p++ = 3;
    std::memcpy(p, &mesh.indices[n], 3 * sizeof(uint32_t));
    p += 3 * sizeof(uint32_t);
  }
  return out;
}

std::string encode_glb(const Mesh& mesh, const MeshMetadata& metadata) {
  check_indices(mesh);
  constexpr uint32_t kMagic = 0x46546C67;      // "glTF"
  constexpr uint32_t kJsonChunk = 0x4E4F534A;  // "JSON"
  constexpr uint32_t kBinChunk = 0x004E4942;   // "BIN\0"
  constexpr int kFloat = 5126;
  constexpr int kUnsignedInt = 5125;
  constexpr int kArrayBuffer = 34962;
  constexpr int kElementArrayBuffer = 34963;

  nlohmann::json gltf;
  gltf["asset"] = {{"version", "2.0"}, {"generator", "cube3d-server"}};
  if (const auto* version = metadata.find("server_version")) {
    if (const auto* text = std::get_if<std::string>(version)) {
      gltf["asset"]["generator"] = "cube3d-server " + *text;
    }
  }
  if (!metadata.empty()) {
    // A placeholder, replaced by the entries' JSON text below: nlohmann::json sorts object
    // members (which would lose the entries' order), and its own number printing is not
    // metadata_json's (shortest round-trip, integers exact).
    gltf["asset"]["extras"] = nullptr;
  }
  gltf["scene"] = 0;
  std::string bin;
  if (mesh.empty()) {
    gltf["scenes"] =
        nlohmann::json::array({nlohmann::json::object({{"nodes", nlohmann::json::array()}})});
  } else {
    const std::vector<float> normals = vertex_normals(mesh);
    const std::size_t vertex_bytes = mesh.vertices.size() * sizeof(float);
    const std::size_t index_bytes = mesh.indices.size() * sizeof(uint32_t);
    if (2 * vertex_bytes + index_bytes > std::numeric_limits<uint32_t>::max() - 1024) {
      throw invalid_argument("mesh too large for a GLB file (4 GiB limit)");
    }
    bin.reserve(2 * vertex_bytes + index_bytes);
    bin.append(reinterpret_cast<const char*>(mesh.vertices.data()), vertex_bytes);
    bin.append(reinterpret_cast<const char*>(normals.data()), vertex_bytes);
    bin.append(reinterpret_cast<const char*>(mesh.indices.data()), index_bytes);

    const BoundingBox box = bounding_box(mesh);
    // float -> double is exact, so readers that compare against the float data see equality.
    const nlohmann::json min = {double{box.min[0]}, double{box.min[1]}, double{box.min[2]}};
    const nlohmann::json max = {double{box.max[0]}, double{box.max[1]}, double{box.max[2]}};
    gltf["scenes"] = {{{"nodes", {0}}}};
    gltf["nodes"] = {{{"mesh", 0}}};
    gltf["meshes"] = {
        {{"primitives",
          {{{"attributes", {{"POSITION", 0}, {"NORMAL", 1}}}, {"indices", 2}, {"mode", 4}}}}}};
    gltf["buffers"] = {{{"byteLength", bin.size()}}};
    gltf["bufferViews"] = {
        {{"buffer", 0}, {"byteOffset", 0}, {"byteLength", vertex_bytes}, {"target", kArrayBuffer}},
        {{"buffer", 0},
         {"byteOffset", vertex_bytes},
         {"byteLength", vertex_bytes},
         {"target", kArrayBuffer}},
        {{"buffer", 0},
         {"byteOffset", 2 * vertex_bytes},
         {"byteLength", index_bytes},
         {"target", kElementArrayBuffer}}};
    gltf["accessors"] = {{{"bufferView", 0},
                          {"componentType", kFloat},
                          {"count", mesh.vertex_count()},
                          {"type", "VEC3"},
                          {"min", min},
                          {"max", max}},
                         {{"bufferView", 1},
                          {"componentType", kFloat},
                          {"count", mesh.vertex_count()},
                          {"type", "VEC3"}},
                         {{"bufferView", 2},
                          {"componentType", kUnsignedInt},
                          {"count", mesh.indices.size()},
                          {"type", "SCALAR"}}};
  }
  std::string json = gltf.dump();
  if (!metadata.empty()) {
    // "asset" is the document's first member holding an "extras" (members are sorted, and no
    // other member of ours has one), so the first placeholder after it is ours.
    static constexpr std::string_view kPlaceholder = "\"extras\":null";
    const std::size_t at = json.find(kPlaceholder, json.find("\"asset\":"));
    if (at == std::string::npos) throw internal_error("encode_glb: asset.extras placeholder lost");
    json.replace(at + kPlaceholder.size() - 4, 4, metadata_json(metadata));
  }
  pad_to_four(json, ' ');
  pad_to_four(bin, '\0');

  std::string out;
  const std::size_t total = 12 + 8 + json.size() + (bin.empty() ? 0 : 8 + bin.size());
  out.reserve(total);
  append_raw(out, kMagic);
  append_raw(out, uint32_t{2});
  append_raw(out, static_cast<uint32_t>(total));
  append_raw(out, static_cast<uint32_t>(json.size()));
  append_raw(out, kJsonChunk);
  out += json;
  if (!bin.empty()) {
    append_raw(out, static_cast<uint32_t>(bin.size()));
    append_raw(out, kBinChunk);
    out += bin;
  }
  return out;
}

std::string encode_compact(const Mesh& mesh, const CompactMeshOptions& options) {
  const std::vector<float> normals = options.normals ? vertex_normals(mesh) : std::vector<float>{};
  return encode_compact_mesh(mesh.vertices, mesh.indices, normals, options.positions);
}

std::string encode_mesh(const Mesh& mesh, MeshFormat format, const MeshMetadata& metadata,
                        const CompactMeshOptions& compact) {
  switch (format) {
    case MeshFormat::kCompact:
      return encode_compact(mesh, compact);
    case MeshFormat::kObj:
      return encode_obj(mesh, /*with_normals=*/false, metadata);
    case MeshFormat::kPly:
      return encode_ply(mesh, metadata);
    case MeshFormat::kGlb:
      return encode_glb(mesh, metadata);
    case MeshFormat::kRaw:
      break;
  }
  throw invalid_argument("mesh format " + std::string(to_string(format)) + " is not a file format");
}

void write_mesh(const std::string& path, const Mesh& mesh, const MeshMetadata& metadata) {
  const std::string bytes = encode_mesh(mesh, mesh_format_from_path(path), metadata);
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) {
    throw invalid_argument("cannot open '" + path + "' for writing: " + std::strerror(errno));
  }
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  file.close();
  if (!file) {
    throw invalid_argument("cannot write '" + path + "'");
  }
}

}  // namespace cube3d
