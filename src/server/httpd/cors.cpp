#include "cube3d/server/httpd/cors.h"

#include <algorithm>

namespace cube3d::http {
namespace {

// What the API reads from a request, and what a page may read from an answer.
constexpr const char* kAllowedRequestHeaders =
    "Authorization, Content-Type, Accept, X-Request-Id, X-Request-Timeout-Ms, X-End-User-Id, "
    "traceparent";
constexpr const char* kExposedHeaders =
    "X-Request-Id, Server-Timing, X-Vertex-Count, X-Face-Count, X-Batch-Bucket, "
    "X-Occupancy-Points, X-Warning, Retry-After, Location, Content-Disposition, X-Mesh-Bounds, "
    "X-Up-Axis";
constexpr const char* kMaxAgeSeconds = "600";

}  // namespace

Cors::Cors(std::vector<std::string> allowed_origins) : allowed_(std::move(allowed_origins)) {
  any_ = std::find(allowed_.begin(), allowed_.end(), "*") != allowed_.end();
}

std::optional<std::string> Cors::allowed_origin(const Request& request) const {
  if (!enabled()) return std::nullopt;
  const auto origin = request.headers.get("Origin");
  if (!origin) return std::nullopt;
  if (any_) return std::string("*");
  // Origins compare exactly (scheme, host and port, as the browser serializes them).
  for (const auto& allowed : allowed_) {
    if (allowed == *origin) return allowed;
  }
  return std::nullopt;
}

bool Cors::is_preflight(const Request& request) {
  return request.method == "OPTIONS" && request.headers.has("Origin") &&
         request.headers.has("Access-Control-Request-Method");
}

Response Cors::preflight(const Request& request, const std::string& methods) const {
  Response response;
  response.status = 204;
  decorate(request, response.headers);
  response.headers.set("Access-Control-Allow-Methods", methods);
  response.headers.set("Access-Control-Allow-Headers", kAllowedRequestHeaders);
  response.headers.set("Access-Control-Max-Age", kMaxAgeSeconds);
  return response;
}

void Cors::decorate(const Request& request, Headers& headers) const {
  if (!enabled()) return;
  // The answer depends on Origin whenever CORS is on (a cache must not serve one origin's
  // answer to another).
  if (!any_) headers.set("Vary", "Origin");
  const std::optional<std::string> origin = allowed_origin(request);
  if (!origin) return;
  headers.set("Access-Control-Allow-Origin", *origin);
  headers.set("Access-Control-Expose-Headers", kExposedHeaders);
}

}  // namespace cube3d::http
