#include "cube3d/server/httpd/request_reader.h"

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <utility>

#include "cube3d/server/httpd/content_coding.h"

namespace cube3d::http {
namespace beast_http = boost::beast::http;

// (A named namespace: the parser below, a member of RequestReader::Parser, has it in its type.)
namespace request_body {

// A request body with its Content-Encoding undone as it arrives (content_coding.h BodyDecoder):
// the parser's own body_limit bounds the bytes on the wire, the decoder the bytes they decode to.
struct DecodedBody {
  struct value_type {
    std::string data;
    int64_t max_bytes = 0;
    int status = 0;  // a refusal of the body: 400 (not what its label says) or 413
    std::string message;
  };

  class reader {
   public:
    // Made with the parser, before any field is read: the head is looked at in init().
    template <bool isRequest, class Fields>
    reader(beast_http::header<isRequest, Fields>& head, value_type& body)
        : body_(body), coding_of_head_([&head] { return content_encoding(head); }) {}

    void init(const boost::optional<std::uint64_t>&, boost::beast::error_code& ec) {
      ec = {};
      const BodyCoding coding = coding_of_head_();
      // A coding the server does not undo was refused with the head (415); never read here.
      decoder_.emplace(coding.refused.empty() ? coding.kind : BodyCoding::Kind::kIdentity,
                       body_.max_bytes);
    }

    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, boost::beast::error_code& ec) {
      ec = {};
      std::size_t taken = 0;
      for (auto it = boost::asio::buffer_sequence_begin(buffers);
           it != boost::asio::buffer_sequence_end(buffers); ++it) {
        const boost::asio::const_buffer b = *it;
        taken += b.size();
        if (!decoder_->feed({static_cast<const char*>(b.data()), b.size()}, body_.data)) {
          return refuse(ec);
        }
      }
      return taken;
    }

    void finish(boost::beast::error_code& ec) {
      ec = {};
      if (decoder_ && !decoder_->finish()) refuse(ec);
    }

   private:
    template <class Fields>
    static BodyCoding content_encoding(const Fields& fields) {
      std::string joined;
      for (const auto& field : fields) {
        if (field.name() != beast_http::field::content_encoding) continue;
        if (!joined.empty()) joined += ", ";
        joined.append(field.value().data(), field.value().size());
      }
      return body_coding(joined);
    }

    std::size_t refuse(boost::beast::error_code& ec) {
      body_.status = decoder_->status();
      body_.message = decoder_->error();
      ec = beast_http::error::bad_chunk;  // any error: the reader reads body_.status first
      return 0;
    }

    value_type& body_;
    const std::function<BodyCoding()> coding_of_head_;
    std::optional<BodyDecoder> decoder_;
  };
};

}  // namespace request_body

struct RequestReader::Parser {
  beast_http::request_parser<request_body::DecodedBody> parser;
};

namespace {

std::string_view view(boost::beast::string_view s) { return {s.data(), s.size()}; }

// Whether a request line that Beast calls a bad version is well formed but for HTTP/2 or later
// (505), rather than malformed (400): "METHOD SP TARGET SP HTTP/<digit>.<digit>" with another
// major version.
bool names_another_http_version(std::string_view data) {
  const size_t end = data.find("\r\n");
  if (end == std::string_view::npos) return false;
  const std::string_view line = data.substr(0, end);
  const size_t space = line.rfind(' ');
  if (space == std::string_view::npos || line.find(' ') == space) return false;
  const std::string_view version = line.substr(space + 1);
  return version.size() == 8 && version.substr(0, 5) == "HTTP/" && version[5] >= '2' &&
         version[5] <= '9' && version[6] == '.' && version[7] >= '0' && version[7] <= '9';
}

}  // namespace

RequestReader::RequestReader(RequestLimits limits) : limits_(limits) { reset(); }

RequestReader::~RequestReader() = default;

void RequestReader::reset() {
  parser_ = std::make_unique<Parser>();
  auto& p = parser_->parser;
  p.eager(true);
  p.header_limit(static_cast<std::uint32_t>(std::clamp<int64_t>(
      limits_.max_header_bytes, 64, std::numeric_limits<std::uint32_t>::max())));
  p.body_limit(static_cast<std::uint64_t>(std::max<int64_t>(0, limits_.max_body_bytes)));
  p.get().body().max_bytes = limits_.max_body_bytes;
  started_ = false;
  head_reported_ = false;
  head_fields_ = 0;
  head_scanned_ = 0;
  head_consumed_ = 0;
  waiting_for_more_than_ = 0;
  request_line_seen_ = false;
}

bool RequestReader::head_done() const { return parser_->parser.is_header_done(); }

bool RequestReader::complete() const { return head_reported_ && parser_->parser.is_done(); }

RequestReader::Result RequestReader::fail(int status, std::string message) {
  failed_ = true;
  Result r;
  r.kind = Result::Kind::kError;
  r.status = status;
  r.message = std::move(message);
  return r;
}

