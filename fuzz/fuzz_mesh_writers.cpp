// Fuzzes the mesh writers (OBJ, PLY, GLB) on meshes built from the input bytes. Invalid meshes
// (an index past the last vertex, arrays that are not whole triples) must be refused with a
// cube3d::Error; valid ones, with any float values (NaN, infinities), must encode, and each
// file must have its format's layout.
//
// Input layout (fuzz/make_corpus.py writes seeds in it; missing bytes read as zero):
//   byte 0      flags: 1 OBJ normals, 2 indices taken modulo (vertex count + 1) so that most
//               are valid, 4 one extra float (vertices not whole triples), 8 one extra index
//   bytes 1-2   vertex count, little-endian (at most kMaxVertices and what the input holds)
//   bytes 3-4   face count (indices / 3), little-endian (likewise)
//   then        3 * vertex count floats, then the indices: 4 bytes each, little-endian
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "cube3d/mesh/mesh.h"
#include "cube3d/mesh/mesh_io.h"
#include "fuzz_support.h"

namespace {

constexpr uint32_t kMaxVertices = 4096;
constexpr uint32_t kMaxFaces = 8192;

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  template <typename T>
  T next() {
    uint8_t bytes[sizeof(T)] = {};
    const size_t n = std::min(sizeof(T), size_ - std::min(pos_, size_));
    if (n > 0) std::memcpy(bytes, data_ + pos_, n);
    pos_ += sizeof(T);
    T value;
    std::memcpy(&value, bytes, sizeof(T));
    return value;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

bool valid(const cube3d::Mesh& mesh) {
  if (mesh.vertices.size() % 3 != 0 || mesh.indices.size() % 3 != 0) return false;
  return std::all_of(mesh.indices.begin(), mesh.indices.end(),
                     [&](uint32_t i) { return i < mesh.vertex_count(); });
}

uint32_t read_u32(const std::string& bytes, size_t at) {
  uint32_t value = 0;
  std::memcpy(&value, bytes.data() + at, sizeof(value));
  return value;
}

size_t count_lines_starting(const std::string& text, std::string_view prefix) {
  size_t count = 0;
  for (size_t at = 0; at < text.size();) {
    if (text.compare(at, prefix.size(), prefix) == 0) ++count;
    const size_t end = text.find('\n', at);
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return count;
}

void check_layout(const cube3d::Mesh& mesh, cube3d::MeshFormat format, const std::string& bytes,
                  bool normals) {
  const size_t v = mesh.vertex_count();
  const size_t f = mesh.face_count();
  switch (format) {
    case cube3d::MeshFormat::kObj:
      CUBE3D_FUZZ_CHECK(count_lines_starting(bytes, "v ") == v, "OBJ vertex lines");
      CUBE3D_FUZZ_CHECK(count_lines_starting(bytes, "vn ") == (normals ? v : 0), "OBJ normals");
      CUBE3D_FUZZ_CHECK(count_lines_starting(bytes, "f ") == f, "OBJ face lines");
      break;
    case cube3d::MeshFormat::kPly: {
      const size_t header = bytes.find("end_header\n");
      CUBE3D_FUZZ_CHECK(header != std::string::npos, "PLY header");
      CUBE3D_FUZZ_CHECK(bytes.size() == header + 11 + 12 * v + 13 * f, "PLY body size");
      break;
    }
    case cube3d::MeshFormat::kGlb:
      CUBE3D_FUZZ_CHECK(bytes.size() >= 20 && bytes.size() % 4 == 0, "GLB size");
      CUBE3D_FUZZ_CHECK(read_u32(bytes, 0) == 0x46546C67 && read_u32(bytes, 4) == 2, "GLB magic");
      CUBE3D_FUZZ_CHECK(read_u32(bytes, 8) == bytes.size(), "GLB length field");
      CUBE3D_FUZZ_CHECK(20 + size_t{read_u32(bytes, 12)} <= bytes.size(), "GLB JSON chunk");
      break;
    case cube3d::MeshFormat::kRaw:
      cube3d::fuzz::fail("kRaw encoded as a file");
    case cube3d::MeshFormat::kCompact:
      cube3d::fuzz::fail("kCompact is fuzzed by fuzz_compact_mesh, not here");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader in(data, size);
  const auto flags = in.next<uint8_t>();
  // Counts beyond what the input holds would only make large meshes of zeros (slow, and no
  // new paths), so the bytes present bound them.
  const size_t body = size > 5 ? size - 5 : 0;
  const uint32_t vertices =
      static_cast<uint32_t>(std::min<size_t>({in.next<uint16_t>(), kMaxVertices, body / 12}));
  const uint32_t faces = static_cast<uint32_t>(
      std::min<size_t>({in.next<uint16_t>(), kMaxFaces, (body - 12 * size_t{vertices}) / 12}));

  cube3d::Mesh mesh;
  mesh.vertices.resize(3 * size_t{vertices} + ((flags & 4) ? 1 : 0));
  for (float& x : mesh.vertices) x = in.next<float>();
  mesh.indices.resize(3 * size_t{faces} + ((flags & 8) ? 1 : 0));
  for (uint32_t& index : mesh.indices) {
    index = in.next<uint32_t>();
    if (flags & 2) index %= vertices + 1;
  }
  const bool normals = (flags & 1) != 0;
  const bool ok = valid(mesh);

  for (const cube3d::MeshFormat format : {cube3d::MeshFormat::kRaw, cube3d::MeshFormat::kObj,
                                          cube3d::MeshFormat::kPly, cube3d::MeshFormat::kGlb}) {
    std::string bytes;
    try {
      bytes = format == cube3d::MeshFormat::kObj ? cube3d::encode_obj(mesh, normals)
                                                 : cube3d::encode_mesh(mesh, format);
    } catch (const cube3d::Error& e) {
      CUBE3D_FUZZ_CHECK(e.code() == cube3d::ErrorCode::kInvalidArgument, "error code");
      if (format != cube3d::MeshFormat::kRaw && ok) {
        cube3d::fuzz::fail("a valid mesh was refused", e.what());
      }
      continue;
    }
    CUBE3D_FUZZ_CHECK(ok, "an invalid mesh was encoded");
    check_layout(mesh, format, bytes, normals);
  }
  return 0;
}
