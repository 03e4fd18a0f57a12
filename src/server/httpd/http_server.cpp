#include "cube3d/server/httpd/http_server.h"

#include <spdlog/spdlog.h>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/status.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/core/listen_probe.h"
#include "cube3d/core/net_address.h"

namespace cube3d::http {
namespace {

namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;
// A TLS connection's stream: over the connection's own socket (a reference), so that the socket
// stays the one place for the peer's address, options and closing.
using TlsStream = ssl::stream<tcp::socket&>;
using ConnectionClock = std::chrono::steady_clock;

// How long a connection that is closing after a final answer keeps reading (and dropping)
// what its client still sends, so that the answer is not lost to a reset (RFC 9112 9.6).
constexpr auto kLingerTime = std::chrono::seconds(2);
// Reads of a request body, and of what a client sends while its request is handled, in pieces
// of at most this size.
constexpr size_t kReadChunk = 16 * 1024;
// Buffers gathered into one write.
constexpr size_t kMaxGather = 16;
// How long the acceptor waits before trying again when the process is out of descriptors.
constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);

bool token_char(char c) {
  if (c >= 'a' && c <= 'z') return true;
  if (c >= 'A' && c <= 'Z') return true;
  if (c >= '0' && c <= '9') return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// A header value as it may go on the wire: control bytes (CR and LF above all: a value from
// anywhere must not start a header of its own) become spaces.
std::string wire_value(std::string_view value) {
  std::string out(value);
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\t') || u == 0x7f) c = ' ';
  }
  return out;
}

std::string reason_phrase(int status) {
  const auto text =
      boost::beast::http::obsolete_reason(static_cast<boost::beast::http::status>(status));
  return text.empty() ? std::string("Status") : std::string(text);
}

// The status line and fields of a response; Content-Length, Transfer-Encoding and Connection
// come from the server, never from the route.
std::string serialize_head(const Response& response, bool keep_alive, bool http10_client,
                           std::optional<size_t> content_length, bool chunked) {
  std::string head =
      "HTTP/1.1 " + std::to_string(response.status) + " " + reason_phrase(response.status) + "\r\n";
  for (const auto& [name, value] : response.headers) {
    if (name.empty() || !std::all_of(name.begin(), name.end(), token_char)) {
      spdlog::error("http: a response header with an invalid name was dropped");
      continue;
    }
    if (iequals(name, "Content-Length") || iequals(name, "Transfer-Encoding") ||
        iequals(name, "Connection")) {
      continue;
    }
    head += name + ": " + wire_value(value) + "\r\n";
  }
  if (content_length) head += "Content-Length: " + std::to_string(*content_length) + "\r\n";
  if (chunked) head += "Transfer-Encoding: chunked\r\n";
  if (!keep_alive) {
    head += "Connection: close\r\n";
  } else if (http10_client) {
    head += "Connection: keep-alive\r\n";
  }
  head += "\r\n";
  return head;
}

// Whether the client wants the connection kept after this request (RFC 9112 9.3).
bool client_keeps_alive(const Request& request) {
  bool close = false;
  bool keep = false;
  for (const std::string_view value : request.headers.get_all("Connection")) {
    std::string_view rest = value;
    while (!rest.empty()) {
      std::string_view token = take_item(rest, ',');
      while (!token.empty() && (token.front() == ' ' || token.front() == '\t'))
        token.remove_prefix(1);
      while (!token.empty() && (token.back() == ' ' || token.back() == '\t'))
        token.remove_suffix(1);
      if (iequals(token, "close")) close = true;
      if (iequals(token, "keep-alive")) keep = true;
    }
  }
  if (close) return false;
  return request.version >= 11 || keep;
}

std::string chunk_frame(std::string_view data) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string size;
  for (size_t n = data.size(); n > 0; n /= 16) size.insert(size.begin(), kHex[n % 16]);
  std::string out;
  out.reserve(size.size() + data.size() + 4);
  out += size;
  out += "\r\n";
  out += data;
  out += "\r\n";
  return out;
}

std::string client_address(const tcp::socket& socket) {
  boost::system::error_code ec;
  const tcp::endpoint peer = socket.remote_endpoint(ec);
  if (ec) return "?";
  net::ip::address address = peer.address();
  if (address.is_v6() && address.to_v6().is_v4_mapped()) {
    address = net::ip::make_address_v4(net::ip::v4_mapped, address.to_v6());
  }
  return address.to_string();
}

// A TLS listener's context: the server's TLS policy and the checked files (tls_files.h, which
// names the tls.* key and the file of anything wrong). OpenSSL frees a connection's record
// buffers while it is idle (SSL_MODE_RELEASE_BUFFERS): many idle TLS connections then cost little
// more than plain ones.
std::shared_ptr<ssl::context> make_tls_context(const TlsOptions& tls) {
  const TlsCredentials credentials = load_tls_files(tls);
  auto context = std::make_shared<ssl::context>(ssl::context::tls_server);
  configure_tls_context(context->native_handle(), credentials, tls);
  SSL_CTX_set_mode(context->native_handle(), SSL_MODE_RELEASE_BUFFERS);
  return context;
}