bool RequestReader::expects_continue() const {
  const auto& request = parser_->parser.get();
  if (request.version() < 11) return false;
  const auto expect = request.find(beast_http::field::expect);
  return expect != request.end() && lower_trimmed(view(expect->value())) == "100-continue";
}

unsigned RequestReader::version() const { return parser_->parser.get().version(); }

RequestReader::Result RequestReader::read(std::string_view data) {
  if (failed_) return fail(400, "the connection already had a malformed request");
  const std::string_view data_start = data;
  Result result;
  auto& p = parser_->parser;
  if (!p.is_header_done()) {
    // RFC 9112 2.2: a server ignores at least one empty line before a request line (some
    // clients send CRLF after a POST body).
    if (!started_) {
      size_t skipped = 0;
      while (skipped < 4 && data.substr(skipped, 2) == "\r\n") skipped += 2;
      if (skipped > 0) {
        result.consumed = skipped;
        data.remove_prefix(skipped);
        if (data.empty()) return result;
      }
    }
    if (!data.empty()) started_ = true;
    // The parser takes a head's complete lines as it goes (the request line, then whole field
    // lines), so `data` starts `head_consumed_` bytes into the head. Only the bytes not looked
    // at before are scanned (three back, for a CRLF split over reads), so that a head dripped
    // in a byte at a time costs each byte one look.
    const size_t seen = head_scanned_ > head_consumed_ ? head_scanned_ - head_consumed_ : 0;
    const size_t from = seen >= 3 ? seen - 3 : 0;
    const size_t end = data.find("\r\n\r\n", from);
    const size_t head_size = end == std::string_view::npos ? data.size() : end + 4;
    // The request line: 414 rather than a generic "header too large" when it is what is long.
    // (The parser takes it only once it is complete, which this saw first.)
    const auto max_line = static_cast<size_t>(limits_.max_request_line_bytes);
    if (!request_line_seen_) {
      const size_t line_end = data.find("\r\n", from);
      if ((line_end == std::string_view::npos && data.size() > max_line) ||
          (line_end != std::string_view::npos && line_end > max_line)) {
        return fail(414, "the request line is over the server's " + std::to_string(max_line) +
                             "-byte limit (http.max_request_line_bytes)");
      }
      request_line_seen_ = line_end != std::string_view::npos;
    }
    // Obsolete line folding (a field line that starts with a space or tab): Beast would join
    // it to the line before; another parser on the way might not. RFC 9112 5.2 lets a server
    // refuse it, and so we do. What the parser took ends with a line's CRLF.
    const std::string_view fresh = data.substr(from, head_size - from);
    if (fresh.find("\r\n ") != std::string_view::npos ||
        fresh.find("\r\n\t") != std::string_view::npos ||
        (head_consumed_ > 0 && from == 0 && !data.empty() && (data[0] == ' ' || data[0] == '\t'))) {
      return fail(400,
                  "obsolete line folding in the request head (a field line starting with "
                  "a space or tab) is not accepted");
    }
    head_scanned_ = head_consumed_ + head_size;
  }
  boost::beast::error_code ec;
  // Beast's contract: after need_more, the parser is called again only with more bytes than it
  // was left with (it resumes assuming so: a chunk header it has begun, say).
  // And in a chunked body it takes no fewer than 5 bytes at a time: Beast 1.74 asserts that a
  // last chunk it has begun ("0\r\n") comes back with at least 5 bytes (harmless where asserts
  // are off, but not relied on). Fewer can never end the body, whose end is "0\r\n\r\n".
  const size_t least = p.is_header_done() && p.chunked() ? 5 : 1;
  while (data.size() >= least && !p.is_done() && data.size() > waiting_for_more_than_) {
    waiting_for_more_than_ = 0;
    const bool in_head = !p.is_header_done();
    const size_t n = p.put(boost::asio::buffer(data.data(), data.size()), ec);
    result.consumed += n;
    data.remove_prefix(n);
    if (in_head && !p.is_header_done()) head_consumed_ += n;
    if (ec == beast_http::error::need_more) {
      ec = {};
      waiting_for_more_than_ = data.size();
      // A head that outgrows the limit without completing (a safety net: the parser says
      // header_limit itself once it holds that many bytes).
      if (!p.is_header_done() &&
          head_consumed_ + data.size() >= static_cast<size_t>(limits_.max_header_bytes)) {
        return fail(431, "the request head is over the server's " +
                             std::to_string(limits_.max_header_bytes) +
                             "-byte limit (http.max_header_bytes)");
      }
      break;
    }
    if (ec || n == 0) break;
    if (p.is_header_done() && !head_reported_) break;  // report the head before the body
  }
  if (ec && p.get().body().status != 0) {
    return fail(p.get().body().status, p.get().body().message);
  }
  if (ec) {
    if (ec == beast_http::error::header_limit) {
      return fail(431, "the request head is over the server's " +
                           std::to_string(limits_.max_header_bytes) +
                           "-byte limit (http.max_header_bytes)");
    }
    if (ec == beast_http::error::body_limit) {
      return fail(413, "the request body is over the server's " +
                           std::to_string(limits_.max_body_bytes) +
                           "-byte limit (limits.max_message_bytes)");
    }
    if (ec == beast_http::error::bad_version && names_another_http_version(data_start)) {
      return fail(505, "only HTTP/1.0 and HTTP/1.1 are served here");
    }
    if (ec == beast_http::error::bad_transfer_encoding ||
        ec == beast_http::error::bad_content_length) {
      return fail(400, "malformed HTTP request: " + ec.message() +
                           " (Content-Length and Transfer-Encoding may not be combined or "
                           "repeated)");
    }
    return fail(400, "malformed HTTP request: " + ec.message());
  }
  if (p.is_header_done() && !head_reported_) {
    head_reported_ = true;
    Result head = check_head();
    if (head.kind == Result::Kind::kError) return head;
    result.kind = Result::Kind::kHead;
    return result;
  }
  if (p.is_done()) result.kind = Result::Kind::kRequest;
  return result;
}

