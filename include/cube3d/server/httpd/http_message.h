// HTTP requests and responses as the routes see them: plain values, no HTTP library in sight
// (http_server.h wraps Boost.Beast behind these), so that routes are written and tested without
// a socket and the library could change without touching one of them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cube3d::http {

// Header fields in the order they came, repeats kept; names compare case-insensitively.
class Headers {
 public:
  using Field = std::pair<std::string, std::string>;

  void add(std::string name, std::string value);
  // Replaces every field of that name (or adds one).
  void set(std::string name, std::string value);
  void remove(std::string_view name);
  // The first value of `name`.
  std::optional<std::string_view> get(std::string_view name) const;
  // The first value, or `fallback`.
  std::string value_or(std::string_view name, std::string_view fallback = {}) const;
  std::vector<std::string_view> get_all(std::string_view name) const;
  bool has(std::string_view name) const { return get(name).has_value(); }
  size_t count(std::string_view name) const;
  size_t size() const { return fields_.size(); }

  std::vector<Field>::const_iterator begin() const { return fields_.begin(); }
  std::vector<Field>::const_iterator end() const { return fields_.end(); }

 private:
  std::vector<Field> fields_;
};

bool iequals(std::string_view a, std::string_view b);
// `text` without the spaces and tabs around it, ASCII letters lowered: how header values that
// are tokens (a coding, a media type, an expectation) compare.
std::string lower_trimmed(std::string_view text);
// The next item of a list separated by `separator` (a header's ',' or ';', a query's '&'): what
// stands before the first separator in `rest` (all of it without one); `rest` moves past it.
std::string_view take_item(std::string_view& rest, char separator);

struct Request {
  std::string method;     // as sent: "GET", "POST", ...
  std::string target;     // as sent
  std::string path;       // the target's path, percent-decoded ("*" for OPTIONS *)
  std::string query;      // the raw query, after '?' (empty without one)
  unsigned version = 11;  // 10 (HTTP/1.0) or 11 (HTTP/1.1)
  Headers headers;
  std::string body;            // de-chunked
  std::string remote_address;  // "127.0.0.1", "::1"
  uint16_t remote_port = 0;

  bool is_head() const { return method == "HEAD"; }
  // The first `name=value` of the query with that name, percent-decoded ('+' as a space); a
  // parameter given without '=' reads as "".
  std::optional<std::string> query_param(std::string_view name) const;
};

struct Response {
  int status = 200;
  Headers headers;  // Content-Type among them; Content-Length and Connection are the server's
  std::string body;
};

// A response with a body and its Content-Type.
Response make_response(int status, std::string body, std::string content_type);

// Percent-decoding of a path (or, with plus_is_space, of a query component). nullopt when a '%'
// is not followed by two hex digits, or when the result holds a NUL byte.
std::optional<std::string> percent_decode(std::string_view text, bool plus_is_space = false);

// Splits a request target into a decoded path and the raw query: origin-form ("/a?b"),
// absolute-form ("http://host/a?b": the path is taken) and "*" (OPTIONS). nullopt for anything
// else (authority-form, a path that does not decode).
struct Target {
  std::string path;
  std::string query;
};
std::optional<Target> split_target(std::string_view target);

}  // namespace cube3d::http
