// Fuzzes provenance metadata in the mesh files: a prompt (any bytes) as a metadata string must
// never change a file's layout: in OBJ every line before the first vertex is a comment; in PLY
// the header has exactly the lines we write (one `end_header`, every other line a keyword of
// ours) and no prompt bytes can add one; the GLB's asset.extras reads back as the prompt. A
// prompt that is not UTF-8 is refused with invalid_argument.
//
// Input: the prompt's bytes.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "cube3d/mesh/mesh.h"
#include "cube3d/mesh/mesh_io.h"
#include "cube3d/mesh/mesh_metadata.h"
#include "fuzz_support.h"

namespace {

uint32_t read_u32(const std::string& bytes, size_t at) {
  uint32_t value = 0;
  std::memcpy(&value, bytes.data() + at, sizeof(value));
  return value;
}

void check_obj(const std::string& obj) {
  size_t at = 0;
  size_t vertices = 0;
  bool data = false;
  while (at < obj.size()) {
    const size_t end = obj.find('\n', at);
    const std::string_view line(obj.data() + at,
                                (end == std::string::npos ? obj.size() : end) - at);
    if (line.starts_with("v ")) {
      data = true;
      ++vertices;
    } else if (!data) {
      CUBE3D_FUZZ_CHECK(line.starts_with("#"), "OBJ header line that is no comment");
      for (const char c : line) {
        CUBE3D_FUZZ_CHECK(
            static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f,
            "OBJ comment byte outside printable ASCII");
      }
    }
    if (end == std::string::npos) break;
    at = end + 1;
  }
  CUBE3D_FUZZ_CHECK(vertices == 3, "OBJ vertex lines");
}

void check_ply(const std::string& ply) {
  const size_t header_end = ply.find("end_header\n");
  CUBE3D_FUZZ_CHECK(header_end != std::string::npos, "PLY header");
  CUBE3D_FUZZ_CHECK(ply.size() == header_end + 11 + 12 * 3 + 13, "PLY body size");
  const std::string_view header(ply.data(), header_end);
  CUBE3D_FUZZ_CHECK(header.find("end_header") == std::string_view::npos,
                    "end_header inside the PLY header");
  size_t at = 0;
  while (at < header.size()) {
    const size_t end = std::min(header.find('\n', at), header.size());
    const std::string_view line = header.substr(at, end - at);
    CUBE3D_FUZZ_CHECK(line == "ply" || line.starts_with("format ") ||
                          line.starts_with("comment ") || line.starts_with("element ") ||
                          line.starts_with("property "),
                      "PLY header line of an unknown kind");
    at = end + 1;
  }
}

void check_glb(const std::string& glb, const std::string& prompt) {
  CUBE3D_FUZZ_CHECK(glb.size() >= 20 && read_u32(glb, 8) == glb.size(), "GLB length");
  const size_t json_bytes = read_u32(glb, 12);
  CUBE3D_FUZZ_CHECK(20 + json_bytes <= glb.size(), "GLB JSON chunk");
  const nlohmann::json gltf = nlohmann::json::parse(glb.substr(20, json_bytes));
  CUBE3D_FUZZ_CHECK(gltf["asset"]["extras"]["prompt"] == prompt, "GLB extras prompt");
  CUBE3D_FUZZ_CHECK(gltf["asset"]["extras"]["seed"] == 7, "GLB extras seed");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string prompt(reinterpret_cast<const char*>(data), size);
  cube3d::MeshMetadata metadata;
  try {
    metadata.add("prompt", prompt);
  } catch (const cube3d::Error& e) {
    CUBE3D_FUZZ_CHECK(e.code() == cube3d::ErrorCode::kInvalidArgument, "error code");
    return 0;  // not UTF-8
  }
  metadata.add("seed", uint64_t{7});
  metadata.add("top_p", 0.9);
  cube3d::Mesh mesh;
  mesh.vertices = {0, 0, 0, 1, 0, 0, 0, 1, 0};
  mesh.indices = {0, 1, 2};
  check_obj(cube3d::encode_obj(mesh, false, metadata));
  check_ply(cube3d::encode_ply(mesh, metadata));
  check_glb(cube3d::encode_glb(mesh, metadata), prompt);
  // The metadata's own JSON, ASCII-only, reads back to the prompt.
  const nlohmann::json object = nlohmann::json::parse(cube3d::metadata_json(metadata, true));
  CUBE3D_FUZZ_CHECK(object["prompt"] == prompt, "metadata JSON round trip");
  return 0;
}
