#include "cube3d/server/redis/redis_url.h"

#include <charconv>

#include "cube3d/core/error.h"
#include "cube3d/core/net_address.h"

namespace cube3d {
namespace {

[[noreturn]] void refuse(std::string_view key, const std::string& why) {
  throw invalid_argument(std::string(key) + ": " + why +
                         " (expected redis://[[user]:password@]host[:port][/db] or rediss://...)");
}

int hex_digit_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decoded(std::string_view text, std::string_view key, const char* what) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    const int hi = i + 2 < text.size() ? hex_digit_value(text[i + 1]) : -1;
    const int lo = i + 2 < text.size() ? hex_digit_value(text[i + 2]) : -1;
    if (hi < 0 || lo < 0) {
      refuse(key, std::string("a '%' in the ") + what + " must start a %XX escape");
    }
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

template <typename Int>
bool parse_whole(std::string_view text, Int& value) {
  if (text.empty()) return false;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() && end == text.data() + text.size();
}

}  // namespace

RedisEndpoint parse_redis_url(std::string_view url, std::string_view key) {
  RedisEndpoint endpoint;
  std::string_view rest;
  if (url.starts_with("redis://")) {
    rest = url.substr(8);
  } else if (url.starts_with("rediss://")) {
    rest = url.substr(9);
    endpoint.tls = true;
  } else {
    refuse(key, "the scheme must be redis:// or rediss://");
  }
  if (rest.find_first_of("?#") != std::string_view::npos) {
    refuse(key, "a query or fragment is not understood");
  }
  // The user info ends at the last '@' (the host and the database hold none); the authority at
  // the first '/' after it.
  const size_t at = rest.rfind('@');
  std::string_view user_info;
  if (at != std::string_view::npos) {
    user_info = rest.substr(0, at);
    rest = rest.substr(at + 1);
  }
  std::string_view authority = rest;
  std::string_view path;
  if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
    authority = rest.substr(0, slash);
    path = rest.substr(slash + 1);
  }
  if (at != std::string_view::npos) {
    const size_t colon = user_info.find(':');
    if (colon == std::string_view::npos) {
      // redis://secret@host: Redis' clients read a lone user info as the password.
      endpoint.password = percent_decoded(user_info, key, "password");
    } else {
      endpoint.user = percent_decoded(user_info.substr(0, colon), key, "user");
      endpoint.password = percent_decoded(user_info.substr(colon + 1), key, "password");
    }
  }
  std::string_view port_text;
  if (authority.starts_with('[')) {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) refuse(key, "an IPv6 host needs its closing ']'");
    endpoint.host = std::string(authority.substr(1, close - 1));
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (!after.starts_with(':')) refuse(key, "only ':port' may follow an IPv6 host");
      port_text = after.substr(1);
      if (port_text.empty()) refuse(key, "the port after ':' is empty");
    }
  } else {
    const size_t colon = authority.find(':');
    endpoint.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = authority.substr(colon + 1);
      if (port_text.empty()) refuse(key, "the port after ':' is empty");
    }
  }
  if (endpoint.host.empty()) refuse(key, "the host is missing");
  if (!port_text.empty()) {
    int port = 0;
    if (!parse_whole(port_text, port) || port < 1 || port > 65535) {
      refuse(key, "the port must be a number in [1, 65535], got '" + std::string(port_text) + "'");
    }
    endpoint.port = port;
  }
  if (!path.empty()) {
    int64_t db = 0;
    if (!parse_whole(path, db) || db < 0 || db > 1'000'000) {
      refuse(key, "the path must be a database number, got '/" + std::string(path) + "'");
    }
    endpoint.db = db;
  }
  return endpoint;
}

std::string redact_redis_url(std::string_view url) {
  const size_t scheme = url.find("://");
  const size_t at = url.rfind('@');
  if (scheme == std::string_view::npos || at == std::string_view::npos || at < scheme + 3) {
    return std::string(url);
  }
  const size_t start = scheme + 3;
  const std::string_view user_info = url.substr(start, at - start);
  const size_t colon = user_info.find(':');
  const std::string user =
      colon == std::string_view::npos ? std::string() : std::string(user_info.substr(0, colon));
  return std::string(url.substr(0, start)) + user + ":***" + std::string(url.substr(at));
}

std::string endpoint_text(const RedisEndpoint& endpoint) {
  const bool v6 = endpoint.host.find(':') != std::string::npos;
  return (v6 ? "[" + endpoint.host + "]" : endpoint.host) + ":" + std::to_string(endpoint.port);
}

void validate_sentinels(const RedisSentinels& sentinels) {
  if (!sentinels.enabled()) return;
  if (sentinels.master_name.empty()) {
    throw invalid_argument(
        "redis.master_name: the name the sentinels know the primary by (their `sentinel monitor "
        "<name> ...`) is required with redis.sentinels");
  }
  for (const std::string& address : sentinels.addresses) {
    try {
      (void)parse_host_port(address);
    } catch (const Error& e) {
      throw invalid_argument("redis.sentinels: \"" + address + "\" is not host:port (" + e.what() +
                             ")");
    }
  }
}

}  // namespace cube3d
