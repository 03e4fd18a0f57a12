#include "cube3d/server/redis/redis_connection.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cube3d/core/error.h"
#include "cube3d/server/redis/redis_scripts.h"

namespace cube3d {
namespace {

using RedisConnectionClock = RedisConnection::Clock;

int poll_timeout_ms(RedisConnectionClock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - RedisConnectionClock::now());
  // Rounded up, so that a wait never ends just before the deadline and spins.
  return static_cast<int>(std::clamp<int64_t>(left.count() + 1, 0, 60'000));
}

std::string openssl_error() {
  std::string text;
  while (const unsigned long code = ERR_get_error()) {
    char buffer[256];
    ERR_error_string_n(code, buffer, sizeof buffer);
    if (!text.empty()) text += "; ";
    text += buffer;
  }
  return text.empty() ? std::string("no detail") : text;
}

RedisReply from_hiredis(const redisReply& r) {
  RedisReply out;
  switch (r.type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:  // the three that carry text
      out.type = r.type == REDIS_REPLY_STRING   ? RedisReply::Type::kString
                 : r.type == REDIS_REPLY_STATUS ? RedisReply::Type::kStatus
                                                : RedisReply::Type::kError;
      out.text.assign(r.str, r.len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = RedisReply::Type::kInteger;
      out.integer = r.integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Type::kArray;
      out.elements.reserve(r.elements);
      for (size_t i = 0; i < r.elements; ++i) out.elements.push_back(from_hiredis(*r.element[i]));
      break;
    default:
      out.type = RedisReply::Type::kNil;
  }
  return out;
}

// `Args`: a vector of strings or of string views.
template <typename Args>
std::string encode(const Args& argv) {
  std::vector<const char*> parts;
  std::vector<size_t> lengths;
  parts.reserve(argv.size());
  lengths.reserve(argv.size());
  for (const auto& arg : argv) {
    parts.push_back(arg.data());
    lengths.push_back(arg.size());
  }
  char* formatted = nullptr;
  const int length = redisFormatCommandArgv(&formatted, static_cast<int>(argv.size()), parts.data(),
                                            lengths.data());
  if (length < 0 || formatted == nullptr) throw internal_error("redis: cannot encode a command");
  std::string out(formatted, static_cast<size_t>(length));
  redisFreeCommand(formatted);
  return out;
}

bool is_ip_address(const std::string& host) {
  in6_addr v6{};
  in_addr v4{};
  return inet_pton(AF_INET, host.c_str(), &v4) == 1 || inet_pton(AF_INET6, host.c_str(), &v6) == 1;
}

}  // namespace

class RedisConnection::Impl {
 public:
  explicit Impl(const RedisEndpoint& endpoint)
      : endpoint_(endpoint), where_("redis at " + endpoint_text(endpoint)) {}

  ~Impl() {
    if (ssl_ != nullptr) SSL_free(ssl_);
    if (ctx_ != nullptr) SSL_CTX_free(ctx_);
    if (fd_ >= 0) ::close(fd_);
    if (reader_ != nullptr) redisReaderFree(reader_);
  }

  void connect(const RedisConnectOptions& options);
  void write_all(const std::string& bytes, RedisConnectionClock::time_point deadline);
  // One reply, or nullopt at the deadline or when wake_fd is readable.
  std::optional<RedisReply> read_reply(RedisConnectionClock::time_point deadline, int wake_fd);
  RedisReply read_reply_or_throw(RedisConnectionClock::time_point deadline) {
    std::optional<RedisReply> reply = read_reply(deadline, -1);
    if (!reply) fail("no reply within the deadline");
    return std::move(*reply);
  }
  // Sends `commands` at once and reads one reply each, all by `deadline`.
  std::vector<RedisReply> exchange(const std::vector<RedisScripts::CommandView>& commands,
                                   RedisConnectionClock::time_point deadline) {
    std::string bytes;
    for (const auto& argv : commands) bytes += encode(argv);
    write_all(bytes, deadline);
    std::vector<RedisReply> replies;
    replies.reserve(commands.size());
    for (size_t i = 0; i < commands.size(); ++i) replies.push_back(read_reply_or_throw(deadline));
    return replies;
  }

  // Between commands nothing may be readable: bytes (a TLS close_notify, a stray reply) or the
  // end of the stream both mean the connection cannot be trusted with the next command.
  bool idle_and_open() const {
    if (fd_ < 0 || (ssl_ != nullptr && SSL_pending(ssl_) > 0)) return false;
    char byte = 0;
    const ssize_t n = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }

  [[noreturn]] void fail(const std::string& why) {
    broken_ = true;
    throw unavailable(where_ + ": " + why);
  }

  const RedisEndpoint endpoint_;
  const std::string where_;
  bool broken_ = false;
  RedisScripts scripts_;  // what this connection's Redis holds

 private:
  void connect_tcp(RedisConnectionClock::time_point deadline);
  void handshake_tls(const RedisConnectOptions& options, RedisConnectionClock::time_point deadline);
  // Waits until the socket is ready for `events`; false at the deadline or when wake_fd fires.
  bool wait(short events, RedisConnectionClock::time_point deadline, int wake_fd = -1);
  std::optional<RedisReply> take_reply();
  void check_sent_reply(const RedisReply& reply, const char* what);

  int fd_ = -1;
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  redisReader* reader_ = redisReaderCreate();
};

bool RedisConnection::Impl::wait(short events, RedisConnectionClock::time_point deadline,
                                 int wake_fd) {
  for (;;) {
    pollfd fds[2] = {{fd_, events, 0}, {wake_fd, POLLIN, 0}};
    const int count = ::poll(fds, wake_fd >= 0 ? 2 : 1, poll_timeout_ms(deadline));
    if (count < 0) {
      if (errno == EINTR) continue;
      fail(std::string("poll: ") + std::strerror(errno));
    }
    if (wake_fd >= 0 && (fds[1].revents & POLLIN) != 0) return false;
    if (fds[0].revents != 0) return true;  // ready, or an error the next call reports
    if (RedisConnectionClock::now() >= deadline) return false;
  }
}

void RedisConnection::Impl::connect_tcp(RedisConnectionClock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(endpoint_.port);
  // The resolver's own timeouts bound this (resolv.conf); a host that does not resolve fails
  // here, once, with its name.
  if (const int rc = ::getaddrinfo(endpoint_.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    fail(std::string("cannot resolve the host: ") + gai_strerror(rc));
  }
  std::string last_error = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd =
        ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    fd_ = fd;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 || errno == EINPROGRESS) {
      if (!wait(POLLOUT, deadline)) {
        last_error = "connect timed out";
      } else {
        int error = 0;
        socklen_t length = sizeof error;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
        if (error == 0) break;
        last_error = std::strerror(error);
      }
    } else {
      last_error = std::strerror(errno);
    }
    ::close(fd);
    fd_ = -1;
  }
  ::freeaddrinfo(found);
  if (fd_ < 0) fail("cannot connect: " + last_error);
  const int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(fd_, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
}

void RedisConnection::Impl::handshake_tls(const RedisConnectOptions& options,
                                          RedisConnectionClock::time_point deadline) {
  ctx_ = SSL_CTX_new(TLS_client_method());
  if (ctx_ == nullptr) fail("TLS: " + openssl_error());
  SSL_CTX_set_min_proto_version(ctx_, TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
  const bool roots =
      options.tls_ca_file.empty()
          ? SSL_CTX_set_default_verify_paths(ctx_) == 1
          : SSL_CTX_load_verify_locations(ctx_, options.tls_ca_file.c_str(), nullptr) == 1;
  if (!roots) {
    fail("TLS: cannot load the CA roots" +
         (options.tls_ca_file.empty() ? std::string() : " from " + options.tls_ca_file) + ": " +
         openssl_error());
  }
  ssl_ = SSL_new(ctx_);
  if (ssl_ == nullptr || SSL_set_fd(ssl_, fd_) != 1) fail("TLS: " + openssl_error());
  // The certificate must name the host we asked for (an IP address: its IP SAN).
  if (is_ip_address(endpoint_.host)) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), endpoint_.host.c_str());
  } else {
    SSL_set_tlsext_host_name(ssl_, endpoint_.host.c_str());
    SSL_set1_host(ssl_, endpoint_.host.c_str());
  }
  for (;;) {
    const int rc = SSL_connect(ssl_);
    if (rc == 1) break;
    const int error = SSL_get_error(ssl_, rc);
    if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
      if (!wait(error == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline)) {
        fail("TLS handshake timed out");
      }
      continue;
    }
    const long verify = SSL_get_verify_result(ssl_);
    fail("TLS handshake failed: " + (verify != X509_V_OK
                                         ? std::string(X509_verify_cert_error_string(verify))
                                         : openssl_error()));
  }
}