// The first byte of a TLS connection is a handshake record's (0x16; 0x80 for an SSLv2-style
// hello); a request line starts with a method's capital letter.
bool starts_plain_http(char first) { return first >= 'A' && first <= 'Z'; }

// What a plain-HTTP client on the HTTPS port reads: it cannot read a TLS alert, and an empty
// reply tells it nothing.
std::string plain_http_refusal() {
  const std::string body =
      "This port speaks HTTPS: a plain-HTTP request was sent to it. Use https:// (with the "
      "server's certificate).\n";
  return "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
         "Content-Length: " +
         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

}  // namespace

class Connection;

// One listening socket and its connection counts.
struct ListenerState {
  ListenerState(net::io_context& ioc, Listener l, std::chrono::milliseconds server_header_timeout)
      : name(std::move(l.name)),
        config_key(std::move(l.config_key)),
        handler(std::move(l.handler)),
        header_timeout(l.header_timeout.count() > 0
                           ? std::min(l.header_timeout, server_header_timeout)
                           : server_header_timeout),
        keep_alive(l.keep_alive),
        tls(l.tls ? make_tls_context(*l.tls) : nullptr),
        acceptor(net::make_strand(ioc)),
        retry(acceptor.get_executor()) {}

  const std::string name;
  const std::string config_key;
  const Handler handler;
  const std::chrono::milliseconds header_timeout;
  const bool keep_alive;
  const std::shared_ptr<ssl::context> tls;  // null: plain HTTP
  tcp::acceptor acceptor;
  net::steady_timer retry;  // accept back-off
  int port = 0;
  std::atomic<int64_t> open{0};
  std::mutex clients_mutex;
  std::unordered_map<std::string, int64_t> per_client;  // open connections by remote address
  ConnectionClock::time_point last_accept_warning{};
};

struct Server::Impl : std::enable_shared_from_this<Server::Impl> {
  explicit Impl(ServerOptions o) : options(std::move(o)) {}

  void accept(ListenerState& listener);
  void on_accept(ListenerState& listener, const boost::system::error_code& ec, tcp::socket socket);
  void forget(Connection* connection);
  Response refusal(const std::string& listener, int status, const std::string& message) const;

  const ServerOptions options;
  net::io_context ioc;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::vector<std::unique_ptr<ListenerState>> listeners;
  std::vector<std::thread> threads;
  std::atomic<bool> draining{false};
  std::atomic<bool> stopping{false};

  std::mutex connections_mutex;
  std::condition_variable connections_changed;
  std::unordered_map<Connection*, std::weak_ptr<Connection>> connections;

  std::mutex stop_mutex;
  bool stopped = false;
};

// One client connection: a strand, a socket, a timer for the deadline of the current phase,
// the bytes read and not yet parsed, and the bytes to write.
class Connection final : public std::enable_shared_from_this<Connection> {
 public:
  // Holds the server: a connection (kept by an exchange a route still holds) never outlives
  // the io_context its socket belongs to.
  Connection(std::shared_ptr<Server::Impl> server, ListenerState& listener, tcp::socket socket,
             std::string client)
      : server_(std::move(server)),
        listener_(listener),
        socket_(std::move(socket)),
        tls_(listener.tls ? std::make_unique<TlsStream>(socket_, *listener.tls) : nullptr),
        timer_(socket_.get_executor()),
        client_(std::move(client)),
        reader_(server_->options.limits) {}

  void start() {
    boost::system::error_code ignored;
    socket_.set_option(tcp::no_delay(true), ignored);  // events go out as they come
    if (!tls_) return enter_idle();
    // The handshake is part of the wait for a request's head: due within header_timeout.
    phase_ = Phase::kHandshake;
    arm(ConnectionClock::now() + listener_.header_timeout, "header_timeout");
    wait_first_byte();
  }

  // Its first byte first: a plain-HTTP client gets an answer it can read (and one that connects
  // and leaves, a TCP probe, is no failed handshake).
  void wait_first_byte() {
    socket_.async_wait(tcp::socket::wait_read,
                       [self = shared_from_this()](const boost::system::error_code& ec) {
                         if (self->phase_ != Phase::kHandshake) return;
                         if (ec) return self->close("client");
                         self->after_first_byte();
                       });
  }

  void after_first_byte() {
    char first = 0;
    boost::system::error_code ec;
    const size_t n = socket_.receive(net::buffer(&first, 1), tcp::socket::message_peek, ec);
    if (ec == net::error::would_block || ec == net::error::try_again) {
      return wait_first_byte();  // a false alarm: wait again (the deadline stands)
    }
    if (ec || n == 0) return close("client");
    if (starts_plain_http(first)) return refuse_plain_http();
    tls_->async_handshake(ssl::stream_base::server,
                          [self = shared_from_this()](const boost::system::error_code& hec) {
                            if (self->phase_ != Phase::kHandshake) return;
                            if (hec) {
                              self->report_tls_failure(hec.message());
                              return self->close("tls_handshake");
                            }
                            self->enter_idle();
                          });
  }

