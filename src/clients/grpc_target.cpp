#include "cube3d/clients/grpc_target.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "cube3d/core/error.h"

namespace cube3d {
namespace {

constexpr std::string_view kSchemes[] = {"unix:", "unix-abstract:", "dns:", "ipv4:", "ipv6:"};

std::string lower_case(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim_space(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

struct ServerEntry {
  std::string host;  // without brackets
  std::string port;
  bool bracketed = false;
};

ServerEntry split_host_port(std::string_view entry, std::string_view flag, std::string_view all) {
  const auto bad = [&](const std::string& why) {
    return invalid_argument(std::string(flag) + " " + std::string(all) + ": '" +
                            std::string(entry) + "' " + why);
  };
  ServerEntry out;
  size_t colon = 0;
  if (entry.starts_with('[')) {
    const size_t close = entry.find(']');
    if (close == std::string_view::npos) throw bad("has no closing ']'");
    out.host = std::string(entry.substr(1, close - 1));
    out.bracketed = true;
    if (close + 1 >= entry.size() || entry[close + 1] != ':') throw bad("needs :PORT");
    colon = close + 1;
  } else {
    colon = entry.rfind(':');
    if (colon == std::string_view::npos) throw bad("needs :PORT (HOST:PORT)");
    out.host = std::string(entry.substr(0, colon));
    if (out.host.find(':') != std::string::npos) throw bad("an IPv6 address goes in [ ]");
  }
  out.port = std::string(entry.substr(colon + 1));
  const bool digits = !out.port.empty() && out.port.size() <= 5 &&
                      std::all_of(out.port.begin(), out.port.end(), [](char c) {
                        return std::isdigit(static_cast<unsigned char>(c));
                      });
  if (out.host.empty()) throw bad("has no host");
  if (!digits || std::stoi(out.port) < 1 || std::stoi(out.port) > 65535) {
    throw bad("has no port in 1..65535");
  }
  return out;
}

// The IPv4 and IPv6 addresses of one entry, as "A:P" and "[A]:P".
void resolve_entry(const ServerEntry& hp, std::string_view flag, std::string_view all,
                   std::vector<std::string>& v4, std::vector<std::string>& v6) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(hp.host.c_str(), hp.port.c_str(), &hints, &found);
  if (rc != 0) {
    throw invalid_argument(std::string(flag) + " " + std::string(all) + ": cannot resolve '" +
                           hp.host + "': " + ::gai_strerror(rc));
  }
  const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owned(found, &::freeaddrinfo);
  for (const addrinfo* a = found; a; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ai_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
      v4.push_back(std::string(text) + ":" + hp.port);
    } else if (a->ai_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
      ::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
      std::string address = "[";
      address.append(text).append("]:").append(hp.port);
      v6.push_back(std::move(address));
    }
  }
}

void check_not_url(std::string_view entry, std::string_view flag, std::string_view all) {
  const std::string l = lower_case(entry);
  if (l.starts_with("http://") || l.starts_with("https://")) {
    throw invalid_argument(std::string(flag) + " " + std::string(all) +
                           ": gRPC takes HOST:PORT (e.g. localhost:50051), not a URL; use --tls "
                           "for TLS");
  }
}

void append_unique(std::vector<std::string>& to, const std::vector<std::string>& from) {
  for (const auto& a : from) {
    if (std::find(to.begin(), to.end(), a) == to.end()) to.push_back(a);
  }
}

}  // namespace

std::string grpc_target(std::string_view servers, std::string_view flag) {
  const std::string_view all = trim_space(servers);
  if (all.empty()) {
    throw invalid_argument(std::string(flag) + ": empty address (expected HOST:PORT)");
  }
  std::vector<std::string_view> entries;
  for (std::string_view rest = all;;) {
    const size_t comma = rest.find(',');
    entries.push_back(trim_space(rest.substr(0, comma)));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  for (const std::string_view entry : entries) check_not_url(entry, flag, all);
  if (entries.size() == 1) return std::string(entries.front());
  std::vector<std::string> v4, v6;
  bool every_v4 = true, every_v6 = true;
  for (const std::string_view entry : entries) {
    if (entry.empty()) {
      throw invalid_argument(std::string(flag) + " " + std::string(all) +
                             ": an empty entry between commas");
    }
    const std::string l = lower_case(entry);
    for (const std::string_view scheme : kSchemes) {
      if (l.starts_with(scheme)) {
        throw invalid_argument(std::string(flag) + " " + std::string(all) + ": '" +
                               std::string(entry) +
                               "': a list takes HOST:PORT entries only (a scheme such as " +
                               std::string(scheme) + " is for a single target)");
      }
    }
    std::vector<std::string> e4, e6;
    resolve_entry(split_host_port(entry, flag, all), flag, all, e4, e6);
    every_v4 = every_v4 && !e4.empty();
    every_v6 = every_v6 && !e6.empty();
    append_unique(v4, e4);
    append_unique(v6, e6);
  }
  std::string target;
  if (every_v4) {
    target = "ipv4:";
    for (size_t i = 0; i < v4.size(); ++i) target += (i ? "," : "") + v4[i];
  } else if (every_v6) {
    target = "ipv6:";
    for (size_t i = 0; i < v6.size(); ++i) target += (i ? "," : "") + v6[i];
  } else {
    throw invalid_argument(std::string(flag) + " " + std::string(all) +
                           ": the entries mix IPv4-only and IPv6-only hosts; one channel "
                           "takes one family");
  }
  return target;
}

}  // namespace cube3d
