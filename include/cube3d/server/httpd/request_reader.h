// Reads HTTP/1.x requests out of a connection's bytes: Boost.Beast's parser (request line,
// fields, Content-Length and chunked bodies, the refusal of Content-Length beside
// Transfer-Encoding) plus the checks a server on the open internet needs that the parser leaves
// to its user: limits on the request line (414), the head's bytes and its field count (431),
// the body (413); obsolete line folding, a repeated Content-Length, a transfer coding other than
// chunked, HTTP/1.1 without exactly one Host, and control bytes anywhere in the head refused
// (400: the usual ways to make two parsers disagree about where a request ends). A body's
// Content-Encoding is undone as the body arrives (gzip, deflate: content_coding.h BodyDecoder),
// the body limit applying to the decoded bytes too (413); another coding is refused with the
// head (415), and a body that is not what its label says is 400. Socket-free: the connection
// feeds it bytes; the unit tests and the fuzzer feed it everything else.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "cube3d/server/httpd/http_message.h"

namespace cube3d::http {

struct RequestLimits {
  int64_t max_request_line_bytes = 8 * 1024;   // 414 beyond
  int64_t max_header_bytes = 16 * 1024;        // the whole head, request line included; 431
  int64_t max_header_count = 100;              // 431
  int64_t max_body_bytes = int64_t{64} << 20;  // 413
};

class RequestReader {
 public:
  explicit RequestReader(RequestLimits limits);
  ~RequestReader();
  RequestReader(const RequestReader&) = delete;
  RequestReader& operator=(const RequestReader&) = delete;

  struct Result {
    enum class Kind {
      kNeedMore,  // every byte given was taken (or none can be yet): read more
      kHead,      // the head just completed (once per request): see expects_continue()
      kRequest,   // a whole request: take_request()
      kError,     // the request is refused with `status`; the connection must close after
    };
    Kind kind = Kind::kNeedMore;
    size_t consumed = 0;  // bytes of the input taken; the rest is for the next call
    int status = 0;       // kError: 400, 413, 414, 415, 417, 431, 501, 505
    std::string message;  // kError: what was wrong, for the error body
  };

  // Feeds bytes (all the connection has buffered and not yet consumed). Call again with the
  // unconsumed rest after kHead and kRequest; after kError the reader is spent.
  Result read(std::string_view data);

  // Whether any byte of the current request has been taken (a connection that closes in the
  // middle of a request, or times out in it, is not an idle one).
  bool started() const { return started_; }
  // Whether the current request's head is complete (its body, if any, follows).
  bool head_done() const;
  // Whether the current request is complete after its head was reported: the next read(),
  // with no more bytes, returns kRequest.
  bool complete() const;
  // After kHead: the client waits for "100 Continue" before it sends its body.
  bool expects_continue() const;
  // After kHead: the protocol version (10 or 11).
  unsigned version() const;

  // After kRequest: the request (without remote address; its body decoded, its
  // Content-Encoding field as sent), and the reader is ready for the next one on the
  // connection.
  Request take_request();

 private:
  Result check_head();
  Result fail(int status, std::string message);
  void reset();

  struct Parser;
  const RequestLimits limits_;
  std::unique_ptr<Parser> parser_;  // one per request (Beast's parsers are single-use)
  bool started_ = false;
  bool head_reported_ = false;
  // The head's field count: Beast appends a chunked body's trailer fields to the head's, after
  // the head was checked; take_request() keeps the head's alone (RFC 9110 lets a server drop
  // trailers), so that no trailer adds a Host, a Content-Length or fields past the limit.
  int64_t head_fields_ = 0;
  // How far into the head its bytes have been checked for the request line and line folding
  // (each byte is looked at once, however slowly the head drips in), and how much of the head
  // the parser has taken (its complete lines) while the head is incomplete.
  size_t head_scanned_ = 0;
  size_t head_consumed_ = 0;
  // The bytes the parser was left with when it last asked for more: it takes them again only
  // with more after them.
  size_t waiting_for_more_than_ = 0;
  bool request_line_seen_ = false;
  bool failed_ = false;
};

}  // namespace cube3d::http
