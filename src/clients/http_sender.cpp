#include "cube3d/clients/http_sender.h"

#include <google/protobuf/util/json_util.h>

#include <sys/socket.h>

#include <spdlog/spdlog.h>
#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "cube3d/clients/cache_status.h"
#include "cube3d/clients/http_error_status.h"
#include "cube3d/clients/sse_parser.h"
#include "cube3d/core/error.h"

namespace cube3d {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;

constexpr const char* kStreamPath = "/v1/meshes:generateStream";

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// How long a TLS connection closed in good order waits for the server's close_notify. It runs
// after a request's clock stopped.
constexpr std::chrono::milliseconds kTlsShutdownGrace{500};

// What every request of a factory shares.
struct Target {
  HostPort address;
  std::string host_header;  // the address as given
  std::string timeout_ms;   // X-Request-Timeout-Ms
  std::chrono::milliseconds deadline;
  std::string authorization;  // "Bearer <key>" or empty
  // HTTPS: the client context (roots, peer verification; thread-safe to make connections
  // from), and the name the server's certificate must carry. Null: plain HTTP.
  std::shared_ptr<ssl::context> tls;
  std::string tls_name;
  bool tls_name_is_address = false;  // no SNI for an IP address (RFC 6066)
  // The first failed handshake's reason is logged once a factory: a wrong CA or name fails
  // every request the same way, and the report can only count them.
  mutable std::once_flag handshake_failure_logged;
};

std::string status_of_transport_error(const beast::error_code& ec) {
  return ec == beast::error::timeout ? "DEADLINE_EXCEEDED" : "UNAVAILABLE";
}

// Whether `ec` says that the server had closed the connection: its end of the stream, a reset,
// a write into a closed socket, a TLS stream cut without close_notify.
bool closed_by_server(const beast::error_code& ec) {
  return ec == http::error::end_of_stream || ec == net::error::eof ||
         ec == net::error::connection_reset || ec == net::error::broken_pipe ||
         ec == ssl::error::stream_truncated;
}

bool is_decoding(const std::string& progress_json) {
  v1::Progress progress;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;  // a newer server may say more
  return google::protobuf::util::JsonStringToMessage(progress_json, &progress, options).ok() &&
         progress.stage() == v1::STAGE_DECODING;
}

// One answer's event stream as it arrives: when decoding began, and how the stream ended.
struct StreamState {
  SteadyClock::time_point sent;
  SseParser sse;
  std::optional<double> ttft_ms;
  std::optional<std::string> result;        // the result event's data
  std::optional<std::string> error_status;  // from an error event

  void on_bytes(std::string_view bytes) {
    for (SseEvent& event : sse.feed(bytes)) on_event(std::move(event));
  }

  void on_event(SseEvent event) {
    if (result || error_status) return;  // the answer came; anything after it is no answer
    if (event.event == "progress") {
      if (!ttft_ms && is_decoding(event.data)) ttft_ms = ms_since(sent);
    } else if (event.event == "result") {
      result = std::move(event.data);
    } else if (event.event == "error") {
      error_status = status_of_error_event(event.data);
    }
  }
};

class HttpSender final : public RequestSender {
 public:
  explicit HttpSender(std::shared_ptr<const Target> target) : target_(std::move(target)) {}
  ~HttpSender() override {
    if (open_ && tls_) close(/*orderly=*/true);  // close_notify; a plain stream just closes
  }
  HttpSender(const HttpSender&) = delete;
  HttpSender& operator=(const HttpSender&) = delete;

  RequestRecord send(const v1::GenerateMeshRequest& request,
                     SteadyClock::time_point phase_start) override;

 private:
  // Runs one asynchronous operation to its end on this sender's io_context: `start(handler)`
  // starts it; returns its error.
  template <typename Start>
  beast::error_code run(Start start) {
    beast::error_code result;
    start([&result](const beast::error_code& ec, auto&&...) { result = ec; });
    io_.restart();
    io_.run();
    return result;
  }

  // Runs `operation(stream)` on the connection's stream: the TLS stream over HTTPS, the TCP
  // stream otherwise.
  template <typename Operation>
  void on_stream(Operation&& operation) {
    if (tls_) {
      operation(*tls_);
    } else {
      operation(stream_);
    }
  }
  // The TCP stream under the connection (its expiry is every operation's deadline).
  beast::tcp_stream& tcp() { return tls_ ? beast::get_lowest_layer(*tls_) : stream_; }

