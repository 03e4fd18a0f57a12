#include "cube3d/server/wire/proto_enums.h"

#include <string>

#include "cube3d/core/error.h"
#include "cube3d/server/service/api_numbers.h"

namespace cube3d {
namespace {

// service/api_numbers.cpp lists the API's numbers by hand (it may not see the messages): each
// must be the message's own.
static_assert(v1::MESH_FORMAT_RAW == 1 && v1::MESH_FORMAT_OBJ == 2 && v1::MESH_FORMAT_PLY == 3 &&
              v1::MESH_FORMAT_GLB == 4 && v1::MESH_FORMAT_COMPACT == 5 && v1::MeshFormat_MAX == 5);
static_assert(v1::MESH_PROFILE_NONE == 1 && v1::MESH_PROFILE_ROBLOX == 2 &&
              v1::MeshProfile_MAX == 2);
static_assert(v1::PIVOT_MODEL_ORIGIN == 1 && v1::PIVOT_CENTER == 2 &&
              v1::PIVOT_BOTTOM_CENTER == 3 && v1::Pivot_MAX == 3);
static_assert(v1::COMPACT_POSITIONS_FLOAT32 == 1 && v1::COMPACT_POSITIONS_QUANTIZED16 == 2 &&
              v1::CompactPositions_MAX == 2);
static_assert(v1::PRIORITY_INTERACTIVE == 1 && v1::PRIORITY_BATCH == 2 && v1::Priority_MAX == 2);

}  // namespace

v1::MeshFormat to_proto(MeshFormat format) {
  return static_cast<v1::MeshFormat>(api_numbers::of(format));
}
v1::MeshProfile to_proto(MeshProfile profile) {
  return static_cast<v1::MeshProfile>(api_numbers::of(profile));
}
v1::Pivot to_proto(MeshPivot pivot) { return static_cast<v1::Pivot>(api_numbers::of(pivot)); }
v1::CompactPositions to_proto(CompactPositions positions) {
  return static_cast<v1::CompactPositions>(api_numbers::of(positions));
}

MeshFormat from_proto(v1::MeshFormat format) {
  if (const auto ours = api_numbers::mesh_format(format)) return *ours;
  throw invalid_argument("format " + std::to_string(static_cast<int>(format)) +
                         " is not one of RAW (1), OBJ (2), PLY (3), GLB (4), COMPACT (5)");
}

}  // namespace cube3d
