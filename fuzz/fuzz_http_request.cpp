// Fuzzes the HTTP request reader (src/server/httpd/request_reader.cpp: Boost.Beast's parser and
// our checks around it) and what routes then do with a request's target and query, from the
// bytes a client sends. The first byte of the input picks how the rest is split into reads (one
// piece, or pieces of 1..16 bytes), as a connection would see a slow or pipelining client; the
// reader is fed exactly as the server's connection feeds it.
//
// Properties: the reader never takes more than it is given, never loops without progress,
// refuses with one of its documented statuses, and every request it accepts is within the
// limits (body, field count) and has a method, a target and a version of 1.0 or 1.1; after an
// error it stays refused. Accepted targets go through split_target and query_param.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "cube3d/server/httpd/http_message.h"
#include "cube3d/server/httpd/request_reader.h"
#include "fuzz_support.h"

namespace {

using cube3d::http::Request;
using cube3d::http::RequestLimits;
using cube3d::http::RequestReader;
using Kind = RequestReader::Result::Kind;

const std::set<int> kStatuses = {400, 413, 414, 415, 417, 431, 501, 505};

void check_request(const Request& r, const RequestLimits& limits) {
  CUBE3D_FUZZ_CHECK(!r.method.empty(), "a request without a method");
  CUBE3D_FUZZ_CHECK(!r.target.empty(), "a request without a target");
  CUBE3D_FUZZ_CHECK(r.version == 10 || r.version == 11, "a version other than 1.0 or 1.1");
  CUBE3D_FUZZ_CHECK(static_cast<int64_t>(r.body.size()) <= limits.max_body_bytes,
                    "a body over the limit accepted");
  CUBE3D_FUZZ_CHECK(static_cast<int64_t>(r.headers.size()) <= limits.max_header_count,
                    "more fields than the limit accepted");
  CUBE3D_FUZZ_CHECK(r.headers.count("Content-Length") <= 1, "two Content-Length fields");
  CUBE3D_FUZZ_CHECK(!(r.headers.has("Content-Length") && r.headers.has("Transfer-Encoding")),
                    "Content-Length with Transfer-Encoding accepted");
  for (const auto& [name, value] : r.headers) {
    for (const char c : value) {
      const auto u = static_cast<unsigned char>(c);
      CUBE3D_FUZZ_CHECK(!((u < 0x20 && c != '\t') || u == 0x7f), "a control byte in a value");
    }
  }
  if (const auto target = cube3d::http::split_target(r.target)) {
    CUBE3D_FUZZ_CHECK(target->path.find('\0') == std::string::npos, "a NUL in a decoded path");
    Request with_query = r;
    with_query.query = target->query;
    for (const char* name : {"timeout_ms", "wait_ms", "prompt", ""}) {
      if (const auto value = with_query.query_param(name)) {
        CUBE3D_FUZZ_CHECK(value->find('\0') == std::string::npos, "a NUL in a decoded value");
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t step = data[0] % 17;  // 0: everything at once
  const std::string_view input(reinterpret_cast<const char*>(data + 1), size - 1);
  RequestLimits limits;
  limits.max_request_line_bytes = 512;
  limits.max_header_bytes = 2048;
  limits.max_header_count = 16;
  limits.max_body_bytes = 4096;
  RequestReader reader(limits);

  std::string buffered;
  size_t given = 0;
  bool failed = false;
  int requests = 0;
  while (!failed) {
    if (given < input.size()) {
      const size_t n = step == 0 ? input.size() - given : std::min(step, input.size() - given);
      buffered.append(input.substr(given, n));
      given += n;
    }
    // Read until the reader wants more than is buffered.
    for (int rounds = 0;; ++rounds) {
      CUBE3D_FUZZ_CHECK(rounds < 100000, "the reader loops without progress");
      const RequestReader::Result r = reader.read(buffered);
      CUBE3D_FUZZ_CHECK(r.consumed <= buffered.size(), "consumed more than it was given");
      buffered.erase(0, r.consumed);
      if (r.kind == Kind::kError) {
        CUBE3D_FUZZ_CHECK(kStatuses.count(r.status) == 1, "an undocumented refusal status");
        CUBE3D_FUZZ_CHECK(!r.message.empty(), "a refusal without a message");
        CUBE3D_FUZZ_CHECK(reader.read("GET / HTTP/1.1\r\nHost: h\r\n\r\n").kind == Kind::kError,
                          "a reader that failed accepted more");
        failed = true;
        break;
      }
      if (r.kind == Kind::kRequest) {
        check_request(reader.take_request(), limits);
        ++requests;
        continue;
      }
      if (r.kind == Kind::kHead) continue;
      if (r.consumed == 0) break;  // kNeedMore, nothing more to take
    }
    if (given >= input.size()) break;
  }
  (void)requests;
  return 0;
}