  // The plain-HTTP answer on the bare socket, then the close (counted as a failed handshake).
  void refuse_plain_http() {
    report_tls_failure("plain HTTP on the HTTPS port");
    tls_.reset();  // the connection is a plain one from here: its writes go to the socket
    keep_alive_ = false;
    close_after_ = true;
    answered_ = true;
    close_reason_ = "tls_handshake";
    phase_ = Phase::kResponding;
    disarm();
    enqueue(plain_http_refusal());
  }

  void report_tls_failure(const std::string& reason) {
    if (server_->options.observer.tls_failed) {
      server_->options.observer.tls_failed(listener_.name, client_, reason);
    }
  }

  // Posted by Server::stop: idle connections close now, busy ones after their answer.
  void begin_shutdown(bool force) {
    if (force || phase_ == Phase::kHandshake || phase_ == Phase::kIdle ||
        phase_ == Phase::kReading) {
      close("server_stop");
    } else {
      close_after_ = true;
    }
  }

  // --- the exchange's side (always on the strand) ---
  void respond(uint64_t seq, Response response);
  void start_stream(uint64_t seq, Response head, Exchange::StreamOptions options);
  void write_chunk(uint64_t seq, std::string chunk);
  void end_stream(uint64_t seq);
  void set_finished_callback(uint64_t seq, std::function<void(bool delivered)> callback);

  net::any_io_executor executor() { return socket_.get_executor(); }
  ListenerState& listener() { return listener_; }
  const std::string& client() const { return client_; }

 private:
  // How the current exchange ended: not yet, its answer written in full, or abandoned.
  enum class Ending { kNone, kDelivered, kAbandoned };
  enum class Phase {
    kHandshake,   // TLS: before the first request, the handshake
    kIdle,        // between requests: waiting for a first byte
    kReading,     // a request's head or body
    kHandling,    // the handler has the request; no answer yet
    kResponding,  // writing a whole answer
    kStreaming,   // writing a streamed answer
    kLingering,   // the last answer is out; dropping what the client still sends
    kClosed,
  };

  void enter_idle();
  void wait_readable();
  void read_some();
  void on_read(const boost::system::error_code& ec, size_t n);
  void parse();
  void dispatch(Request request);
  void refuse(int status, const std::string& message);
  void enqueue(std::string bytes);
  void write_next();
  void on_drained();
  void finish_exchange();
  void end_exchange(Ending ending);
  void linger_close(const char* reason);
  void close(const char* reason);
  void arm(ConnectionClock::time_point due, const char* reason);
  void disarm();
  size_t read_room() const;
  bool keep_alive() const {
    return keep_alive_ && !close_after_ && !peer_closed_ && !server_->draining.load() &&
           !server_->stopping.load();
  }
  std::string_view buffered() const {
    return {static_cast<const char*>(buffer_.data().data()), buffer_.size()};
  }

  // Reads and writes, through TLS on a TLS listener.
  template <typename Buffers, typename Handler>
  void async_read_some(const Buffers& buffers, Handler&& handler) {
    if (tls_) return tls_->async_read_some(buffers, std::forward<Handler>(handler));
    socket_.async_read_some(buffers, std::forward<Handler>(handler));
  }
  template <typename Buffers, typename Handler>
  void async_write_some(const Buffers& buffers, Handler&& handler) {
    if (tls_) return tls_->async_write_some(buffers, std::forward<Handler>(handler));
    socket_.async_write_some(buffers, std::forward<Handler>(handler));
  }

  const std::shared_ptr<Server::Impl> server_;
  ListenerState& listener_;
  tcp::socket socket_;
  std::unique_ptr<TlsStream> tls_;  // after socket_, which it refers to; null: plain HTTP
  net::steady_timer timer_;
  const std::string client_;
  uint16_t client_port_ = 0;
  RequestReader reader_;
  boost::beast::flat_buffer buffer_;  // read, not yet parsed
  std::vector<char> scratch_;         // what the pending read writes into

  Phase phase_ = Phase::kIdle;
  bool read_pending_ = false;
  bool writing_ = false;
  bool peer_closed_ = false;  // the client's close, seen while a write was in flight
  std::deque<std::string> out_;
  size_t out_offset_ = 0;  // of the front of out_
  uint64_t timer_generation_ = 0;
  const char* deadline_reason_ = "";
  ConnectionClock::time_point read_deadline_{};  // the current head's or body's
  const char* read_deadline_reason_ = "";

