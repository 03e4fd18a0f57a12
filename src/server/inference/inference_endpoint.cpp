#include "cube3d/server/inference/inference_endpoint.h"

#include <algorithm>
#include <utility>
#include <variant>

#include "cube3d/core/error.h"

namespace cube3d::inference {

InferenceEndpoint::InferenceEndpoint(Service& service, InferenceOptions options)
    : service_(service), options_(std::move(options)) {}

bool InferenceEndpoint::ready() const { return service_.ready() && !draining_.load(); }

std::string InferenceEndpoint::server_version() const {
  return service_.ready() ? service_.model().server_version : std::string();
}

std::vector<std::string> InferenceEndpoint::extensions() {
  // Triton's names for what this server serves of its extensions.
  return {"binary_tensor_data", "parameters", "statistics", "model_configuration"};
}

const ModelDescription& InferenceEndpoint::loaded_model() const {
  if (!service_.ready()) {
    throw unavailable("loading: the model is still loading and warming up");
  }
  std::call_once(described_, [this] {
    model_ = describe_model(service_.model(), service_.options().policy,
                            service_.options().tokens_per_shape, options_);
  });
  return *model_;
}

ModelDescription InferenceEndpoint::describe_for(const std::string& authorization) const {
  const auto who = service_.identify(authorization);
  if (const auto* refused = std::get_if<Status>(&who)) {
    throw Error(refused->code(), refused->message());
  }
  return loaded_model();
}

ModelDescription InferenceEndpoint::describe_for(const std::string& authorization,
                                                 const std::string& name,
                                                 const std::string& version) const {
  ModelDescription model = describe_for(authorization);
  check_model(model, name, version);
  return model;
}

bool InferenceEndpoint::model_ready(const std::string& name, const std::string& version) const {
  if (!ready()) return false;
  const ModelDescription& model = loaded_model();
  return name == model.name && (version.empty() || version == model.version);
}

std::shared_ptr<InferRun> InferenceEndpoint::infer(InferRequest request, CallContext call,
                                                   InferObserver observer, const DoorRules& door,
                                                   bool bypass_cache) {
  if (draining_.load()) throw unavailable("draining: the server is shutting down");
  ModelDescription model = loaded_model();
  check_model(model, request.model_name, request.model_version);
  InferPlan plan = plan_infer(request, model, door);
  if (plan.timeout) {
    call.deadline = std::min(call.deadline, SteadyClock::now() + *plan.timeout);
  }
  for (v1::GenerateMeshRequest& r : plan.requests) {
    if (bypass_cache) r.set_bypass_cache(true);
  }
  return InferRun::start(service_, std::move(request), std::move(model), std::move(plan), call,
                         std::move(observer));
}

}  // namespace cube3d::inference