  beast::error_code connect();
  // HTTPS: the handshake on the new connection, the peer checked for the target's name.
  beast::error_code handshake();
  // Whether the open connection can take the next request.
  bool reusable();
  // Writes `req` on the open connection and reads the head of its answer into `parser`.
  beast::error_code write_and_read_head(const http::request<http::string_body>& req,
                                        http::response_parser<http::string_body>& parser);
  // The same on the kept connection or a new one; once more on a new one when the kept one
  // turns out to have been closed by the server.
  beast::error_code exchange_head(const http::request<http::string_body>& req,
                                  http::response_parser<http::string_body>& parser);
  // `orderly`: the connection is in good order (its answers read), so a TLS connection says
  // close_notify first; otherwise the socket just closes.
  void close(bool orderly = false);
  // The HTTP request of `request`; none when it cannot be written as JSON.
  std::optional<http::request<http::string_body>> make_request(
      const v1::GenerateMeshRequest& request) const;

  const std::shared_ptr<const Target> target_;
  net::io_context io_{1};
  beast::tcp_stream stream_{io_};  // plain HTTP
  // HTTPS: one a connection (an SSL session cannot be used again once it was shut down).
  std::unique_ptr<beast::ssl_stream<beast::tcp_stream>> tls_;
  std::string verify_failure_;        // why the certificate check failed, when it did
  SteadyClock::time_point deadline_;  // the current request's
  beast::flat_buffer buffer_;         // what was read past the last answer
  bool open_ = false;
};

beast::error_code HttpSender::connect() {
  beast::error_code ec;
  tcp::resolver resolver(io_);
  const auto endpoints = resolver.resolve(target_->address.host, target_->address.port,
                                          tcp::resolver::numeric_service, ec);
  if (ec) return ec;
  if (target_->tls) {
    tls_ = std::make_unique<beast::ssl_stream<beast::tcp_stream>>(io_, *target_->tls);
    tcp().expires_at(deadline_);  // the request's: the connect and the handshake within it
  }
  ec = run([&](auto handler) { tcp().async_connect(endpoints, std::move(handler)); });
  if (ec) return ec;
  beast::error_code ignored;
  tcp().socket().set_option(tcp::no_delay(true), ignored);  // the request goes out at once
  open_ = true;
  if (tls_) ec = handshake();
  return ec;
}

beast::error_code HttpSender::handshake() {
  const std::string& name = target_->tls_name;
  if (!target_->tls_name_is_address &&
      SSL_set_tlsext_host_name(tls_->native_handle(), name.c_str()) != 1) {
    return beast::error_code(static_cast<int>(::ERR_get_error()), net::error::get_ssl_category());
  }
  verify_failure_.clear();
  tls_->set_verify_callback([this, check = ssl::host_name_verification(name)](
                                bool preverified, ssl::verify_context& context) mutable {
    if (!preverified) {
      // The chain: an unknown issuer, a self-signed certificate, an expired one.
      const int error = X509_STORE_CTX_get_error(context.native_handle());
      verify_failure_ = X509_verify_cert_error_string(error);
      return false;
    }
    if (check(preverified, context)) return true;
    verify_failure_ = "the certificate is not for '" + target_->tls_name + "'";
    return false;
  });
  const beast::error_code ec = run(
      [&](auto handler) { tls_->async_handshake(ssl::stream_base::client, std::move(handler)); });
  if (ec && ec != beast::error::timeout) {
    std::call_once(target_->handshake_failure_logged, [&] {
      spdlog::warn("HTTPS: the TLS handshake with {} failed: {}{}", target_->host_header,
                   verify_failure_.empty() ? ec.message() : verify_failure_,
                   verify_failure_.empty() ? "" : " (check --ca and --server-name)");
    });
  }
  return ec;
}

bool HttpSender::reusable() {
  if (buffer_.size() > 0) return false;  // the server sent more than its answer
  // Closed by the server while idle (its idle timeout, a restart): the end of the stream is
  // readable. A peek that would block means the connection is still there.
  char byte = 0;
  const ssize_t n = ::recv(tcp().socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

beast::error_code HttpSender::write_and_read_head(
    const http::request<http::string_body>& req, http::response_parser<http::string_body>& parser) {
  beast::error_code ec = run([&](auto handler) {
    on_stream([&](auto& s) { http::async_write(s, req, std::move(handler)); });
  });
  if (ec) return ec;
  return run([&](auto handler) {
    on_stream([&](auto& s) { http::async_read_header(s, buffer_, parser, std::move(handler)); });
  });
}

beast::error_code HttpSender::exchange_head(const http::request<http::string_body>& req,
                                            http::response_parser<http::string_body>& parser) {
  const bool kept = open_;
  beast::error_code ec = kept ? beast::error_code() : connect();
  if (!ec) ec = write_and_read_head(req, parser);
  // reusable() sees a close that has arrived. One still on its way (the server closes right
  // after an answer, or its idle timeout fires as the request goes out) shows as the write or
  // the read failing before a byte of an answer came: the request goes out again on a new
  // connection, once, within the same deadline, as curl does with a kept connection. (A server
  // that died with the request read refuses the new connection.)
  if (ec && kept && closed_by_server(ec) && !parser.got_some() && buffer_.size() == 0) {
    close();
    ec = connect();
    if (!ec) ec = write_and_read_head(req, parser);
  }
  return ec;
}

void HttpSender::close(bool orderly) {
  if (tls_ && orderly) {
    // close_notify, so that the server sees an end rather than a truncation; bounded, as the
    // server may never answer it.
    tcp().expires_after(kTlsShutdownGrace);
    run([&](auto handler) { tls_->async_shutdown(std::move(handler)); });
  }
  beast::error_code ignored;
  tcp().socket().shutdown(tcp::socket::shutdown_both, ignored);
  tcp().close();
  tls_.reset();
  buffer_.clear();
  open_ = false;
}

std::optional<http::request<http::string_body>> HttpSender::make_request(
    const v1::GenerateMeshRequest& request) const {
  http::request<http::string_body> req{http::verb::post, kStreamPath, 11};
  req.set(http::field::host, target_->host_header);
  req.set(http::field::content_type, "application/json");
  req.set(http::field::accept, "text/event-stream");
  req.set("X-Request-Timeout-Ms", target_->timeout_ms);
  if (!target_->authorization.empty()) req.set(http::field::authorization, target_->authorization);
  req.keep_alive(true);
  // Fails only for a string that is not UTF-8 (a prompt file in another encoding).
  if (!google::protobuf::util::MessageToJsonString(request, &req.body()).ok()) return std::nullopt;
  req.prepare_payload();
  return req;
}

RequestRecord HttpSender::send(const v1::GenerateMeshRequest& request,
                               SteadyClock::time_point phase_start) {
  RequestRecord record;
  const auto req = make_request(request);
  if (!req) {
    record.send_offset_s = ms_since(phase_start) / 1000.0;
    record.status = "INVALID_ARGUMENT";  // what the server says to such a prompt over gRPC
    return record;
  }
  StreamState stream;
  stream.sent = SteadyClock::now();
  record.send_offset_s = ms_between(phase_start, stream.sent) / 1000.0;
  // Every operation below, together (the connect and the TLS handshake too).
  deadline_ = stream.sent + target_->deadline;
  tcp().expires_at(deadline_);

  // The head of the answer, on the kept connection when the server has not closed it.
  if (open_ && !reusable()) close();
  http::response_parser<http::string_body> parser;
  // A mesh can be large. (Not boost::none: Boost 1.74 compares a Content-Length against an
  // empty limit as if it were exceeded.)
  parser.body_limit(std::numeric_limits<uint64_t>::max());
  auto on_chunk = [&stream](uint64_t /*remain*/, beast::string_view body, beast::error_code&) {
    stream.on_bytes(std::string_view(body.data(), body.size()));
    return body.size();
  };
  parser.on_chunk_body(on_chunk);
  beast::error_code ec = exchange_head(*req, parser);
  if (ec) {
    close();
    record.e2e_ms = ms_since(stream.sent);
    record.status = status_of_transport_error(ec);
    return record;
  }

  // The body: events as they come (chunked), or a body of known length.
  if (!parser.is_done()) {
    ec = run([&](auto handler) {
      on_stream([&](auto& s) { http::async_read(s, buffer_, parser, std::move(handler)); });
    });
  }
  const unsigned http_status = parser.get().result_int();
  const bool success = http_status / 100 == 2;
  if (success && !parser.chunked()) stream.on_bytes(parser.get().body());

  if (!success) {
    record.status = status_of_http_error(static_cast<int>(http_status), parser.get().body());
  } else if (stream.result) {
    // Read like gRPC reads its result message, before the clock stops. Only the timings and
    // the cache status are kept; a result that cannot be read is the server's (or the
    // gateway's) fault.
    v1::GenerateMeshResponse response;
    google::protobuf::util::JsonParseOptions options;
    options.ignore_unknown_fields = true;
    if (google::protobuf::util::JsonStringToMessage(*stream.result, &response, options).ok()) {
      record.status = "OK";
      record.queue_ms = response.timings().queue_ms();
      // The result says it (cacheStatus); X-Cache, which the server sets on mesh-file
      // answers, is the fallback should a stream's head carry it instead.
      const auto x_cache = parser.get()["X-Cache"];
      record.cache = http_cache_status(response.cache_status(),
                                       std::string_view(x_cache.data(), x_cache.size()));
    } else {
      record.status = "INTERNAL";
    }
  } else if (stream.error_status) {
    record.status = *stream.error_status;
  } else if (ec) {
    record.status = status_of_transport_error(ec);
  } else {
    record.status = "NO_RESULT";
  }
  record.e2e_ms = ms_since(stream.sent);
  record.ttft_ms = stream.ttft_ms;
  if (ec || !parser.keep_alive()) close(/*orderly=*/!ec);  // after the clock stopped
  return record;
}

class HttpSenderFactory final : public SenderFactory {
 public:
  explicit HttpSenderFactory(std::shared_ptr<const Target> target) : target_(std::move(target)) {}

  std::unique_ptr<RequestSender> make_sender() const override {
    return std::make_unique<HttpSender>(target_);
  }

 private:
  const std::shared_ptr<const Target> target_;
};

// A client context that checks the server's chain against the --ca root, or the system's roots.
std::shared_ptr<ssl::context> client_tls_context(const ClientTls& tls) {
  auto context = std::make_shared<ssl::context>(ssl::context::tls_client);
  context->set_verify_mode(ssl::verify_peer);
  beast::error_code ec;
  if (tls.ca_pem.empty()) {
    context->set_default_verify_paths(ec);
    if (ec)
      throw failed_precondition("--tls: cannot load the system's root certificates: " +
                                ec.message());
  } else {
    context->add_certificate_authority(net::buffer(tls.ca_pem), ec);
    if (ec)
      throw invalid_argument("--ca " + tls.ca_path + ": not a usable certificate: " + ec.message());
  }
  return context;
}

}  // namespace

HostPort parse_host_port(std::string_view address) {
  HostPort out;
  std::string_view port;
  if (address.starts_with('[')) {
    const size_t close = address.find(']');
    if (close != std::string_view::npos && close + 1 < address.size() &&
        address[close + 1] == ':') {
      out.host = address.substr(1, close - 1);
      port = address.substr(close + 2);
    }
  } else if (const size_t colon = address.find(':');
             colon != std::string_view::npos &&
             address.find(':', colon + 1) == std::string_view::npos) {
    out.host = address.substr(0, colon);
    port = address.substr(colon + 1);
  }
  int port_number = 0;
  const auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), port_number);
  const bool port_ok = all_digits(port) && error == std::errc() &&
                       end == port.data() + port.size() && port_number >= 1 && port_number <= 65535;
  if (out.host.empty() || !port_ok) {
    throw invalid_argument(
        "--server: expected HOST:PORT (an IPv6 address in brackets, e.g. "
        "[::1]:8080), got '" +
        std::string(address) + "'");
  }
  out.port = port;
  return out;
}

std::unique_ptr<SenderFactory> make_http_sender_factory(const SenderOptions& options) {
  if (options.server.find(',') != std::string::npos) {
    throw invalid_argument("--server " + options.server +
                           ": several servers are balanced over gRPC only; over HTTP give one "
                           "(a load balancer's address)");
  }
  auto target = std::make_shared<Target>();
  target->address = parse_host_port(options.server);
  target->host_header = options.server;
  target->timeout_ms = std::to_string(options.deadline_ms);
  target->deadline = std::chrono::milliseconds(options.deadline_ms);
  target->authorization = bearer_authorization(options.api_key);
  if (options.tls.enabled) {
    target->tls = client_tls_context(options.tls);
    target->tls_name =
        options.tls.server_name.empty() ? target->address.host : options.tls.server_name;
    beast::error_code not_an_address;
    net::ip::make_address(target->tls_name, not_an_address);
    target->tls_name_is_address = !not_an_address;
  }
  return std::make_unique<HttpSenderFactory>(std::move(target));
}

}  // namespace cube3d
