// The event-driven HTTP/1.1 server under the HTTP front door and the metrics endpoint: Boost.Beast
// over Asio, wrapped behind this small interface of ours so that routes never see the library.
//
// Threads: a fixed set of I/O threads (io_threads) serves every connection of every listener; a
// connection is a strand and a socket, and holds no thread. A handler runs on its connection's
// strand and must not block: it answers through its Exchange from any thread, whenever the
// answer is ready (the service core completes a generate call on its own threads).
//
// Per connection, one request at a time, answered in order (pipelined requests wait in a
// bounded buffer): keep-alive, HTTP/1.0 (keep-alive only when asked for), chunked request
// bodies, Expect: 100-continue, HEAD (the headers of GET, no body), Connection: close.
//
// Deadlines, each closing the connection (and abandoning its exchange) when missed:
//   idle_timeout    a kept-alive (or new) connection that starts no request;
//   header_timeout  the whole request head, from its first byte (however slowly it drips);
//   body_timeout    the whole body, from the end of the head;
//   write_timeout   a response that makes no write progress (a client that never reads).
// While a handler works on a request there is no deadline of the connection's own; the
// connection watches for the client's close (its exchange is abandoned at once).
// TLS (a listener's `tls`): Asio's SSL stream over the same socket (OpenSSL), under the server's
// one TLS policy (tls_policy.h: TLS 1.2 and 1.3, forward-secret AEAD suites), with the files
// checked by tls_files.h; the handshake is due within header_timeout of the accept (closed
// "header_timeout" when missed, "tls_handshake" when it fails: a client certificate that does
// not verify, no suite in common). A client that speaks plain HTTP to the port (its first bytes
// are a request line's, not a TLS record's) gets a plain "400 Bad Request" saying the port
// speaks HTTPS, then the close ("tls_handshake"). After the handshake everything
// runs as on a plain connection, under the same deadlines and limits. An
// idle TLS connection holds the SSL stream's buffers (~40 KiB, bounded by max_connections); a
// plain one holds none. A TLS connection ends with a TCP close, without close_notify: every
// answer is framed (Content-Length or chunked), so a client can tell a truncated one.
// gzip (options.gzip, content_coding.h): a whole answer is compressed for a client that accepts
// it (and every answer that could be says Vary: Accept-Encoding); a streamed one never is. A
// request body's Content-Encoding is undone by the request reader (gzip, deflate; 415 for
// another).
// Limits: max_connections per listener (beyond it a new connection is closed at once),
// max_connections_per_client (per remote address, per listener), and the request limits of
// request_reader.h, refused with their status through `refusal` and the connection closed.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cube3d/server/httpd/content_coding.h"
#include "cube3d/server/httpd/http_message.h"
#include "cube3d/server/httpd/request_reader.h"
#include "cube3d/server/httpd/tls_files.h"

namespace cube3d::http {

// One request being answered. Every method may be called from any thread; answers after the
// first (or after the exchange was abandoned) are ignored.
class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual const Request& request() const = 0;

  // The whole answer. Content-Length and Connection are set by the server.
  virtual void respond(Response response) = 0;

  // A streamed answer: the status and headers now (chunked for HTTP/1.1; for HTTP/1.0 the body
  // ends with the connection), then the chunks as they come. While nothing is written for
  // `keepalive_every`, `keepalive` is written (a comment line of Server-Sent Events), so that
  // proxies do not close a quiet stream.
  struct StreamOptions {
    std::string keepalive;
    std::chrono::milliseconds keepalive_every{0};  // 0: none
  };
  virtual void start_stream(Response head, StreamOptions options) = 0;
  virtual void write(std::string chunk) = 0;
  virtual void end_stream() = 0;

  // Runs `task` on the exchange's I/O thread (its connection's strand), in order with the
  // answers: for work that should not hold up the thread that has the news (turning a mesh
  // into JSON on the executor's thread, say).
  virtual void defer(std::function<void()> task) = 0;

  // `callback` runs once, on an I/O thread, when the exchange ends: delivered = true when its
  // answer was written in full; false when it was abandoned first (the client closed the
  // connection or broke it, a write made no progress within write_timeout, the server
  // stopped), so that the handler can cancel its work and count what the client really got.
  // Set it in the handler, before answering; set late, it runs at once.
  virtual void on_finished(std::function<void(bool delivered)> callback) = 0;
};

using Handler = std::function<void(const std::shared_ptr<Exchange>&)>;

// What the server reports about connections (metrics); each may be empty. Called on I/O
// threads, concurrently: keep them quick and thread-safe.
struct ServerObserver {
  std::function<void(const std::string& listener)> opened;
  // reason: client (closed by it, or broken), idle_timeout, header_timeout (the TLS handshake's
  // too), body_timeout, write_timeout, tls_handshake (a handshake that failed), refused_request (a
  // request the server refused itself), done (Connection: close, HTTP/1.0), server_stop.
  std::function<void(const std::string& listener, const std::string& reason)> closed;
  // reason: max_connections, max_connections_per_client.
  std::function<void(const std::string& listener, const std::string& reason)> refused;
  // A TLS handshake that failed (the connection then closes "tls_handshake"): the client's
  // address and OpenSSL's reason ("no shared cipher", "http request": plain HTTP on the port).
  std::function<void(const std::string& listener, const std::string& client,
                     const std::string& reason)>
      tls_failed;
};

struct ServerOptions {
  int64_t io_threads = 2;
  int64_t max_connections = 10'000;
  int64_t max_connections_per_client = 256;
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds body_timeout{60'000};
  std::chrono::milliseconds idle_timeout{60'000};
  std::chrono::milliseconds write_timeout{30'000};
  RequestLimits limits;
  GzipOptions gzip;
  // The answer to a request the server refuses itself (400, 413, 414, 417, 431, 501, 505), e.g.
  // a JSON error body; also the place to count it. Empty: a plain-text body.
  std::function<Response(const std::string& listener, int status, const std::string& message)>
      refusal;
  ServerObserver observer;
};

struct Listener {
  std::string name;        // for messages, metrics and port(): "http", "metrics"
  std::string address;     // host:port, [v6]:port; port 0 picks a free one
  std::string config_key;  // what names the address in an error ("http_listen")
  Handler handler;
  // This listener's own policy, where it is stricter than the server's: a shorter head
  // deadline (0: the server's), and whether connections are kept alive between requests.
  std::chrono::milliseconds header_timeout{0};
  bool keep_alive = true;
  std::optional<TlsOptions> tls = std::nullopt;  // HTTPS; none: plain HTTP
};

class Server {
 public:
  // Binds every listener (unavailable naming config_key and the bind's reason when an address
  // cannot be bound: the port is busy, the host is not this machine's; invalid_argument when it
  // is not host:port, or when a TLS listener's files do not load, naming the tls.* key and the
  // file) and starts serving on the I/O threads.
  Server(ServerOptions options, std::vector<Listener> listeners);
  ~Server();  // stop(0)
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port(const std::string& listener) const;
  // While draining, every response says Connection: close (clients reconnect, to other
  // replicas once this one leaves the load balancer).
  void set_draining(bool draining);
  // Stops accepting; closes idle connections at once; lets the answers in flight finish within
  // `grace` (their connections close after them), then closes what is left and joins the
  // threads. Idempotent.
  void stop(std::chrono::milliseconds grace);

  struct Stats {
    int64_t open_connections = 0;
  };
  Stats stats(const std::string& listener) const;

  struct Impl;  // opaque: Boost.Beast and Asio live behind it

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace cube3d::http