void RedisConnection::Impl::check_sent_reply(const RedisReply& reply, const char* what) {
  if (reply.error()) fail(std::string(what) + " refused: " + reply.text);
}

void RedisConnection::Impl::connect(const RedisConnectOptions& options) {
  const RedisConnectionClock::time_point deadline =
      RedisConnectionClock::now() + options.connect_timeout;
  connect_tcp(deadline);
  if (endpoint_.tls) handshake_tls(options, deadline);
  std::vector<std::vector<std::string>> hello;
  if (!endpoint_.password.empty()) {
    hello.push_back(endpoint_.user.empty()
                        ? std::vector<std::string>{"AUTH", endpoint_.password}
                        : std::vector<std::string>{"AUTH", endpoint_.user, endpoint_.password});
  }
  if (endpoint_.db != 0) hello.push_back({"SELECT", std::to_string(endpoint_.db)});
  if (!options.client_name.empty()) hello.push_back({"CLIENT", "SETNAME", options.client_name});
  std::string bytes;
  for (const auto& argv : hello) bytes += encode(argv);
  if (!bytes.empty()) write_all(bytes, deadline);
  for (const auto& argv : hello) {
    const RedisReply reply = read_reply_or_throw(deadline);
    if (argv[0] == "AUTH") check_sent_reply(reply, "AUTH (the password of redis.url)");
    if (argv[0] == "SELECT") check_sent_reply(reply, "SELECT (the database of redis.url)");
  }
}

