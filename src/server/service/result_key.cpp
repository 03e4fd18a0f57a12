#include "cube3d/server/service/result_key.h"

#include "cube3d/core/sha256.h"
#include "cube3d/mesh/shape_fields.h"

namespace cube3d {

std::string result_key_material(const WorkRequest& r, const ModelIdentity& model,
                                std::string_view scope) {
  CanonicalFields c;
  c.field("cube3d-result", "v1");
  c.field("scope", scope);
  c.field("weights", model.weights_digest);
  c.field("config", model.config_digest);
  c.field("server", model.server_version);
  add_shape_fields(c, r, "target_face_count");
  c.number("return_shape_tokens", r.return_shape_tokens ? 1 : 0);
  // Only when asked for, so that every key made before the option existed still holds.
  if (r.return_raw_mesh && r.format != MeshFormat::kRaw) c.number("return_raw_mesh", 1);
  return c.text();
}

ResultKey result_key(const WorkRequest& request, const ModelIdentity& model,
                     std::string_view scope) {
  return sha256(result_key_material(request, model, scope));
}

}  // namespace cube3d
