// The HTTP front door's settings (the server config's `http:` section is this struct): the I/O
// threads, the deadlines and limits of http_server.h, and CORS. http_listen (the API's address)
// and metrics_listen stay top-level keys.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cube3d {

struct HttpConfig {
  int64_t io_threads = 0;  // 0: one per core
  int64_t header_timeout_ms = 10'000;
  int64_t body_timeout_ms = 60'000;
  int64_t idle_timeout_ms = 60'000;
  int64_t write_timeout_ms = 30'000;
  int64_t max_connections = 10'000;
  int64_t max_connections_per_client = 256;
  int64_t max_request_line_bytes = 8 * 1024;
  int64_t max_header_bytes = 16 * 1024;
  int64_t max_header_count = 100;
  // Origins ("https://studio.example.com") whose pages may call the API; "*" for any; empty: off.
  std::vector<std::string> cors_allowed_origins;
  // The browser playground at GET / (http/playground.h): its files from playground_dir (empty:
  // share/cube3d/playground beside the executable's folder) and three.js from three_js_dir
  // (Debian's libjs-three), read when the server starts.
  bool playground = false;
  std::string playground_dir;
  std::string three_js_dir = "/usr/share/javascript/three";
  // HTTPS on http_listen, with the certificate, key and client certificates of the config's tls:
  // section (gRPC's); metrics_listen stays plain HTTP (scrapers). The handshake counts against
  // header_timeout_ms, like the head that follows it.
  bool tls = false;
  // gzip answers (Content-Encoding: gzip, Vary: Accept-Encoding) for a client that accepts them,
  // when the body is at least gzip_min_bytes (a smaller one gains less than gzip's ~20 bytes of
  // framing and the time); never a streamed answer (Server-Sent Events go out as they come).
  bool gzip = true;
  int64_t gzip_min_bytes = 1024;
  bool operator==(const HttpConfig&) const = default;
};

// Throws invalid_argument naming the http.* key at fault.
void validate_http_config(const HttpConfig& config);

}  // namespace cube3d
