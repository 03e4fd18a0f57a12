// gzip on HTTP answers (RFC 9110 8.4, 12.5.3): what a client's Accept-Encoding takes, and the
// server's one place that compresses a whole answer (Server::respond calls apply_gzip; a streamed
// answer is never compressed, so that each Server-Sent Event goes out when it is written).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "cube3d/server/httpd/http_message.h"

namespace cube3d::http {

struct GzipOptions {
  bool enabled = true;
  // Bodies smaller than this go out as they are (unless the client refuses identity): gzip's
  // ~20 bytes of framing and its time buy little below a kilobyte.
  int64_t min_bytes = 1024;
  int level = 6;  // zlib's default: within a few per cent of 9's size, several times faster
};

// What Accept-Encoding (every field of it, joined) says: the weights of gzip (or x-gzip, or
// "*") and of identity ("identity", else "*", else 1 when neither is named). Codings compare
// case-insensitively; a q that is not a number in [0, 1] drops its element.
struct AcceptedCodings {
  double gzip = 0;
  double identity = 1;
  bool identity_named = false;  // identity's weight came from the header ("identity" or "*")

  // gzip is acceptable, and not less wanted than an identity the client named.
  bool takes_gzip() const { return gzip > 0 && (!identity_named || gzip >= identity); }
  bool refuses_identity() const { return identity_named && identity == 0; }
};
AcceptedCodings parse_accept_encoding(const Headers& request_headers);

// Whether answers of this Content-Type are worth compressing: JSON, text, JavaScript and the mesh
// files (GLB, OBJ, PLY, compact); not images such as PNG, which are compressed already.
bool compressible_type(std::string_view content_type);

// The gzip member (RFC 1952) of `data`, with zlib.
std::string gzip_compress(std::string_view data, int level = 6);
// The data of a gzip member; invalid_argument for one that does not decode or that holds more
// than max_bytes (tests, and clients of ours).
std::string gzip_decompress(std::string_view data, size_t max_bytes = size_t{1} << 30);

// Compresses `response` for a client that sent `request_headers`, in place, when the options,
// its Content-Type and size and the client's Accept-Encoding say so: Content-Encoding: gzip, the
// body gzipped, a strong ETag made weak (another representation of the same content). Every
// answer of a compressible type with a body gets Vary: Accept-Encoding (added to a Vary it has)
// while gzip is on, compressed or not and whoever asked: its form depends on Accept-Encoding, and
// a shared cache must keep the forms apart (RFC 9110 12.5.5). A response that has a
// Content-Encoding already, or no body, is left alone; so is one that gzip would not make
// smaller, unless the client refuses identity.
void apply_gzip(const Headers& request_headers, const GzipOptions& options, Response& response);

// --- request bodies ------------------------------------------------------------------------------
// A request's Content-Encoding (RFC 9110 8.4): the server undoes gzip (x-gzip) and deflate (zlib,
// RFC 9110's "deflate"; Triton's clients compress requests with either), "identity" is no coding,
// and anything else is refused with 415 (and Accept-Encoding: kRequestCodings) before the body is
// read.
inline constexpr const char* kRequestCodings = "gzip, deflate";

struct BodyCoding {
  enum class Kind { kIdentity, kGzip, kDeflate };
  Kind kind = Kind::kIdentity;
  // Not empty: the value, as sent, of a coding (or a list of more than one) the server does not
  // undo.
  std::string refused;
};
// What a Content-Encoding value says (several fields joined with ", "; empty: identity).
BodyCoding body_coding(std::string_view content_encoding);

// Undoes a body's coding as its bytes arrive, so that its decoded size is bounded as it grows: a
// small body that inflates past `max_bytes` (a "zip bomb") stops at the limit, having cost at
// most that much memory and the time to inflate it.
class BodyDecoder {
 public:
  BodyDecoder(BodyCoding::Kind kind, int64_t max_bytes);
  ~BodyDecoder();
  BodyDecoder(const BodyDecoder&) = delete;
  BodyDecoder& operator=(const BodyDecoder&) = delete;

  // Appends the decoded form of the next bytes to `out`; false (and status() and error() say
  // why: 400 for bytes that are not what the label says, 413 for a decoded size over the limit)
  // when the body must be refused.
  bool feed(std::string_view data, std::string& out);
  // After the last bytes: false (400) when a coded body ended before its stream did. A body
  // with no bytes at all is an empty one, whatever its label.
  bool finish();

  int status() const { return status_; }
  const std::string& error() const { return error_; }

 private:
  bool fail(int status, std::string error);

  struct Stream;
  const BodyCoding::Kind kind_;
  const int64_t max_bytes_;
  std::unique_ptr<Stream> stream_;  // zlib's, for gzip and deflate
  bool started_ = false;            // any byte seen
  bool ended_ = false;              // the coded stream ended (its trailer read)
  int status_ = 0;
  std::string error_;
};

}  // namespace cube3d::http
