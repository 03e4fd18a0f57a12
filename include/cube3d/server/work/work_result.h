// The result the executor hands back for a WorkRequest (as the Task's result, which the
// scheduler passes on unread): the mesh in the request's format, its levels of detail, the
// bounds, the timings. The service builds the work's one answer from it (service/shared_work.h).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "cube3d/mesh/mesh_format.h"

namespace cube3d {

struct WorkTimings {
  double queue_ms = 0, text_encoding_ms = 0, prefill_ms = 0, decode_ms = 0, tpot_ms = 0,
         mesh_ms = 0, occupancy_ms = 0, total_ms = 0;
};

// A mesh's axis-aligned box, in model units after the pivot (all zero without vertices).
struct WorkMeshBounds {
  std::array<float, 3> min{0, 0, 0};
  std::array<float, 3> max{0, 0, 0};
  bool operator==(const WorkMeshBounds&) const = default;
};

// A further level of detail (WorkRequest::lod_face_counts), in the request's format.
struct WorkLevel {
  int64_t target_face_count = 0;  // after the profile's cap
  std::vector<float> vertices;    // kRaw
  std::vector<uint32_t> indices;  // kRaw
  std::string encoded;            // the other formats
  int64_t vertex_count = 0;
  int64_t face_count = 0;
  WorkMeshBounds bounds;
  bool operator==(const WorkLevel&) const = default;
};

struct WorkResult {
  std::string request_id;
  MeshFormat format = MeshFormat::kGlb;
  // xyz, world coordinates after the pivot (kRaw, or WorkRequest::return_raw_mesh)
  std::vector<float> vertices;
  std::vector<uint32_t> indices;  // three per triangle (as vertices)
  std::string encoded;            // OBJ / PLY / GLB / compact bytes
  int64_t vertex_count = 0;
  int64_t face_count = 0;
  WorkMeshBounds bounds;              // of this mesh (level 0)
  std::vector<WorkLevel> lods;        // levels 1, 2, ...
  int64_t occupancy_points = 0;       // occupancy queries evaluated for the mesh
  std::vector<int64_t> shape_tokens;  // when asked for
  int64_t batch_bucket = 0;
  std::vector<std::string> warnings;
  WorkTimings timings;
};

}  // namespace cube3d
