// Fuzzes the compact mesh decoder (docs/mesh-encoding.md, mesh/compact_mesh.h), the reader of the
// bytes a client gets (the reference every other reader is written against). Any input must be
// refused with a cube3d::Error or decoded into arrays that keep the spec's promises: the counts of
// the header, every index below the vertex count, every position within the header's bounds,
// unit-range normals; and what decodes encodes again into a payload that decodes to the same
// mesh (exactly for float32 positions, within the quantisation step otherwise).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "cube3d/mesh/compact_mesh.h"
#include "fuzz_support.h"

namespace {

uint32_t header_u32(std::string_view in, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(in[at + static_cast<size_t>(i)]);
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cube3d;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  CompactMesh mesh;
  if (!fuzz::refusals_ok([&] { mesh = decode_compact_mesh(input); })) return 0;

  CUBE3D_FUZZ_CHECK(input.size() == compact_mesh_bytes(
                                        header_u32(input, kCompactOffsetVertexCount),
                                        header_u32(input, kCompactOffsetTriangleCount), mesh.flags),
                    "the accepted length is the spec's");
  const uint64_t vertex_count = header_u32(input, kCompactOffsetVertexCount);
  CUBE3D_FUZZ_CHECK(mesh.vertices.size() == vertex_count * 3, "three coordinates per vertex");
  CUBE3D_FUZZ_CHECK(
      mesh.indices.size() == uint64_t{header_u32(input, kCompactOffsetTriangleCount)} * 3,
      "three indices per triangle");
  // (Flagged normals of a mesh without vertices are an empty section: no normals either.)
  CUBE3D_FUZZ_CHECK(
      mesh.normals.size() == ((mesh.flags & kCompactFlagNormals) ? vertex_count * 3 : 0),
      "three normal components per vertex exactly when flagged");
  for (const uint32_t index : mesh.indices) {
    CUBE3D_FUZZ_CHECK(index < vertex_count, "every index below the vertex count");
  }
  for (size_t i = 0; i < mesh.vertices.size(); ++i) {
    CUBE3D_FUZZ_CHECK(
        mesh.vertices[i] >= mesh.bounds_min[i % 3] && mesh.vertices[i] <= mesh.bounds_max[i % 3],
        "positions within the bounds");
  }
  for (const float n : mesh.normals) CUBE3D_FUZZ_CHECK(n >= -1 && n <= 1, "normals in [-1, 1]");

  const CompactPositions positions =
      mesh.quantized() ? CompactPositions::kQuantized16 : CompactPositions::kFloat32;
  std::string again;
  if (!fuzz::refusals_ok([&] {
        again = encode_compact_mesh(mesh.vertices, mesh.indices, mesh.normals, positions);
      })) {
    fuzz::fail("a decoded mesh does not encode");
  }
  const CompactMesh back = decode_compact_mesh(again);
  CUBE3D_FUZZ_CHECK(back.indices == mesh.indices, "indices survive a second round");
  CUBE3D_FUZZ_CHECK(back.normals == mesh.normals, "normals survive a second round");
  if (!mesh.quantized()) {
    CUBE3D_FUZZ_CHECK(back.vertices == mesh.vertices, "float32 positions survive exactly");
  } else {
    for (size_t i = 0; i < back.vertices.size(); ++i) {
      const size_t a = i % 3;
      const double step = (double{back.bounds_max[a]} - back.bounds_min[a]) / kCompactQuantSteps;
      CUBE3D_FUZZ_CHECK(std::abs(double{back.vertices[i]} - mesh.vertices[i]) <=
                            step / 2 + 1e-6 * (1 + std::abs(double{mesh.vertices[i]})),
                        "quantised positions within half a step");
    }
  }
  return 0;
}
