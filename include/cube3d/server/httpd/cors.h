// Cross-origin requests (http.cors_allowed_origins), so that a browser page served from another
// origin can call the API: preflight OPTIONS requests are answered, and answers to a request from
// an allowed origin say so (Access-Control-Allow-Origin, Vary: Origin) and expose the headers the
// API defines. Off with no origins; "*" allows every origin.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cube3d/server/httpd/http_message.h"

namespace cube3d::http {

class Cors {
 public:
  explicit Cors(std::vector<std::string> allowed_origins);

  bool enabled() const { return !allowed_.empty(); }
  // What Access-Control-Allow-Origin says to this request: "*" or its Origin; none when the
  // request has no Origin or it is not allowed.
  std::optional<std::string> allowed_origin(const Request& request) const;
  // OPTIONS with Origin and Access-Control-Request-Method.
  static bool is_preflight(const Request& request);
  // The answer to a preflight from an allowed origin, for a path that takes `methods`
  // ("POST", "GET, HEAD"): 204 with the methods, the request headers the API reads and a
  // max-age.
  Response preflight(const Request& request, const std::string& methods) const;
  // Adds the answer's CORS headers when the request is from an allowed origin.
  void decorate(const Request& request, Headers& headers) const;

 private:
  std::vector<std::string> allowed_;
  bool any_ = false;
};

}  // namespace cube3d::http
