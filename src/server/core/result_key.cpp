#include "cube3d/server/core/result_key.h"

#include <bit>
#include <cstring>

#include "cube3d/core/canonical_fields.h"
#include "cube3d/core/sha256.h"

namespace cube3d {
namespace {}  // namespace

std::string result_key_material(const JobRequest& r, const ModelIdentity& model,
                                std::string_view scope) {
  CanonicalFields c;
  c.field("cube3d-result", "v1");
  c.field("scope", scope);
  c.field("weights", model.weights_digest);
  c.field("config", model.config_digest);
  c.field("server", model.server_version);
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
  c.field("target_face_count", r.target_face_count ? std::to_string(*r.target_face_count) : "-");
  c.field("mesh_profile", to_string(r.mesh_profile));
  c.number("return_shape_tokens", r.return_shape_tokens ? 1 : 0);
  return c.text();
}

ResultKey result_key(const JobRequest& request, const ModelIdentity& model,
                     std::string_view scope) {
  return sha256(result_key_material(request, model, scope));
}

}  // namespace cube3d
