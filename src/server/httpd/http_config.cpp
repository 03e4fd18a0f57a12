#include "cube3d/server/httpd/http_config.h"

#include <string>

#include "cube3d/core/error.h"

namespace cube3d {

void validate_http_config(const HttpConfig& c) {
  constexpr int64_t kDay = int64_t{24} * 3600 * 1000;
  require_in_range("http.io_threads", c.io_threads, 0, 256);
  require_in_range("http.header_timeout_ms", c.header_timeout_ms, 100, kDay);
  require_in_range("http.body_timeout_ms", c.body_timeout_ms, 100, kDay);
  require_in_range("http.idle_timeout_ms", c.idle_timeout_ms, 100, kDay);
  require_in_range("http.write_timeout_ms", c.write_timeout_ms, 100, kDay);
  require_in_range("http.max_connections", c.max_connections, 1, 1'000'000);
  require_in_range("http.max_connections_per_client", c.max_connections_per_client, 1, 1'000'000);
  require_in_range("http.max_request_line_bytes", c.max_request_line_bytes, 256, 1 << 20);
  require_in_range("http.max_header_bytes", c.max_header_bytes, 1024, 1 << 20);
  require_in_range("http.max_header_count", c.max_header_count, 8, 10'000);
  require_in_range("http.gzip_min_bytes", c.gzip_min_bytes, 0, int64_t{1} << 30);
  if (c.max_request_line_bytes > c.max_header_bytes) {
    throw invalid_argument(
        "http.max_request_line_bytes (" + std::to_string(c.max_request_line_bytes) +
        ") must not exceed http.max_header_bytes (" + std::to_string(c.max_header_bytes) +
        "): the request line is part of "
        "the head");
  }
  for (const std::string& origin : c.cors_allowed_origins) {
    if (origin == "*") continue;
    // An origin is scheme://host[:port], exactly as a browser sends it: no path, no slash at
    // the end (which would never match).
    const size_t scheme = origin.find("://");
    if (scheme == std::string::npos || scheme == 0 || origin.size() == scheme + 3 ||
        origin.find('/', scheme + 3) != std::string::npos ||
        origin.find_first_of(" \t\r\n,") != std::string::npos) {
      throw invalid_argument("http.cors_allowed_origins: '" + origin +
                             "' is not an origin (scheme://host[:port], no path) or '*'");
    }
  }
}

}  // namespace cube3d