  // The current exchange.
  uint64_t seq_ = 0;
  bool exchange_open_ = false;  // dispatched, its answer not yet fully written
  bool answered_ = false;
  Ending ending_ = Ending::kNone;
  std::function<void(bool delivered)> finished_callback_;
  bool keep_alive_ = true;
  bool close_after_ = false;
  bool head_request_ = false;
  bool http10_ = false;
  Headers request_codings_;  // the current request's Accept-Encoding fields (apply_gzip)
  bool stream_ended_ = false;
  bool chunked_ = false;
  Exchange::StreamOptions stream_options_;
  // Why the connection closes once its last answer is out: "done" (Connection: close, HTTP/1.0,
  // draining) or "refused_request"; while lingering, the reason it will be counted with.
  const char* close_reason_ = "done";
};

namespace {

class ExchangeImpl final : public Exchange {
 public:
  ExchangeImpl(std::shared_ptr<Connection> connection, uint64_t seq, Request request)
      : connection_(std::move(connection)), seq_(seq), request_(std::move(request)) {}

  const Request& request() const override { return request_; }

  void respond(Response response) override {
    net::dispatch(connection_->executor(),
                  [c = connection_, seq = seq_, r = std::move(response)]() mutable {
                    c->respond(seq, std::move(r));
                  });
  }
  void start_stream(Response head, StreamOptions options) override {
    net::dispatch(connection_->executor(), [c = connection_, seq = seq_, h = std::move(head),
                                            o = std::move(options)]() mutable {
      c->start_stream(seq, std::move(h), std::move(o));
    });
  }
  void write(std::string chunk) override {
    net::dispatch(connection_->executor(),
                  [c = connection_, seq = seq_, d = std::move(chunk)]() mutable {
                    c->write_chunk(seq, std::move(d));
                  });
  }
  void end_stream() override {
    net::dispatch(connection_->executor(), [c = connection_, seq = seq_] { c->end_stream(seq); });
  }
  void defer(std::function<void()> task) override {
    net::post(connection_->executor(), std::move(task));
  }
  void on_finished(std::function<void(bool delivered)> callback) override {
    net::dispatch(connection_->executor(),
                  [c = connection_, seq = seq_, cb = std::move(callback)]() mutable {
                    c->set_finished_callback(seq, std::move(cb));
                  });
  }

 private:
  const std::shared_ptr<Connection> connection_;
  const uint64_t seq_;
  const Request request_;
};

}  // namespace

// --- Connection ---------------------------------------------------------------------------------

void Connection::arm(ConnectionClock::time_point due, const char* reason) {
  ++timer_generation_;
  deadline_reason_ = reason;
  timer_.expires_at(due);
  timer_.async_wait([self = shared_from_this(),
                     generation = timer_generation_](const boost::system::error_code& ec) {
    if (ec || generation != self->timer_generation_ || self->phase_ == Phase::kClosed) return;
    const std::string_view reason = self->deadline_reason_;
    if (reason == "keepalive") {
      // A quiet stream gets its keep-alive bytes; the next write re-arms the timer.
      if (self->phase_ == Phase::kStreaming && !self->stream_ended_) {
        self->enqueue(self->chunked_ ? chunk_frame(self->stream_options_.keepalive)
                                     : self->stream_options_.keepalive);
      }
      return;
    }
    self->close(self->deadline_reason_);
  });
}

void Connection::disarm() {
  ++timer_generation_;
  timer_.cancel();
}

size_t Connection::read_room() const {
  const size_t have = buffer_.size();
  switch (phase_) {
    case Phase::kIdle:
    case Phase::kReading: {
      if (reader_.head_done()) return kReadChunk;  // the reader takes body bytes at once
      // A head may grow to one byte past its limit, so that the reader sees it is over.
      const size_t cap = static_cast<size_t>(server_->options.limits.max_header_bytes) + 1;
      return have < cap ? std::min(cap - have, kReadChunk) : 0;
    }
    case Phase::kHandling:
    case Phase::kResponding:
    case Phase::kStreaming: {
      // Pipelined bytes wait here, at most one head's worth; beyond it reading stops (and so
      // does noticing a close, until the answer is out).
      const auto cap = static_cast<size_t>(server_->options.limits.max_header_bytes);
      return have < cap ? std::min(cap - have, kReadChunk) : 0;
    }
    case Phase::kLingering:
      return kReadChunk;
    case Phase::kHandshake:
    case Phase::kClosed:
      return 0;
  }
  return 0;
}

void Connection::enter_idle() {
  phase_ = Phase::kIdle;
  arm(ConnectionClock::now() + server_->options.idle_timeout, "idle_timeout");
  if (buffer_.size() > 0) {
    parse();  // a pipelined request is already here
    return;
  }
  // An idle connection holds no read buffers: it waits for readability, then reads. (Not over
  // TLS, whose stream may hold a decrypted request already: it reads at once.)
  if (!read_pending_ && !tls_) {
    scratch_ = {};
    buffer_.shrink_to_fit();
  }
  wait_readable();
}

