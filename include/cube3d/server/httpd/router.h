// Routes requests to handlers by path and method: an unknown path is 404 naming the paths there
// are, a known path with another method 405 with Allow, GET routes answer HEAD too, OPTIONS is a
// CORS preflight (when CORS is on) or 405, and every answer of a cross-origin request carries its
// CORS headers (cors.h).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/server/httpd/cors.h"
#include "cube3d/server/httpd/http_server.h"

namespace cube3d::http {

class Router {
 public:
  using RouteHandler = std::function<void(const std::shared_ptr<Exchange>&)>;
  // How the router's own refusals are answered (and counted): the front door's error body.
  using Refuse = std::function<void(const std::shared_ptr<Exchange>&, int http_status,
                                    ErrorCode code, const std::string& message, Headers extra)>;

  Router(Cors cors, Refuse refuse);

  // `methods`: "GET" (which serves HEAD too), "POST", ... An unlisted route is left out of the
  // 404's list of paths (the playground's files: the page, not each of its assets, is a path
  // to tell a client about).
  void add(std::string path, std::vector<std::string> methods, RouteHandler handler,
           bool listed = true);
  void handle(const std::shared_ptr<Exchange>& exchange) const;
  // "GET, HEAD" / "POST"; empty for a path there is not.
  std::string allowed_methods(const std::string& path) const;

 private:
  struct Route {
    std::string path;
    std::vector<std::string> methods;
    RouteHandler handler;
    bool listed = true;
  };
  const Route* find(const std::string& path) const;

  Cors cors_;
  Refuse refuse_;
  std::vector<Route> routes_;
};

}  // namespace cube3d::http
