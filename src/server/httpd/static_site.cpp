#include "cube3d/server/httpd/static_site.h"

#include <string>
#include <utility>

#include "cube3d/core/error.h"
#include "cube3d/core/files.h"
#include "cube3d/core/sha256.h"

namespace cube3d::http {
namespace {

std::string_view extension_of(std::string_view file_name) {
  const size_t slash = file_name.rfind('/');
  const std::string_view base =
      slash == std::string_view::npos ? file_name : file_name.substr(slash + 1);
  const size_t dot = base.rfind('.');
  return dot == std::string_view::npos || dot == 0 ? std::string_view{} : base.substr(dot);
}

std::string_view trimmed(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

// If-None-Match compares weakly (RFC 9110 13.1.2): W/"x" matches "x"; "*" matches any.
bool none_match_hits(std::string_view header, std::string_view etag) {
  while (!header.empty()) {
    std::string_view tag = trimmed(take_item(header, ','));
    if (tag == "*") return true;
    if (tag.starts_with("W/")) tag.remove_prefix(2);
    if (tag == etag) return true;
  }
  return false;
}

}  // namespace

std::string site_media_type(std::string_view file_name) {
  const std::string_view ext = extension_of(file_name);
  if (ext == ".html") return "text/html; charset=utf-8";
  if (ext == ".js") return "text/javascript; charset=utf-8";
  if (ext == ".css") return "text/css; charset=utf-8";
  if (ext == ".json") return "application/json";
  if (ext == ".png") return "image/png";
  if (ext == ".svg") return "image/svg+xml";
  if (ext == ".ico") return "image/x-icon";
  return "";
}

void StaticSite::add(std::string url_path, std::string body, std::string media_type) {
  // (Appended, not "\"" + ...: GCC 12 warns about its own inlined insert there.)
  std::string etag(1, '"');
  etag.append(hex_of(sha256(body)), 0, 32);
  etag.push_back('"');
  files_[std::move(url_path)] = File{std::move(body), std::move(media_type), std::move(etag)};
}

void StaticSite::add_file(std::string url_path, const std::string& file_path, std::string_view what,
                          int64_t max_bytes) {
  std::string media_type = site_media_type(file_path);
  if (media_type.empty()) {
    throw invalid_argument(file_path + " (" + std::string(what) +
                           "): not a file type the playground serves (.html, .js, .css, .json, "
                           ".png, .svg, .ico)");
  }
  add(std::move(url_path), read_file(file_path, what, max_bytes), std::move(media_type));
}

const StaticSite::File* StaticSite::find(std::string_view url_path) const {
  const auto it = files_.find(url_path);
  return it == files_.end() ? nullptr : &it->second;
}

std::vector<std::string> StaticSite::paths() const {
  std::vector<std::string> out;
  out.reserve(files_.size());
  for (const auto& [path, file] : files_) out.push_back(path);
  return out;
}

int64_t StaticSite::total_bytes() const {
  int64_t total = 0;
  for (const auto& [path, file] : files_) total += static_cast<int64_t>(file.body.size());
  return total;
}

void StaticSite::serve(const File& file, const std::shared_ptr<Exchange>& exchange) {
  const bool unchanged =
      none_match_hits(exchange->request().headers.value_or("If-None-Match"), file.etag);
  Response response;
  response.status = unchanged ? 304 : 200;
  if (!unchanged) {
    response.body = file.body;
    response.headers.set("Content-Type", file.media_type);
  }
  response.headers.set("ETag", file.etag);
  // Revalidated on every load (a 304 costs a few bytes), so that a new server build's page is
  // what a browser shows at once.
  response.headers.set("Cache-Control", "no-cache");
  response.headers.set("Content-Security-Policy", std::string(kSiteContentSecurityPolicy));
  response.headers.set("X-Content-Type-Options", "nosniff");
  response.headers.set("X-Frame-Options", "DENY");
  response.headers.set("Referrer-Policy", "no-referrer");
  exchange->respond(std::move(response));
}

}  // namespace cube3d::http
