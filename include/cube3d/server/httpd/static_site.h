// A small set of files served from memory: the browser playground's page, script and style,
// and the three.js files it uses. Read once when the server starts (a missing or oversized file
// stops the start, naming it), so that serving one never touches the disk, follows a link or
// walks a path from the request: only the exact paths added are served, with the media type
// the site decides (never sniffed), a strong ETag (304 on If-None-Match), and the headers that
// keep a page of ours from being framed, sniffed or made to load scripts from elsewhere.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cube3d/server/httpd/http_message.h"
#include "cube3d/server/httpd/http_server.h"

namespace cube3d::http {

// What every answer of the site carries: scripts, styles and fetches from this origin only, no
// inline script or style, no framing, no plugins; images also from data: and blob: URLs (the
// page's thumbnails and downloads).
inline constexpr std::string_view kSiteContentSecurityPolicy =
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
    "form-action 'self'";

// The media type of a file name's extension (".js" -> "text/javascript; charset=utf-8"), or
// empty for an extension the site does not serve.
std::string site_media_type(std::string_view file_name);

class StaticSite {
 public:
  struct File {
    std::string body;
    std::string media_type;
    std::string etag;  // "\"<first 32 hex digits of the body's SHA-256>\""
  };

  // Serves `body` at `url_path` ("/", "/playground/app.js"); replaces an earlier file there.
  void add(std::string url_path, std::string body, std::string media_type);
  // Reads the file at `file_path` (at most `max_bytes`; else invalid_argument naming it and
  // `what`) and serves it at `url_path`, typed by its extension (invalid_argument for one the
  // site does not serve).
  void add_file(std::string url_path, const std::string& file_path, std::string_view what,
                int64_t max_bytes = kMaxFileBytes);

  const File* find(std::string_view url_path) const;
  std::vector<std::string> paths() const;
  int64_t total_bytes() const;

  // Answers GET or HEAD of `file` (the request's If-None-Match decides 200 or 304).
  static void serve(const File& file, const std::shared_ptr<Exchange>& exchange);

  static constexpr int64_t kMaxFileBytes = 8 << 20;  // three.min.js is ~600 KB

 private:
  std::map<std::string, File, std::less<>> files_;
};

}  // namespace cube3d::http
