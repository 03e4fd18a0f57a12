// The fields of a mesh request, in the canonical encoding (core/canonical_fields.h) that the
// digests of a request are taken over.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "cube3d/core/canonical_fields.h"
#include "cube3d/mesh/compact_mesh.h"
#include "cube3d/mesh/mesh_format.h"
#include "cube3d/mesh/mesh_frame.h"
#include "cube3d/mesh/mesh_profile.h"

namespace cube3d {

// The fields of a request that decide the mesh file it gets (besides the model): the one list of
// them, which the result cache's key (server/service/result_key.cpp, a WorkRequest) and the batch
// tool's output names (tools/output_name.cpp, an OutputKey) both encode. A field added to the
// requests that changes the file belongs here, so that neither can serve a stale file for it.
// `face_count_tag` names the decimation target's field: each caller keeps the tag its keys were
// first published with (the cache's "target_face_count", the batch names' "target_faces"), so
// that sharing the list changed no existing cache key and no existing output file's name.
// Fields added later are written only when they differ from what requests got before them, so
// that the keys of every earlier request (cache entries on disk, batch outputs) stay as they were.
template <typename Request>
void add_shape_fields(CanonicalFields& c, const Request& r,
                      std::string_view face_count_tag = "target_face_count") {
  c.field("prompt", r.prompt);
  c.real("guidance_scale", r.guidance_scale);
  c.field("top_p", r.top_p ? "set" : "greedy");
  if (r.top_p) c.real("top_p_value", *r.top_p);
  c.number("seed", r.seed);
  c.field("bounding_box", r.bounding_box ? "set" : "none");
  if (r.bounding_box) {
    for (const float side : *r.bounding_box) c.real32("side", side);
  }
  c.number("resolution_base", static_cast<uint64_t>(r.resolution_base));
  c.field("format", to_string(r.format));
  c.field(face_count_tag, r.target_face_count ? std::to_string(*r.target_face_count) : "-");
  c.field("mesh_profile", to_string(r.mesh_profile));
  if (r.format == MeshFormat::kCompact) {
    c.field("compact_positions", to_string(r.compact.positions));
    c.number("compact_normals", r.compact.normals ? 1 : 0);
  }
  if (r.pivot != MeshPivot::kModelOrigin) c.field("pivot", to_string(r.pivot));
  if (!r.lod_face_counts.empty()) {
    c.number("lod_levels", r.lod_face_counts.size());
    for (const int64_t faces : r.lod_face_counts) {
      c.number("lod_face_count", static_cast<uint64_t>(faces));
    }
  }
}

}  // namespace cube3d
