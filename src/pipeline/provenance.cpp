#include "cube3d/pipeline/provenance.h"

#include <array>
#include <string>
#include <vector>

namespace cube3d {

MeshMetadata provenance_metadata(const Provenance& p) {
  MeshMetadata m;
  m.add("prompt", p.prompt);
  m.add("seed", p.seed);
  // The sampler's top-p buffer is float (engine/generator.cpp): the value it compares against.
  if (p.top_p) m.add("top_p", double{static_cast<float>(*p.top_p)});
  m.add("guidance_scale", p.guidance_scale);
  m.add("resolution_base", p.resolution_base);
  if (p.bounding_box) {
    const std::array<float, 3>& box = *p.bounding_box;
    m.add("bounding_box", std::vector<double>{box[0], box[1], box[2]});
  }
  m.add("mesh_profile", std::string(to_string(p.mesh_profile)));
  if (p.target_face_count) m.add("target_face_count", *p.target_face_count);
  if (p.pivot != MeshPivot::kModelOrigin) m.add("pivot", std::string(to_string(p.pivot)));
  if (!p.lod_face_counts.empty()) {
    m.add("lod_face_counts",
          std::vector<double>(p.lod_face_counts.begin(), p.lod_face_counts.end()));
  }
  m.add("model", p.model);
  if (!p.weights_digest.empty()) m.add("weights_digest", p.weights_digest);
  if (!p.server_version.empty()) m.add("server_version", p.server_version);
  if (!p.request_id.empty()) m.add("request_id", p.request_id);
  return m;
}

}  // namespace cube3d