void RedisConnection::Impl::write_all(const std::string& bytes,
                                      RedisConnectionClock::time_point deadline) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const size_t left = bytes.size() - sent;
    if (ssl_ != nullptr) {
      const int chunk = static_cast<int>(std::min<size_t>(left, 1 << 20));
      const int rc = SSL_write(ssl_, bytes.data() + sent, chunk);
      if (rc > 0) {
        sent += static_cast<size_t>(rc);
        continue;
      }
      const int error = SSL_get_error(ssl_, rc);
      if (error == SSL_ERROR_WANT_WRITE || error == SSL_ERROR_WANT_READ) {
        if (!wait(error == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline)) {
          fail("write timed out");
        }
        continue;
      }
      fail("TLS write failed: " + openssl_error());
    }
    const ssize_t rc = ::send(fd_, bytes.data() + sent, left, MSG_NOSIGNAL);
    if (rc >= 0) {
      sent += static_cast<size_t>(rc);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait(POLLOUT, deadline)) fail("write timed out");
      continue;
    }
    fail(std::string("write failed: ") + std::strerror(errno));
  }
}

std::optional<RedisReply> RedisConnection::Impl::take_reply() {
  void* raw = nullptr;
  if (redisReaderGetReply(reader_, &raw) != REDIS_OK) {
    fail(std::string("protocol error: ") + reader_->errstr);
  }
  if (raw == nullptr) return std::nullopt;
  RedisReply reply = from_hiredis(*static_cast<redisReply*>(raw));
  freeReplyObject(raw);
  return reply;
}

