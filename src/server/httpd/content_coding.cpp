#include "cube3d/server/httpd/content_coding.h"

#include <zlib.h>

#include <charconv>
#include <limits>
#include <optional>
#include <vector>

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
  // Every answer that another client could get gzipped says so, whether this one is or not:
  // without Vary on the identity form, a shared cache that stored it would serve it for every
  // request of the URL, and one that stored a gzip form (under its own Vary) could still be
  // told by the identity form's absence of Vary that the resource never varies.
  if (const auto vary = response.headers.get("Vary")) {
    if (lower_trimmed(*vary) != "*" &&
        lower_trimmed(*vary).find("accept-encoding") == std::string::npos) {
      response.headers.set("Vary", std::string(*vary) + ", Accept-Encoding");
    }
  } else {
    response.headers.set("Vary", "Accept-Encoding");
  }
  const AcceptedCodings accepted = parse_accept_encoding(request_headers);
  if (!accepted.takes_gzip()) return;
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

// --- request bodies ------------------------------------------------------------------------------

BodyCoding body_coding(std::string_view content_encoding) {
  std::vector<std::string> codings;
  std::string_view rest = content_encoding;
  while (!rest.empty()) {
    const std::string coding = lower_trimmed(take_item(rest, ','));
    if (!coding.empty() && coding != "identity") codings.push_back(coding);
  }
  BodyCoding out;
  if (codings.empty()) return out;
  if (codings.size() == 1 && (codings[0] == "gzip" || codings[0] == "x-gzip")) {
    out.kind = BodyCoding::Kind::kGzip;
  } else if (codings.size() == 1 && codings[0] == "deflate") {
    out.kind = BodyCoding::Kind::kDeflate;
  } else {
    out.refused = lower_trimmed(content_encoding);
  }
  return out;
}

struct BodyDecoder::Stream {
  z_stream z{};
  bool open = false;
  ~Stream() {
    if (open) inflateEnd(&z);
  }
};

BodyDecoder::BodyDecoder(BodyCoding::Kind kind, int64_t max_bytes)
    : kind_(kind), max_bytes_(max_bytes) {
  if (kind_ == BodyCoding::Kind::kIdentity) return;
  stream_ = std::make_unique<Stream>();
  // gzip: the gzip wrapper (15 + 16); deflate: RFC 9110's, the zlib wrapper (15). Either one
  // alone: a body labelled gzip that holds zlib data (or the reverse) is not what it says.
  const int window = kind_ == BodyCoding::Kind::kGzip ? 15 + 16 : 15;
  if (inflateInit2(&stream_->z, window) != Z_OK) throw internal_error("inflateInit2 failed");
  stream_->open = true;
}

BodyDecoder::~BodyDecoder() = default;

bool BodyDecoder::fail(int status, std::string error) {
  status_ = status;
  error_ = std::move(error);
  return false;
}

bool BodyDecoder::feed(std::string_view data, std::string& out) {
  if (status_ != 0) return false;
  if (data.empty()) return true;
  started_ = true;
  const auto over = [this](size_t size) { return static_cast<int64_t>(size) > max_bytes_; };
  const std::string limit = std::to_string(max_bytes_) + "-byte limit (limits.max_message_bytes)";
  if (kind_ == BodyCoding::Kind::kIdentity) {
    out.append(data);
    if (over(out.size())) return fail(413, "the request body is over the server's " + limit);
    return true;
  }
  const char* name = kind_ == BodyCoding::Kind::kGzip ? "gzip" : "deflate";
  z_stream& z = stream_->z;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  char chunk[16384];
  while (z.avail_in > 0) {
    if (ended_) {
      // Another gzip member may follow one (RFC 1952 2.2, what `cat a.gz b.gz` makes); after a
      // zlib stream nothing may.
      if (kind_ != BodyCoding::Kind::kGzip) {
        return fail(400, std::string("the request body has bytes after its ") + name +
                             " stream ends (Content-Encoding: " + name + ")");
      }
      inflateReset(&z);
      ended_ = false;
    }
    z.next_out = reinterpret_cast<Bytef*>(chunk);
    z.avail_out = sizeof(chunk);
    const int result = inflate(&z, Z_NO_FLUSH);
    if (result != Z_OK && result != Z_STREAM_END && result != Z_BUF_ERROR) {
      return fail(400, std::string("the request body is not ") + name +
                           " data, though Content-Encoding says " + name + " (" +
                           (z.msg != nullptr ? z.msg : "zlib error " + std::to_string(result)) +
                           ")");
    }
    out.append(chunk, sizeof(chunk) - z.avail_out);
    // Checked as it grows: a bomb stops here, one chunk past the limit.
    if (over(out.size())) {
      return fail(413, std::string("the request body, ") + name +
                           "-decoded, is over the server's " + limit);
    }
    if (result == Z_STREAM_END) ended_ = true;
    if (result == Z_BUF_ERROR && z.avail_out == sizeof(chunk)) break;  // no progress: needs more
  }
  return true;
}

bool BodyDecoder::finish() {
  if (status_ != 0) return false;
  if (kind_ == BodyCoding::Kind::kIdentity || !started_ || ended_) return true;
  const char* name = kind_ == BodyCoding::Kind::kGzip ? "gzip" : "deflate";
  return fail(400, std::string("the request body ends before its ") + name +
                       " stream does (Content-Encoding: " + name + "): truncated, or not " + name);
}

}  // namespace cube3d::http
