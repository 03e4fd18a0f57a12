#include "cube3d/server/http/usage_route.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <variant>

#include "cube3d/server/admission/api_keys.h"
#include "cube3d/server/http/http_status.h"
#include "cube3d/server/http/json_codec.h"
#include "cube3d/server/http/mesh_answers.h"

namespace cube3d::http {
namespace {

template <typename T>
void put(nlohmann::json& out, const char* name, const std::optional<T>& value) {
  if (value) out[name] = *value;
}

nlohmann::json limits_of(const ApiKey& key) {
  nlohmann::json limits = nlohmann::json::object();
  put(limits, "requests_per_minute", key.requests_per_minute);
  put(limits, "max_concurrent", key.max_concurrent);
  put(limits, "shape_tokens_per_minute", key.shape_tokens_per_minute);
  put(limits, "occupancy_points_per_minute", key.occupancy_points_per_minute);
  limits["priority"] = key.batch_only ? "batch" : "interactive";
  if (key.per_user) {
    nlohmann::json per_user = nlohmann::json::object();
    put(per_user, "requests_per_minute", key.per_user->requests_per_minute);
    put(per_user, "max_concurrent", key.per_user->max_concurrent);
    put(per_user, "shape_tokens_per_minute", key.per_user->shape_tokens_per_minute);
    limits["per_user"] = std::move(per_user);
  }
  return limits;
}

}  // namespace

void serve_usage(Service& service, const std::shared_ptr<Exchange>& ex) {
  auto who = service.identify(ex->request().headers.value_or("Authorization"));
  if (auto* refused = std::get_if<Status>(&who)) {
    ex->respond(status_response(*refused, 0, {}));
    return;
  }
  const std::string& key = std::get<std::string>(who);
  const Metrics::KeyUsage usage = service.metrics().key_usage(key);
  nlohmann::json body = {{"key", key},
                         {"requests", usage.requests_by_code},
                         {"shape_tokens", usage.shape_tokens},
                         {"occupancy_points", usage.occupancy_points},
                         {"mesh_bytes", usage.mesh_bytes},
                         {"prompt_refusals", usage.prompt_refusals}};
  if (ApiKeys* const keys = service.api_keys()) {
    if (const std::optional<ApiKeys::Standing> standing = keys->standing(key)) {
      body["running"] = standing->running;
      body["limits"] = limits_of(standing->key);
      nlohmann::json remaining = nlohmann::json::object();
      put(remaining, "requests", standing->requests_left);
      put(remaining, "shape_tokens", standing->shape_tokens_left);
      put(remaining, "occupancy_points", standing->occupancy_points_left);
      body["remaining"] = std::move(remaining);
    }
  }
  Response response = make_response(200, body.dump() + "\n", kJsonType);
  response.headers.set("Cache-Control", "no-store");
  ex->respond(std::move(response));
}

}  // namespace cube3d::http