void Connection::wait_readable() {
  if (read_pending_ || phase_ == Phase::kClosed) return;
  if (tls_) return read_some();
  read_pending_ = true;
  socket_.async_wait(tcp::socket::wait_read,
                     [self = shared_from_this()](const boost::system::error_code& ec) {
                       self->read_pending_ = false;
                       if (self->phase_ == Phase::kClosed) return;
                       if (ec) return self->close("client");
                       self->read_some();
                     });
}

void Connection::read_some() {
  if (read_pending_ || phase_ == Phase::kClosed) return;
  const size_t room = read_room();
  if (room == 0) return;
  read_pending_ = true;
  // Into a buffer of the read's own, copied into buffer_ when it completes: buffer_ is parsed
  // and consumed (its storage moved) while a read is pending (the close watch while a request
  // is handled), which must not move the memory the socket writes into.
  scratch_.resize(room);
  async_read_some(net::buffer(scratch_),
                  [self = shared_from_this()](const boost::system::error_code& ec, size_t n) {
                    self->on_read(ec, n);
                  });
}

void Connection::on_read(const boost::system::error_code& ec, size_t n) {
  read_pending_ = false;
  if (phase_ == Phase::kClosed) return;
  if (ec) {
    if (writing_ && (phase_ == Phase::kResponding || phase_ == Phase::kStreaming)) {
      // A write is in flight: its completion says whether the answer went out. A client that
      // read a whole answer and closed can be seen here before that completion runs (both
      // queue on the strand), and the answer it got must not count as abandoned.
      peer_closed_ = true;
      return;
    }
    // The end of the stream or a broken connection, in whatever phase: the client is gone
    // (a request it had not finished, or one being answered, goes with it).
    return close(phase_ == Phase::kLingering ? "done" : "client");
  }
  buffer_.commit(net::buffer_copy(buffer_.prepare(n), net::buffer(scratch_.data(), n)));
  switch (phase_) {
    case Phase::kIdle:
    case Phase::kReading:
      parse();
      return;
    case Phase::kLingering:
      buffer_.consume(buffer_.size());
      read_some();
      return;
    default:
      read_some();  // pipelined bytes, kept for later; go on watching for a close
      return;
  }
}

void Connection::parse() {
  while (phase_ == Phase::kIdle || phase_ == Phase::kReading) {
    if (buffer_.size() == 0 && !reader_.complete()) {
      if (phase_ == Phase::kIdle) {
        wait_readable();
      } else {
        read_some();
      }
      return;
    }
    const RequestReader::Result r = reader_.read(buffered());
    buffer_.consume(r.consumed);
    if (phase_ == Phase::kIdle && reader_.started()) {
      // The first byte of a request: the whole head is due within header_timeout from now.
      phase_ = Phase::kReading;
      read_deadline_ = ConnectionClock::now() + listener_.header_timeout;
      read_deadline_reason_ = "header_timeout";
      arm(read_deadline_, read_deadline_reason_);
    }
    switch (r.kind) {
      case RequestReader::Result::Kind::kNeedMore:
        if (buffer_.size() > 0 && r.consumed == 0) {
          // Nothing taken and bytes left: the reader waits for more of the head.
          read_some();
          return;
        }
        continue;
      case RequestReader::Result::Kind::kHead:
        read_deadline_ = ConnectionClock::now() + server_->options.body_timeout;
        read_deadline_reason_ = "body_timeout";
        arm(read_deadline_, read_deadline_reason_);
        if (reader_.expects_continue()) enqueue("HTTP/1.1 100 Continue\r\n\r\n");
        continue;
      case RequestReader::Result::Kind::kRequest:
        dispatch(reader_.take_request());
        return;
      case RequestReader::Result::Kind::kError:
        refuse(r.status, r.message);
        return;
    }
  }
}

void Connection::dispatch(Request request) {
  boost::system::error_code ec;
  const tcp::endpoint peer = socket_.remote_endpoint(ec);
  request.remote_address = client_;
  request.remote_port = ec ? 0 : peer.port();
  const std::optional<Target> target = split_target(request.target);
  if (!target) {
    return refuse(400, "the request target is not a path (or it does not percent-decode)");
  }
  request.path = target->path;
  request.query = target->query;
  keep_alive_ = listener_.keep_alive && client_keeps_alive(request);
  head_request_ = request.is_head();
  request_codings_ = Headers();
  for (const std::string_view value : request.headers.get_all("Accept-Encoding")) {
    request_codings_.add("Accept-Encoding", std::string(value));
  }
  http10_ = request.version < 11;
  phase_ = Phase::kHandling;
  disarm();
  ++seq_;
  exchange_open_ = true;
  answered_ = false;
  ending_ = Ending::kNone;
  finished_callback_ = nullptr;
  stream_ended_ = false;
  read_some();  // watch for the client's close (and keep what it pipelines)
  const auto exchange =
      std::make_shared<ExchangeImpl>(shared_from_this(), seq_, std::move(request));
  try {
    listener_.handler(exchange);
  } catch (const std::exception& e) {
    spdlog::error("http {} {}: the handler threw: {}", exchange->request().method,
                  exchange->request().path, e.what());
    respond(seq_, make_response(500, "internal error\n", "text/plain"));
  }
}

