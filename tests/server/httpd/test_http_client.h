// A small blocking HTTP/1.1 client over a raw socket, for the HTTP server's and gateway's tests:
// exact control of the bytes sent (malformed heads, pipelining, slow senders, a close in the
// middle), and a reader of answers (Content-Length, chunked, or until the close).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cube3d/server/httpd/http_message.h"

namespace cube3d::testing_http {

struct Reply {
  int status = 0;
  http::Headers headers;
  std::string body;
  std::string header(std::string_view name) const { return headers.value_or(name); }
};

class Connection {
 public:
  explicit Connection(int port, std::chrono::milliseconds timeout = std::chrono::seconds(30))
      : fd_(::socket(AF_INET, SOCK_STREAM, 0)), timeout_(timeout) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~Connection() { close(); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  bool connected() const { return connected_; }

  bool send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // A request with Host, Content-Length (when there is a body) and `headers` ("Name: value").
  bool send_request(const std::string& method, const std::string& path, const std::string& body,
                    const std::vector<std::string>& headers = {}) {
    std::string head = method + " " + path + " HTTP/1.1\r\nHost: localhost\r\n";
    for (const auto& h : headers) head += h + "\r\n";
    if (!body.empty() || method == "POST") {
      head += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    }
    head += "\r\n";
    return send(head + body);
  }

  // The next answer, or nullopt when the connection ended (or timed out) before a whole one.
  // A 1xx interim answer is returned like any other.
  std::optional<Reply> read_reply(bool head_request = false) {
    const size_t head_end = wait_for("\r\n\r\n");
    if (head_end == std::string::npos) return std::nullopt;
    Reply reply;
    const std::string head = buffer_.substr(0, head_end);
    buffer_.erase(0, head_end + 4);
    size_t line_end = head.find("\r\n");
    const std::string status_line = head.substr(0, line_end);
    if (status_line.size() < 12 || !status_line.starts_with("HTTP/1.")) return std::nullopt;
    reply.status = std::stoi(status_line.substr(9, 3));
    while (line_end != std::string::npos && line_end < head.size()) {
      const size_t start = line_end + 2;
      line_end = head.find("\r\n", start);
      const std::string line = head.substr(start, line_end - start);
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.erase(0, 1);
      reply.headers.add(line.substr(0, colon), value);
    }
    if (head_request || reply.status / 100 == 1 || reply.status == 204 || reply.status == 304) {
      return reply;
    }
    if (const auto length = reply.headers.get("Content-Length")) {
      const size_t n = std::stoul(std::string(*length));
      if (!wait_for_bytes(n)) return std::nullopt;
      reply.body = buffer_.substr(0, n);
      buffer_.erase(0, n);
    } else if (http::iequals(reply.header("Transfer-Encoding"), "chunked")) {
      for (;;) {
        const size_t size_end = wait_for("\r\n");
        if (size_end == std::string::npos) return std::nullopt;
        const size_t size = std::stoul(buffer_.substr(0, size_end), nullptr, 16);
        buffer_.erase(0, size_end + 2);
        if (!wait_for_bytes(size + 2)) return std::nullopt;
        reply.body += buffer_.substr(0, size);
        buffer_.erase(0, size + 2);
        if (size == 0) break;
      }
    } else {
      // Delimited by the close.
      while (fill()) {
      }
      reply.body = std::move(buffer_);
      buffer_.clear();
    }
    return reply;
  }

  // Reads until `marker` is in what was received (returned whole, and kept), or the end.
  std::string read_until(const std::string& marker) {
    wait_for(marker);
    return buffer_;
  }

  // Whether the server closed the connection within `within` (bytes it sends meanwhile are
  // kept).
  bool closed_by_peer(std::chrono::milliseconds within) {
    const auto until = std::chrono::steady_clock::now() + within;
    while (std::chrono::steady_clock::now() < until) {
      pollfd p{fd_, POLLIN, 50};
      if (::poll(&p, 1, 50) > 0) {
        char chunk[4096];
        const ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
        if (n <= 0) return true;
        buffer_.append(chunk, static_cast<size_t>(n));
      }
    }
    return false;
  }

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // Shrinks the receive buffer (before connecting matters most; after, it still bounds the
  // window the kernel advertises): a client that reads slowly.
  void set_receive_buffer(int bytes) {
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
  }
  int fd() const { return fd_; }

 private:
  // One recv into the buffer; false at the end of the stream, an error or the timeout.
  bool fill() {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout_.count())) <= 0) return false;
    char chunk[16384];
    const ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (n <= 0) return false;
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }
  size_t wait_for(const std::string& marker) {
    for (;;) {
      const size_t at = buffer_.find(marker);
      if (at != std::string::npos) return at;
      if (!fill()) return std::string::npos;
    }
  }
  bool wait_for_bytes(size_t n) {
    while (buffer_.size() < n) {
      if (!fill()) return false;
    }
    return true;
  }

  int fd_;
  bool connected_ = false;
  std::chrono::milliseconds timeout_;
  std::string buffer_;
};

// One request on a connection of its own.
inline std::optional<Reply> request(int port, const std::string& method, const std::string& path,
                                    const std::string& body = "",
                                    const std::vector<std::string>& headers = {}) {
  Connection c(port);
  if (!c.connected() || !c.send_request(method, path, body, headers)) return std::nullopt;
  return c.read_reply(method == "HEAD");
}

}  // namespace cube3d::testing_http
