#include "cube3d/server/metrics_http.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <prometheus/text_serializer.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sys/time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>

#include "cube3d/core/error.h"

namespace cube3d {
namespace {

constexpr int kPollMs = 200;  // how quickly the acceptor notices it should stop
// A scrape must have sent its whole request head within this time, however it dribbles it in
// (a per-read timeout alone lets one byte every second hold the connection for ever); the
// answer gets as long to drain.
constexpr int kRequestDeadlineMs = 2000;
// Scrapes answered at once, each on its own thread: one slow client cannot block the others.
// Beyond this, new connections are closed at once (a scraper retries at its next interval).
constexpr size_t kMaxConnections = 8;
constexpr size_t kMaxRequestBytes = 8192;

void split_host_port(const std::string& listen, std::string& host, std::string& port) {
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos || colon + 1 == listen.size()) {
    throw invalid_argument("metrics_listen '" + listen + "' is not host:port");
  }
  host = listen.substr(0, colon);
  port = listen.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
}

void send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return;  // the scraper went away; nothing to do
    data.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace

MetricsHttpServer::MetricsHttpServer(const std::string& listen,
                                     std::shared_ptr<prometheus::Registry> registry)
    : registry_(std::move(registry)) {
  std::string host, port;
  split_host_port(listen, host, port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc =
          ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found);
      rc != 0) {
    throw invalid_argument("metrics_listen " + listen + ": " + ::gai_strerror(rc));
  }
  std::string last_error = "no address";
  for (addrinfo* a = found; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 64) == 0) {
      listen_fd_ = fd;
      break;
    }
    last_error = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (listen_fd_ < 0) {
    throw invalid_argument("metrics_listen " + listen + ": cannot listen: " + last_error);
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  thread_ = std::thread([this] { serve(); });
}

MetricsHttpServer::~MetricsHttpServer() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
  // Each connection ends within its deadline, so this wait is bounded (about 2 x 2 s).
  for (Connection& c : connections_) c.thread.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void MetricsHttpServer::serve() {
  while (!stopping_) {
    std::erase_if(connections_, [](Connection& c) {
      if (!c.done->load()) return false;
      c.thread.join();
      return true;
    });
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, kPollMs) <= 0) continue;
    const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    if (connections_.size() >= kMaxConnections) {
      ::close(client);
      continue;
    }
    const timeval send_timeout{kRequestDeadlineMs / 1000, (kRequestDeadlineMs % 1000) * 1000};
    ::setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof(send_timeout));
    auto done = std::make_shared<std::atomic<bool>>(false);
    connections_.push_back({std::thread([this, client, done] {
                              answer(client);
                              ::close(client);
                              done->store(true);
                            }),
                            done});
  }
}

void MetricsHttpServer::answer(int client) const {
  // Read the request head, within the deadline.
  std::string request;
  char buf[1024];
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(kRequestDeadlineMs);
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < kMaxRequestBytes) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0 || stopping_) return;
    pollfd p{client, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, kPollMs))) <= 0) continue;
    const ssize_t n = ::recv(client, buf, sizeof(buf), 0);
    if (n <= 0) return;
    request.append(buf, static_cast<size_t>(n));
  }
  const auto line_end = request.find("\r\n");
  const std::string line = request.substr(0, line_end);
  const bool get = line.rfind("GET ", 0) == 0;
  const auto path_end = line.find(' ', 4);
  const std::string path = get ? line.substr(4, path_end - 4) : "";
  if (!get || (path != "/metrics" && path.rfind("/metrics?", 0) != 0)) {
    const std::string body = "metrics are served at /metrics\n";
    send_all(client, "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: " +
                         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
    return;
  }
  const std::string body = prometheus::TextSerializer().Serialize(registry_->Collect());
  send_all(client,
           "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: " +
               std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n");
  send_all(client, body);
}

}  // namespace cube3d
