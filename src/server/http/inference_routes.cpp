#include "cube3d/server/http/inference_routes.h"

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/core/logging.h"
#include "cube3d/core/peer_log.h"
#include "cube3d/core/printable.h"
#include "cube3d/server/http/call_context.h"
#include "cube3d/server/http/http_error.h"
#include "cube3d/server/http/http_status.h"
#include "cube3d/server/http/infer_json.h"
#include "cube3d/server/http/json_codec.h"
#include "cube3d/server/httpd/cache_control.h"
#include "cube3d/server/inference/protocol_json.h"

namespace cube3d::http {
namespace {

using nlohmann::json;

constexpr const char* kBinaryType = "application/octet-stream";
constexpr const char* kNotReady =
    "not ready: the model is loading, or the server is draining or out after a device fault";

// The segments of /v2/models/{m}[/versions/{v}][/what]: the model, its version ("" for none)
// and what follows ("" for the metadata).
struct ModelPath {
  std::string name;
  std::string version;
  std::string what;
};

ModelPath model_path(const std::string& path) {
  std::vector<std::string> parts;
  size_t at = 1;
  while (at <= path.size()) {
    const size_t end = std::min(path.find('/', at), path.size());
    parts.push_back(path.substr(at, end - at));
    at = end + 1;
  }
  // parts: v2, models, {m}, [versions, {v},] [what]
  ModelPath out;
  if (parts.size() >= 3) out.name = parts[2];
  size_t next = 3;
  if (parts.size() >= 5 && parts[3] == "versions") {
    out.version = parts[4];
    next = 5;
  }
  if (parts.size() > next) out.what = parts[next];
  return out;
}

Response json_answer(int status, const json& body) {
  Response response = make_response(
      status, body.dump(-1, ' ', false, json::error_handler_t::replace) + "\n", kJsonType);
  response.headers.set("Cache-Control", "no-store");
  return response;
}

// The paths of a model's routes, with and without a version.
std::vector<std::string> model_routes(const std::string& what) {
  const std::string tail = what.empty() ? "" : "/" + what;
  return {"/v2/models/{name}" + tail, "/v2/models/{name}/versions/{version}" + tail};
}

}  // namespace

bool is_inference_path(std::string_view path) { return path == "/v2" || path.starts_with("/v2/"); }

Response inference_error(const Status& status, int64_t retry_after,
                         const std::vector<std::pair<std::string, std::string>>& trailers) {
  Response response = status_response(status, retry_after, trailers);
  response.body = infer_error_body(status.message());
  return response;
}

InferenceRoutes::InferenceRoutes(inference::InferenceEndpoint& endpoint, Metrics& metrics,
                                 InferenceRouteOptions options)
    : endpoint_(endpoint), metrics_(metrics), options_(std::move(options)) {}

void InferenceRoutes::add_to(Router& router) {
  const auto route = [this](auto method) {
    return [this, method](const std::shared_ptr<Exchange>& ex) { guarded(ex, method); };
  };
  router.add("/v2", {"GET"}, route(&InferenceRoutes::server_metadata));
  router.add("/v2/health/live", {"GET"}, [](const std::shared_ptr<Exchange>& ex) {
    ex->respond(json_answer(200, {{"live", true}}));
  });
  router.add("/v2/health/ready", {"GET"}, route(&InferenceRoutes::health_ready));
  router.add("/v2/models/stats", {"GET"}, route(&InferenceRoutes::model_stats));
  router.add("/v2/repository/index", {"POST"}, route(&InferenceRoutes::repository_index));
  for (const std::string& path : model_routes("")) {
    router.add(path, {"GET"}, route(&InferenceRoutes::model_metadata));
  }
  for (const std::string& path : model_routes("ready")) {
    router.add(path, {"GET"}, route(&InferenceRoutes::model_ready));
  }
  for (const std::string& path : model_routes("config")) {
    router.add(path, {"GET"}, route(&InferenceRoutes::model_config));
  }
  for (const std::string& path : model_routes("stats")) {
    router.add(path, {"GET"}, route(&InferenceRoutes::model_stats));
  }
  for (const std::string& path : model_routes("infer")) {
    router.add(path, {"POST"}, route(&InferenceRoutes::infer));
  }
}

template <typename Handler>
void InferenceRoutes::guarded(const std::shared_ptr<Exchange>& ex, Handler handler) {
  const LogContext log_scope({.traceparent = ex->request().headers.value_or("traceparent")});
  Status refused;
  int64_t retry_after = 0;
  try {
    (this->*handler)(ex);
    return;
  } catch (const HttpError& e) {
    refused = Status(e.code, e.what());
    retry_after = e.retry_after_seconds;
  } catch (const Error& e) {
    refused = Status(e);
    if (e.code() == ErrorCode::kUnavailable) retry_after = options_.retry_after_seconds;
  }
  // Counted like the service's answers: a request that ended with this status.
  metrics_.request_finished(std::string(to_string(refused.code())));
  // Refused before the service: the peer's doing, rate-limited as the gateway's refusals are.
  peer_log().report("http", "refused", spdlog::level::info,
                    fmt::format("http {} {}: {}: {}", printable(ex->request().method, 16),
                                printable(ex->request().path, 200),
                                std::string(to_string(refused.code())), refused.message()));
  ex->respond(inference_error(refused, retry_after));
}

void InferenceRoutes::server_metadata(const std::shared_ptr<Exchange>& ex) {
  ex->respond(json_answer(
      200, inference::server_metadata_json(endpoint_.server_version(),
                                           inference::InferenceEndpoint::extensions())));
}

void InferenceRoutes::health_ready(const std::shared_ptr<Exchange>& ex) {
  if (endpoint_.ready()) {
    ex->respond(json_answer(200, {{"ready", true}}));
    return;
  }
  // The protocol's false is a 4xx; the body says why.
  ex->respond(json_answer(400, {{"ready", false}, {"error", kNotReady}}));
}

inference::ModelDescription InferenceRoutes::described(const std::shared_ptr<Exchange>& ex) const {
  const ModelPath p = model_path(ex->request().path);
  return endpoint_.describe_for(ex->request().headers.value_or("Authorization"), p.name, p.version);
}

void InferenceRoutes::model_metadata(const std::shared_ptr<Exchange>& ex) {
  ex->respond(json_answer(200, inference::model_metadata_json(described(ex))));
}

void InferenceRoutes::model_ready(const std::shared_ptr<Exchange>& ex) {
  const ModelPath p = model_path(ex->request().path);
  if (endpoint_.model_ready(p.name, p.version)) {
    ex->respond(json_answer(200, {{"name", p.name}, {"ready", true}}));
    return;
  }
  // Ready, so the model is known: the name or version is not this server's (404 naming it).
  if (endpoint_.ready()) (void)described(ex);
  ex->respond(json_answer(400, {{"name", p.name}, {"ready", false}, {"error", kNotReady}}));
}

void InferenceRoutes::model_config(const std::shared_ptr<Exchange>& ex) {
  ex->respond(json_answer(200, inference::model_config_json(described(ex))));
}

void InferenceRoutes::model_stats(const std::shared_ptr<Exchange>& ex) {
  // /v2/models/stats: every model's (this server's one).
  const auto model = ex->request().path == "/v2/models/stats"
                         ? endpoint_.describe_for(ex->request().headers.value_or("Authorization"))
                         : described(ex);
  ex->respond(json_answer(200, inference::model_statistics_json(model, endpoint_.statistics())));
}

void InferenceRoutes::repository_index(const std::shared_ptr<Exchange>& ex) {
  const auto model = endpoint_.describe_for(ex->request().headers.value_or("Authorization"));
  ex->respond(json_answer(200, inference::repository_index_json(model, endpoint_.ready())));
}

void InferenceRoutes::infer(const std::shared_ptr<Exchange>& ex) {
  const Request& req = ex->request();
  const ModelPath p = model_path(req.path);
  std::optional<std::string> header_length;
  if (const auto h = req.headers.get(kInferenceHeaderLength)) header_length = std::string(*h);
  InferBody body = parse_infer_body(req.body, header_length);
  body.request.model_name = p.name;
  body.request.model_version = p.version;
  CallContext call = call_context_of(req, SteadyClock::now());

  std::shared_ptr<void> slot = options_.take_slot ? options_.take_slot() : nullptr;
  if (options_.take_slot && !slot) {
    throw HttpError(429, ErrorCode::kResourceExhausted,
                    "too many HTTP generate calls in flight (" +
                        std::to_string(options_.max_generating) + "); retry later",
                    options_.retry_after_seconds);
  }
  inference::DoorRules door;
  door.parameters = {"binary_data_output"};
  door.text_outputs = text_outputs(body, {inference::kMesh});
  door.how_to_ask_binary =
      "ask for it as binary data (the output's parameter \"binary_data\": true, or the "
      "request's parameter \"binary_data_output\": true)";
  // What the answer needs of the request (not its inputs: they may be megabytes).
  auto answer_shape = std::make_shared<InferBody>();
  answer_shape->request.outputs = body.request.outputs;
  answer_shape->binary_outputs = body.binary_outputs;
  answer_shape->binary_by_default = body.binary_by_default;

  inference::InferObserver observer;
  const int64_t retry_after = options_.retry_after_seconds;
  observer.done = [ex, answer_shape, retry_after,
                   slot = std::move(slot)](inference::InferOutcome outcome) {
    // Encoded on the connection's I/O thread, not on the service's that delivers it.
    ex->defer([ex, answer_shape, retry_after, outcome = std::move(outcome)] {
      if (!outcome.status.ok()) {
        ex->respond(inference_error(outcome.status, retry_after, outcome.trailers));
        return;
      }
      EncodedAnswer encoded = encode_infer_answer(outcome.answer, *answer_shape);
      Response response;
      response.status = 200;
      response.body = std::move(encoded.body);
      if (encoded.header_length) {
        response.headers.set("Content-Type", kBinaryType);
        response.headers.set(kInferenceHeaderLength, std::to_string(*encoded.header_length));
      } else {
        response.headers.set("Content-Type", kJsonType);
      }
      ex->respond(std::move(response));
    });
  };
  const std::shared_ptr<inference::InferRun> run = endpoint_.infer(
      std::move(body.request), call, std::move(observer), door, wants_fresh_answer(req.headers));
  ex->on_finished([weak = std::weak_ptr<inference::InferRun>(run)](bool delivered) {
    if (delivered) return;
    if (const auto active = weak.lock()) active->cancel(client_went_away());
  });
}

}  // namespace cube3d::http