void Connection::refuse(int status, const std::string& message) {
  Response response = server_->refusal(listener_.name, status, message);
  // A body coded in a way the server does not undo: the codings it does (RFC 9110 15.5.16).
  if (status == 415) response.headers.set("Accept-Encoding", kRequestCodings);
  close_after_ = true;
  keep_alive_ = false;
  head_request_ = false;
  phase_ = Phase::kResponding;
  answered_ = true;
  disarm();
  enqueue(serialize_head(response, false, false, response.body.size(), false));
  enqueue(std::move(response.body));
  close_reason_ = "refused_request";
}

void Connection::respond(uint64_t seq, Response response) {
  if (seq != seq_ || answered_ || phase_ != Phase::kHandling) return;
  answered_ = true;
  phase_ = Phase::kResponding;
  apply_gzip(request_codings_, server_->options.gzip, response);
  const size_t length = response.body.size();
  enqueue(serialize_head(response, keep_alive(), http10_, length, false));
  if (!head_request_ && length > 0) enqueue(std::move(response.body));
}

void Connection::start_stream(uint64_t seq, Response head, Exchange::StreamOptions options) {
  if (seq != seq_ || answered_ || phase_ != Phase::kHandling) return;
  answered_ = true;
  phase_ = Phase::kStreaming;
  stream_options_ = std::move(options);
  // HTTP/1.0 has no chunks: the stream ends with the connection.
  chunked_ = !http10_;
  if (http10_) close_after_ = true;
  enqueue(serialize_head(head, keep_alive(), http10_, std::nullopt, chunked_ && !head_request_));
  if (head_request_) stream_ended_ = true;
}

void Connection::write_chunk(uint64_t seq, std::string chunk) {
  if (seq != seq_ || phase_ != Phase::kStreaming || stream_ended_ || chunk.empty()) return;
  enqueue(chunked_ ? chunk_frame(chunk) : std::move(chunk));
}

void Connection::end_stream(uint64_t seq) {
  if (seq != seq_ || phase_ != Phase::kStreaming || stream_ended_) return;
  stream_ended_ = true;
  if (chunked_) {
    enqueue("0\r\n\r\n");
  } else if (!writing_) {
    on_drained();
  }
}

void Connection::set_finished_callback(uint64_t seq, std::function<void(bool delivered)> callback) {
  if (seq != seq_ || !callback) return;
  if (ending_ != Ending::kNone) return callback(ending_ == Ending::kDelivered);
  finished_callback_ = std::move(callback);
}

void Connection::end_exchange(Ending ending) {
  if (!exchange_open_) return;
  exchange_open_ = false;
  ending_ = ending;
  if (auto callback = std::exchange(finished_callback_, nullptr)) {
    callback(ending == Ending::kDelivered);
  }
}

void Connection::enqueue(std::string bytes) {
  if (phase_ == Phase::kClosed || bytes.empty()) return;
  out_.push_back(std::move(bytes));
  if (!writing_) write_next();
}

void Connection::write_next() {
  if (out_.empty()) {
    writing_ = false;
    on_drained();
    return;
  }
  writing_ = true;
  std::array<net::const_buffer, kMaxGather> buffers;
  size_t count = 0;
  for (auto it = out_.begin(); it != out_.end() && count < kMaxGather; ++it, ++count) {
    const size_t skip = count == 0 ? out_offset_ : 0;
    buffers[count] = net::buffer(it->data() + skip, it->size() - skip);
  }
  // Each write that makes progress restarts the clock: a slow reader that keeps reading is
  // served, one that stops is cut.
  arm(ConnectionClock::now() + server_->options.write_timeout, "write_timeout");
  async_write_some(
      std::vector<net::const_buffer>(buffers.begin(), buffers.begin() + static_cast<long>(count)),
      [self = shared_from_this()](const boost::system::error_code& ec, size_t n) {
        if (self->phase_ == Phase::kClosed) return;
        if (ec) return self->close("client");
        while (n > 0 && !self->out_.empty()) {
          const size_t left = self->out_.front().size() - self->out_offset_;
          if (n >= left) {
            n -= left;
            self->out_.pop_front();
            self->out_offset_ = 0;
          } else {
            self->out_offset_ += n;
            n = 0;
          }
        }
        self->write_next();
        // The client closed while this write was in flight: once nothing is left to write, a
        // stream still open goes with it (its job is cancelled); a whole answer that went out
        // has been counted delivered, and the next read sees the close again.
        if (self->peer_closed_ && !self->writing_ && self->phase_ == Phase::kStreaming) {
          self->close("client");
        }
      });
}

