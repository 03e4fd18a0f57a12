#include "cube3d/server/httpd/router.h"

#include <algorithm>
#include <string_view>
#include <utility>

#include "cube3d/core/printable.h"

namespace cube3d::http {
namespace {

// An exchange whose answers get the request's CORS headers.
class CorsExchange final : public Exchange {
 public:
  CorsExchange(std::shared_ptr<Exchange> inner, const Cors& cors)
      : inner_(std::move(inner)), cors_(cors) {}
  const Request& request() const override { return inner_->request(); }
  void respond(Response response) override {
    cors_.decorate(request(), response.headers);
    inner_->respond(std::move(response));
  }
  void start_stream(Response head, StreamOptions options) override {
    cors_.decorate(request(), head.headers);
    inner_->start_stream(std::move(head), std::move(options));
  }
  void write(std::string chunk) override { inner_->write(std::move(chunk)); }
  void end_stream() override { inner_->end_stream(); }
  void defer(std::function<void()> task) override { inner_->defer(std::move(task)); }
  void on_finished(std::function<void(bool delivered)> callback) override {
    inner_->on_finished(std::move(callback));
  }

 private:
  const std::shared_ptr<Exchange> inner_;
  const Cors& cors_;  // the router's, which outlives its exchanges (the server stops first)
};

bool serves(const std::vector<std::string>& methods, const std::string& method) {
  for (const auto& m : methods) {
    if (m == method || (m == "GET" && method == "HEAD")) return true;
  }
  return false;
}

}  // namespace

Router::Router(Cors cors, Refuse refuse) : cors_(std::move(cors)), refuse_(std::move(refuse)) {}

void Router::add(std::string path, std::vector<std::string> methods, RouteHandler handler,
                 bool listed) {
  routes_.push_back({std::move(path), std::move(methods), std::move(handler), listed});
}

namespace {

// A route's path matches segment by segment; a `{name}` segment matches any one non-empty
// segment ("/v1/jobs/{id}" matches "/v1/jobs/ab12" but not "/v1/jobs/" or "/v1/jobs/a/b").
bool path_matches(std::string_view pattern, std::string_view path) {
  while (!pattern.empty() && !path.empty()) {
    const size_t p_end = std::min(pattern.find('/', 1), pattern.size());
    const size_t q_end = std::min(path.find('/', 1), path.size());
    const std::string_view p = pattern.substr(0, p_end);
    const std::string_view q = path.substr(0, q_end);
    const bool variable = p.size() > 2 && p[1] == '{' && p.back() == '}';
    if (variable ? q.size() < 2 : p != q) return false;
    pattern.remove_prefix(p_end);
    path.remove_prefix(q_end);
  }
  return pattern.empty() && path.empty();
}

}  // namespace

const Router::Route* Router::find(const std::string& path) const {
  for (const auto& route : routes_) {
    if (route.path == path) return &route;
  }
  for (const auto& route : routes_) {
    if (route.path.find('{') != std::string::npos && path_matches(route.path, path)) return &route;
  }
  return nullptr;
}

std::string Router::allowed_methods(const std::string& path) const {
  const Route* route = find(path);
  if (!route) return "";
  std::string allowed;
  for (const auto& m : route->methods) {
    if (!allowed.empty()) allowed += ", ";
    allowed += m;
    if (m == "GET") allowed += ", HEAD";
  }
  return allowed;
}

void Router::handle(const std::shared_ptr<Exchange>& raw) const {
  const std::shared_ptr<Exchange> exchange =
      cors_.enabled() ? std::make_shared<CorsExchange>(raw, cors_) : raw;
  const Request& request = exchange->request();
  const Route* route = find(request.path);
  if (!route) {
    std::string paths;
    for (const auto& r : routes_) {
      if (!r.listed) continue;
      if (!paths.empty()) paths += ", ";
      paths += r.methods.front() + " " + r.path;
    }
    return refuse_(exchange, 404, ErrorCode::kNotFound,
                   "no such path: " + printable(request.path, 200) + " (" + paths + ")", {});
  }
  if (request.method == "OPTIONS" && cors_.enabled() && Cors::is_preflight(request)) {
    if (!cors_.allowed_origin(request)) {
      return refuse_(exchange, 403, ErrorCode::kPermissionDenied,
                     "origin " + printable(request.headers.value_or("Origin"), 200) +
                         " is not allowed (http.cors_allowed_origins)",
                     {});
    }
    return exchange->respond(cors_.preflight(request, allowed_methods(route->path)));
  }
  if (!serves(route->methods, request.method)) {
    const std::string allowed = allowed_methods(route->path);
    Headers extra;
    extra.set("Allow", allowed);
    return refuse_(exchange, 405, ErrorCode::kUnimplemented,
                   printable(request.method, 32) + " is not allowed on " + route->path +
                       " (allowed: " + allowed + ")",
                   std::move(extra));
  }
  route->handler(exchange);
}

}  // namespace cube3d::http