std::optional<RedisReply> RedisConnection::Impl::read_reply(
    RedisConnectionClock::time_point deadline, int wake_fd) {
  char buffer[64 * 1024];
  for (;;) {
    if (std::optional<RedisReply> reply = take_reply()) return reply;
    ssize_t got = 0;
    if (ssl_ != nullptr) {
      const int rc = SSL_read(ssl_, buffer, sizeof buffer);
      if (rc <= 0) {
        const int error = SSL_get_error(ssl_, rc);
        if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
          if (!wait(error == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline, wake_fd)) {
            return std::nullopt;
          }
          continue;
        }
        if (error == SSL_ERROR_ZERO_RETURN) fail("the server closed the connection");
        fail("TLS read failed: " + openssl_error());
      }
      got = rc;
    } else {
      got = ::recv(fd_, buffer, sizeof buffer, 0);
      if (got == 0) fail("the server closed the connection");
      if (got < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          if (!wait(POLLIN, deadline, wake_fd)) return std::nullopt;
          continue;
        }
        fail(std::string("read failed: ") + std::strerror(errno));
      }
    }
    if (redisReaderFeed(reader_, buffer, static_cast<size_t>(got)) != REDIS_OK) {
      fail(std::string("protocol error: ") + reader_->errstr);
    }
  }
}

RedisConnection::RedisConnection(const RedisEndpoint& endpoint, const RedisConnectOptions& options)
    : impl_(std::make_unique<Impl>(endpoint)) {
  impl_->connect(options);
}

RedisConnection::~RedisConnection() = default;

std::vector<RedisReply> RedisConnection::pipeline(
    const std::vector<std::vector<std::string>>& commands,
    RedisConnectionClock::time_point deadline) {
  if (impl_->broken_) impl_->fail("the connection is broken");
  RedisScripts::Outgoing sent = impl_->scripts_.outgoing(commands);
  std::vector<RedisReply> replies = impl_->exchange(sent.commands, deadline);
  switch (impl_->scripts_.learn(commands, sent, replies)) {
    case RedisScripts::Verdict::kAnswered:
      return replies;
    case RedisScripts::Verdict::kSendAgain:
      // Redis lost its scripts (SCRIPT FLUSH) and none of them ran: once more, each in full.
      sent = impl_->scripts_.outgoing(commands);
      replies = impl_->exchange(sent.commands, deadline);
      if (impl_->scripts_.learn(commands, sent, replies) == RedisScripts::Verdict::kAnswered) {
        return replies;
      }
      break;
    case RedisScripts::Verdict::kOutcomeUnknown:
      break;
  }
  impl_->fail(
      "it ran a pipeline of " + std::to_string(commands.size()) +
      " commands only in part (NOSCRIPT after a SCRIPT FLUSH, or EVALSHA refused): what ran is "
      "unknown");
}

RedisReply RedisConnection::command(const std::vector<std::string>& argv,
                                    RedisConnectionClock::time_point deadline) {
  return std::move(pipeline({argv}, deadline).front());
}

void RedisConnection::send(const std::vector<std::string>& argv,
                           RedisConnectionClock::time_point deadline) {
  if (impl_->broken_) impl_->fail("the connection is broken");
  impl_->write_all(encode(argv), deadline);
}

std::optional<RedisReply> RedisConnection::read(RedisConnectionClock::time_point deadline,
                                                int wake_fd) {
  if (impl_->broken_) impl_->fail("the connection is broken");
  return impl_->read_reply(deadline, wake_fd);
}

bool RedisConnection::broken() const { return impl_->broken_; }

bool RedisConnection::idle_and_open() {
  if (impl_->broken_) return false;
  if (impl_->idle_and_open()) return true;
  impl_->broken_ = true;
  return false;
}

const RedisEndpoint& RedisConnection::endpoint() const { return impl_->endpoint_; }

}  // namespace cube3d