void Connection::on_drained() {
  switch (phase_) {
    case Phase::kReading:
      // A 100 Continue went out: the body's deadline again.
      arm(read_deadline_, read_deadline_reason_);
      return;
    case Phase::kResponding:
      finish_exchange();
      return;
    case Phase::kStreaming:
      if (stream_ended_) return finish_exchange();
      if (stream_options_.keepalive_every.count() > 0 && !stream_options_.keepalive.empty()) {
        arm(ConnectionClock::now() + stream_options_.keepalive_every, "keepalive");
      } else {
        disarm();
      }
      return;
    default:
      return;
  }
}

void Connection::finish_exchange() {
  answered_ = true;
  end_exchange(Ending::kDelivered);  // the whole answer is written
  if (!keep_alive()) return linger_close(close_reason_);
  enter_idle();
}

void Connection::linger_close(const char* reason) {
  phase_ = Phase::kLingering;
  boost::system::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_send, ignored);
  buffer_.consume(buffer_.size());
  deadline_reason_ = reason;
  ++timer_generation_;
  timer_.expires_after(kLingerTime);
  timer_.async_wait([self = shared_from_this(), generation = timer_generation_,
                     reason](const boost::system::error_code& ec) {
    if (ec || generation != self->timer_generation_) return;
    self->close(reason);
  });
  close_reason_ = reason;
  read_some();
}

void Connection::close(const char* reason) {
  if (phase_ == Phase::kClosed) return;
  if (phase_ == Phase::kLingering) reason = close_reason_;
  phase_ = Phase::kClosed;
  disarm();
  boost::system::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  out_.clear();
  end_exchange(Ending::kAbandoned);  // its answer was not written in full
  if (server_->options.observer.closed) server_->options.observer.closed(listener_.name, reason);
  server_->forget(this);
}

}  // namespace cube3d::http

