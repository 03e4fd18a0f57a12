#include "cube3d/server/http/model_route.h"

#include <nlohmann/json.hpp>

#include <string>
#include <variant>

#include "cube3d/server/http/http_status.h"
#include "cube3d/server/http/mesh_answers.h"
#include "cube3d/server/service/api_numbers.h"

namespace cube3d::http {

void serve_model(const Service& service, const std::shared_ptr<Exchange>& ex) {
  const auto who = service.identify(ex->request().headers.value_or("Authorization"));
  if (const auto* refused = std::get_if<Status>(&who)) {
    ex->respond(status_response(*refused, 0, {}));
    return;
  }
  if (!service.ready()) {
    ex->respond(status_response(
        Status(ErrorCode::kUnavailable, "loading: the model is still loading and warming up"), 1,
        {}));
    return;
  }
  const RequestPolicy& policy = service.options().policy;
  const ModelIdentity& model = service.model();
  nlohmann::json defaults = {
      {"guidanceScale", policy.defaults.guidance_scale},
      {"resolutionBase", policy.defaults.resolution_base},
      {"format", std::string(api_numbers::name(policy.defaults.format))},
      {"meshProfile", std::string(api_numbers::name(policy.defaults.mesh_profile))}};
  if (policy.defaults.top_p) defaults["topP"] = *policy.defaults.top_p;
  const nlohmann::json body = {{"model", model.name},
                               {"tokensPerShape", service.options().tokens_per_shape},
                               {"boundingBox", policy.model_has_bbox},
                               {"weightsDigest", model.weights_digest},
                               {"serverVersion", model.server_version},
                               {"defaults", std::move(defaults)},
                               {"limits",
                                {{"minResolutionBase", policy.limits.min_resolution_base},
                                 {"maxResolutionBase", policy.limits.max_resolution_base},
                                 {"maxPromptBytes", policy.limits.max_prompt_bytes},
                                 {"maxGuidanceScale", policy.max_guidance_scale},
                                 {"maxTargetFaceCount", policy.limits.max_target_face_count}}}};
  Response response = make_response(200, body.dump() + "\n", kJsonType);
  response.headers.set("Cache-Control", "no-store");
  ex->respond(std::move(response));
}

}  // namespace cube3d::http
