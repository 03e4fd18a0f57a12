#include "cube3d/server/httpd/content_coding.h"

#include <zlib.h>

#include <charconv>
#include <limits>
#include <optional>

#include "cube3d/core/error.h"

namespace cube3d::http {
namespace {

// A weight: "q=" then 0, 1, or 0.xxx / 1.000 (RFC 9110 12.4.2); nullopt for anything else.
std::optional<double> weight_of(std::string_view param) {
  const std::string p = lower_trimmed(param);
  if (!p.starts_with("q=")) return std::nullopt;
  const std::string_view number = std::string_view(p).substr(2);
  double q = 0;
  const auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), q);
  if (error != std::errc() || end != number.data() + number.size() || !(q >= 0 && q <= 1)) {
    return std::nullopt;
  }
  return q;
}

bool ends_with_plus(std::string_view type, std::string_view suffix) {
  return type.size() > suffix.size() && type.ends_with(suffix);
}

}  // namespace

AcceptedCodings parse_accept_encoding(const Headers& request_headers) {
  std::optional<double> gzip, identity, any;
  for (const std::string_view field : request_headers.get_all("Accept-Encoding")) {
    std::string_view rest = field;
    while (!rest.empty()) {
      const std::string_view item = take_item(rest, ',');
      const size_t semicolon = item.find(';');
      const std::string coding = lower_trimmed(item.substr(0, semicolon));
      if (coding.empty()) continue;
      double q = 1;
      if (semicolon != std::string_view::npos) {
        const std::optional<double> w = weight_of(item.substr(semicolon + 1));
        if (!w) continue;  // an element we cannot read is not taken as a yes
        q = *w;
      }
      // Of a coding named twice, the first counts (a proxy appends; the client's comes first).
      if ((coding == "gzip" || coding == "x-gzip") && !gzip) gzip = q;
      if (coding == "identity" && !identity) identity = q;
      if (coding == "*" && !any) any = q;
    }
  }
  AcceptedCodings accepted;
  accepted.gzip = gzip ? *gzip : any.value_or(0);
  if (identity || any) {
    accepted.identity_named = true;
    accepted.identity = identity ? *identity : *any;
  }
  return accepted;
}

bool compressible_type(std::string_view content_type) {
  const std::string type = lower_trimmed(content_type.substr(0, content_type.find(';')));
  return type.starts_with("text/") || type == "application/json" || ends_with_plus(type, "+json") ||
         type == "application/javascript" || type == "model/gltf-binary" || type == "model/obj" ||
         type == "application/x-ply" || type == "application/vnd.cube3d.mesh" ||
         type == "image/svg+xml";
}

std::string gzip_compress(std::string_view data, int level) {
  z_stream z{};
  // 15 + 16: a 32 KiB window, with the gzip header and trailer rather than zlib's.
  if (deflateInit2(&z, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    throw internal_error("gzip: deflateInit2 failed");
  }
  std::string out(deflateBound(&z, static_cast<uLong>(data.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int result = deflate(&z, Z_FINISH);
  const size_t written = out.size() - z.avail_out;
  deflateEnd(&z);
  if (result != Z_STREAM_END) throw internal_error("gzip: deflate did not finish");
  out.resize(written);
  return out;
}

std::string gzip_decompress(std::string_view data, size_t max_bytes) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 16) != Z_OK) throw internal_error("gzip: inflateInit2 failed");
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  std::string out;
  char chunk[16384];
  int result = Z_OK;
  while (result != Z_STREAM_END) {
    z.next_out = reinterpret_cast<Bytef*>(chunk);
    z.avail_out = sizeof(chunk);
    result = inflate(&z, Z_NO_FLUSH);
    if (result != Z_OK && result != Z_STREAM_END) break;
    out.append(chunk, sizeof(chunk) - z.avail_out);
    if (out.size() > max_bytes) break;
    if (result == Z_OK && z.avail_in == 0 && z.avail_out != 0) break;  // truncated
  }
  const bool whole = result == Z_STREAM_END && z.avail_in == 0 && out.size() <= max_bytes;
  inflateEnd(&z);
  if (!whole) throw invalid_argument("gzip: not one whole gzip member of at most the limit");
  return out;
}

void apply_gzip(const Headers& request_headers, const GzipOptions& options, Response& response) {
  if (!options.enabled || response.body.empty() || response.headers.has("Content-Encoding") ||
      !compressible_type(response.headers.value_or("Content-Type"))) {
    return;
  }
  // A client that does not take gzip gets the answer exactly as without this (no Vary either: a
  // cache that keeps this identity answer for everyone serves nobody bytes it cannot read).
  const AcceptedCodings accepted = parse_accept_encoding(request_headers);
  if (!accepted.takes_gzip()) return;
  // Compressed or not (the size floor), this answer's form depends on Accept-Encoding.
  if (const auto vary = response.headers.get("Vary")) {
    if (lower_trimmed(*vary) != "*" &&
        lower_trimmed(*vary).find("accept-encoding") == std::string::npos) {
      response.headers.set("Vary", std::string(*vary) + ", Accept-Encoding");
    }
  } else {
    response.headers.set("Vary", "Accept-Encoding");
  }
  const bool must = accepted.refuses_identity();
  if (!must && static_cast<int64_t>(response.body.size()) < options.min_bytes) return;
  std::string compressed = gzip_compress(response.body, options.level);
  if (!must && compressed.size() >= response.body.size()) return;
  response.body = std::move(compressed);
  response.headers.set("Content-Encoding", "gzip");
  if (const auto etag = response.headers.get("ETag"); etag && !etag->starts_with("W/")) {
    response.headers.set("ETag", "W/" + std::string(*etag));
  }
}

}  // namespace cube3d::http
