#include "cube3d/server/wire/request_codec.h"

namespace cube3d {

ClientRequest client_request_of(const v1::GenerateMeshRequest& m) {
  ClientRequest r;
  r.request_id = m.request_id();
  r.prompt = m.prompt();
  if (m.has_guidance_scale()) r.guidance_scale = m.guidance_scale();
  if (m.has_top_p()) r.top_p = m.top_p();
  if (m.has_seed()) r.seed = m.seed();
  if (m.has_bounding_box()) {
    r.bounding_box = {m.bounding_box().x(), m.bounding_box().y(), m.bounding_box().z()};
  }
  if (m.has_resolution_base()) r.resolution_base = m.resolution_base();
  if (m.has_format()) r.format = m.format();
  if (m.has_target_face_count()) r.target_face_count = m.target_face_count();
  r.lod_face_counts.assign(m.lod_face_counts().begin(), m.lod_face_counts().end());
  r.return_shape_tokens = m.return_shape_tokens();
  r.return_raw_mesh = m.return_raw_mesh();
  if (m.has_mesh_profile()) r.mesh_profile = m.mesh_profile();
  r.bypass_cache = m.bypass_cache();
  r.priority = m.priority();
  if (m.has_compact()) {
    r.compact = ClientRequest::Compact{.positions = m.compact().positions(),
                                       .normals = m.compact().normals()};
  }
  r.pivot = m.pivot();
  return r;
}

}  // namespace cube3d