RequestReader::Result RequestReader::check_head() {
  const auto& request = parser_->parser.get();
  int64_t fields = 0;
  for (auto it = request.begin(); it != request.end(); ++it) ++fields;
  head_fields_ = fields;
  if (fields > limits_.max_header_count) {
    return fail(431, "the request has " + std::to_string(fields) +
                         " header fields, over the "
                         "server's limit of " +
                         std::to_string(limits_.max_header_count) + " (http.max_header_count)");
  }
  if (request.count(beast_http::field::content_length) > 1) {
    return fail(400, "Content-Length is given more than once");
  }
  if (const auto length = request.find(beast_http::field::content_length);
      length != request.end()) {
    // Digits only: Beast reads "1, 1" as 1, another parser on the way may not.
    const std::string_view value = view(length->value());
    if (value.empty() || value.find_first_not_of("0123456789") != std::string_view::npos) {
      return fail(400, "Content-Length '" + std::string(value) + "' is not a number of bytes");
    }
  }
  const size_t codings = request.count(beast_http::field::transfer_encoding);
  if (codings > 0) {
    if (request.version() < 11) {
      return fail(400, "Transfer-Encoding is not allowed in an HTTP/1.0 request");
    }
    if (request.count(beast_http::field::content_length) > 0) {
      return fail(400, "malformed HTTP request: both Content-Length and Transfer-Encoding");
    }
    const std::string coding =
        codings == 1 ? lower_trimmed(view(request[beast_http::field::transfer_encoding])) : "";
    if (coding != "chunked") {
      return fail(501, "Transfer-Encoding '" +
                           std::string(view(request[beast_http::field::transfer_encoding])) +
                           "' is not supported: send the body as it is or chunked");
    }
  }
  if (request.version() >= 11 && request.count(beast_http::field::host) != 1) {
    return fail(400, "an HTTP/1.1 request needs exactly one Host header field");
  }
  if (const auto length = parser_->parser.content_length();
      length && *length > static_cast<uint64_t>(limits_.max_body_bytes)) {
    return fail(413, "the request body is over the server's " +
                         std::to_string(limits_.max_body_bytes) +
                         "-byte limit (limits.max_message_bytes)");
  }
  const auto expect = request.find(beast_http::field::expect);
  if (expect != request.end() && lower_trimmed(view(expect->value())) != "100-continue") {
    return fail(417, "Expect: '" + std::string(view(expect->value())) +
                         "' cannot be met (only 100-continue)");
  }
  // A body coded in a way the server does not undo: refused before it is read (RFC 9110
  // 15.5.16), the codings it takes in the answer's Accept-Encoding (the connection adds it).
  std::string content_codings;
  for (const auto& field : request) {
    if (field.name() != beast_http::field::content_encoding) continue;
    if (!content_codings.empty()) content_codings += ", ";
    content_codings += view(field.value());
  }
  if (const BodyCoding coding = body_coding(content_codings); !coding.refused.empty()) {
    return fail(415, "Content-Encoding '" + coding.refused +
                         "' is not supported: send the body as it is (identity), or coded with "
                         "one of " +
                         kRequestCodings);
  }
  Result ok;
  return ok;
}

Request RequestReader::take_request() {
  auto message = parser_->parser.release();
  Request request;
  request.method = std::string(view(message.method_string()));
  request.target = std::string(view(message.target()));
  request.version = message.version();
  int64_t kept = 0;
  for (const auto& field : message) {
    if (kept++ == head_fields_) break;  // the rest are trailer fields: dropped
    request.headers.add(std::string(view(field.name_string())), std::string(view(field.value())));
  }
  request.body = std::move(message.body().data);
  reset();
  return request;
}

}  // namespace cube3d::http
