// A GenerateMesh request as a client sent it, before validation: the API's fields
// (proto/cube3d/v1/mesh_service.proto's GenerateMeshRequest) as plain values. An optional field
// the client left unset stays unset here, and an enum is the API's number as sent (one the API
// does not define is validation's to refuse, naming the field: service/api_numbers.h). Each door
// fills one from its transport (wire/request_codec.h for the API's message); the service
// validates it (service/request_validation.h) and never sees the wire.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cube3d {

struct ClientRequest {
  std::string request_id;  // empty: the service makes one
  std::string prompt;      // bytes as sent (UTF-8 is checked by validation)
  std::optional<float> guidance_scale;
  std::optional<float> top_p;
  std::optional<uint64_t> seed;
  std::optional<std::array<float, 3>> bounding_box;  // x, y, z as sent
  std::optional<int32_t> resolution_base;
  std::optional<int32_t> format;  // MESH_FORMAT_*
  std::optional<uint32_t> target_face_count;
  std::vector<uint32_t> lod_face_counts;
  bool return_shape_tokens = false;
  bool return_raw_mesh = false;
  std::optional<int32_t> mesh_profile;  // MESH_PROFILE_*
  bool bypass_cache = false;
  int32_t priority = 0;  // PRIORITY_*
  struct Compact {
    int32_t positions = 0;  // COMPACT_POSITIONS_*
    bool normals = false;
    bool operator==(const Compact&) const = default;
  };
  std::optional<Compact> compact;
  int32_t pivot = 0;  // PIVOT_*

  bool operator==(const ClientRequest&) const = default;
};

}  // namespace cube3d