namespace cube3d::http {

// --- Server -------------------------------------------------------------------------------------

Response Server::Impl::refusal(const std::string& listener, int status,
                               const std::string& message) const {
  if (options.refusal) return options.refusal(listener, status, message);
  return make_response(status, message + "\n", "text/plain; charset=utf-8");
}

void Server::Impl::accept(ListenerState& listener) {
  listener.acceptor.async_accept(
      net::make_strand(ioc),
      // `this`, not a shared pointer: the io_context (ours) never runs a handler after us.
      [this, &listener](const boost::system::error_code& ec, tcp::socket socket) {
        on_accept(listener, ec, std::move(socket));
      });
}

void Server::Impl::on_accept(ListenerState& listener, const boost::system::error_code& ec,
                             tcp::socket socket) {
  if (stopping.load() || ec == net::error::operation_aborted) return;
  if (ec) {
    // Out of descriptors (or memory): the pending connection stays in the backlog; try again
    // shortly rather than spinning, and say so now and then.
    const auto now = ConnectionClock::now();
    if (now - listener.last_accept_warning > std::chrono::seconds(5)) {
      listener.last_accept_warning = now;
      spdlog::warn("http {}: accept failed: {} (open connections: {})", listener.name, ec.message(),
                   listener.open.load());
    }
    listener.retry.expires_after(kAcceptBackoff);
    listener.retry.async_wait([this, &listener](const boost::system::error_code& wait_ec) {
      if (!wait_ec && !stopping.load()) accept(listener);
    });
    return;
  }
  const std::string client = client_address(socket);
  const char* refused = nullptr;
  if (listener.open.load() >= options.max_connections) {
    refused = "max_connections";
  } else {
    const std::lock_guard lock(listener.clients_mutex);
    int64_t& count = listener.per_client[client];
    if (count >= options.max_connections_per_client) {
      refused = "max_connections_per_client";
    } else {
      ++count;
    }
    if (count == 0) listener.per_client.erase(client);
  }
  if (refused) {
    boost::system::error_code ignored;
    // A reset, not a FIN: the refused connection costs nothing more (no TIME_WAIT here).
    socket.set_option(net::socket_base::linger(true, 0), ignored);
    socket.close(ignored);
    if (options.observer.refused) options.observer.refused(listener.name, refused);
  } else {
    listener.open.fetch_add(1);
    auto connection =
        std::make_shared<Connection>(shared_from_this(), listener, std::move(socket), client);
    {
      const std::lock_guard lock(connections_mutex);
      connections.emplace(connection.get(), connection);
    }
    if (options.observer.opened) options.observer.opened(listener.name);
    net::dispatch(connection->executor(), [connection] { connection->start(); });
  }
  accept(listener);
}

void Server::Impl::forget(Connection* connection) {
  ListenerState& listener = connection->listener();
  {
    const std::lock_guard lock(listener.clients_mutex);
    const auto it = listener.per_client.find(connection->client());
    if (it != listener.per_client.end() && --it->second <= 0) listener.per_client.erase(it);
  }
  listener.open.fetch_sub(1);
  {
    const std::lock_guard lock(connections_mutex);
    connections.erase(connection);
  }
  connections_changed.notify_all();
}

Server::Server(ServerOptions options, std::vector<Listener> listeners)
    : impl_(std::make_shared<Impl>(std::move(options))) {
  Impl& impl = *impl_;
  for (Listener& l : listeners) {
    const std::string address = l.address;
    const std::string key = l.config_key.empty() ? l.name : l.config_key;
    auto state =
        std::make_unique<ListenerState>(impl.ioc, std::move(l), impl.options.header_timeout);
    // Port 0 (a free port, for tests) is not a valid config value, but is one here.
    HostPort at;
    const size_t colon = address.rfind(':');
    if (colon != std::string::npos && address.substr(colon + 1) == "0") {
      at = parse_host_port(address.substr(0, colon) + ":1", key);
      at.port = 0;
    } else {
      at = parse_host_port(address, key);
    }
    boost::system::error_code ec;
    tcp::resolver resolver(impl.ioc);
    const auto endpoints =
        resolver.resolve(at.host, std::to_string(at.port),
                         tcp::resolver::passive | tcp::resolver::numeric_service, ec);
    if (ec || endpoints.empty()) {
      throw unavailable(key + " " + address +
                        ": cannot listen on this address: " + (ec ? ec.message() : "no such host"));
    }
    const tcp::endpoint endpoint = endpoints.begin()->endpoint();
    tcp::acceptor& acceptor = state->acceptor;
    acceptor.open(endpoint.protocol(), ec);
    // SO_REUSEADDR only (no SO_REUSEPORT): a second server on a busy port must fail to start
    // rather than silently share the traffic.
    if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor.bind(endpoint, ec);
    if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
    if (ec) {
      // The bind's own reason: "in use" only when it said EADDRINUSE.
      const std::string reason = ec.category() == boost::system::system_category()
                                     ? listen_failure_reason(ec.value())
                                     : ec.message();
      throw unavailable(key + " " + address + ": cannot listen on this address: " + reason);
    }
    state->port = acceptor.local_endpoint().port();
    impl.listeners.push_back(std::move(state));
  }
  impl.work.emplace(impl.ioc.get_executor());
  for (auto& listener : impl.listeners) impl.accept(*listener);
  const auto threads = static_cast<size_t>(std::max<int64_t>(1, impl.options.io_threads));
  for (size_t i = 0; i < threads; ++i) {
    impl.threads.emplace_back([&impl] {
      for (;;) {
        try {
          impl.ioc.run();
          return;
        } catch (const std::exception& e) {
          spdlog::error("http: an I/O handler threw: {}", e.what());
        }
      }
    });
  }
}

Server::~Server() { stop(std::chrono::milliseconds(0)); }

int Server::port(const std::string& listener) const {
  for (const auto& l : impl_->listeners) {
    if (l->name == listener) return l->port;
  }
  throw internal_error("http: no listener named '" + listener + "'");
}

void Server::set_draining(bool draining) { impl_->draining = draining; }

Server::Stats Server::stats(const std::string& listener) const {
  for (const auto& l : impl_->listeners) {
    if (l->name == listener) return Stats{l->open.load()};
  }
  return {};
}

void Server::stop(std::chrono::milliseconds grace) {
  Impl& impl = *impl_;
  const std::lock_guard stop_lock(impl.stop_mutex);
  if (impl.stopped) return;
  impl.stopped = true;
  impl.stopping = true;
  for (auto& listener : impl.listeners) {
    net::dispatch(listener->acceptor.get_executor(), [&listener = *listener] {
      boost::system::error_code ignored;
      listener.acceptor.close(ignored);
      listener.retry.cancel();
    });
  }
  const auto shut_all = [&impl](bool force) {
    std::vector<std::shared_ptr<Connection>> open;
    {
      const std::lock_guard lock(impl.connections_mutex);
      for (const auto& [raw, weak] : impl.connections) {
        if (auto c = weak.lock()) open.push_back(std::move(c));
      }
    }
    for (const auto& c : open) {
      net::dispatch(c->executor(), [c, force] { c->begin_shutdown(force); });
    }
  };
  shut_all(false);
  {
    std::unique_lock lock(impl.connections_mutex);
    impl.connections_changed.wait_for(lock, grace, [&impl] { return impl.connections.empty(); });
  }
  shut_all(true);
  {
    std::unique_lock lock(impl.connections_mutex);
    impl.connections_changed.wait_for(lock, std::chrono::seconds(5),
                                      [&impl] { return impl.connections.empty(); });
  }
  impl.work.reset();
  impl.ioc.stop();
  for (auto& t : impl.threads) t.join();
  impl.threads.clear();
}

}  // namespace cube3d::http
