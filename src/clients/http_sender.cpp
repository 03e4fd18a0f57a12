#include "cube3d/clients/http_sender.h"

#include <google/protobuf/util/json_util.h>

#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <limits>
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
using tcp = net::ip::tcp;

constexpr const char* kStreamPath = "/v1/meshes:generateStream";

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// What every request of a factory shares.
struct Target {
  HostPort address;
  std::string host_header;  // the address as given
  std::string timeout_ms;   // X-Request-Timeout-Ms
  std::chrono::milliseconds deadline;
  std::string authorization;  // "Bearer <key>" or empty
};

std::string status_of_transport_error(const beast::error_code& ec) {
  return ec == beast::error::timeout ? "DEADLINE_EXCEEDED" : "UNAVAILABLE";
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

  beast::error_code connect();
  // Whether the open connection can take the next request.
  bool reusable();
  void close();
  // The HTTP request of `request`; none when it cannot be written as JSON.
  std::optional<http::request<http::string_body>> make_request(
      const v1::GenerateMeshRequest& request) const;

  const std::shared_ptr<const Target> target_;
  net::io_context io_{1};
  beast::tcp_stream stream_{io_};
  beast::flat_buffer buffer_;  // what was read past the last answer
  bool open_ = false;
};

beast::error_code HttpSender::connect() {
  beast::error_code ec;
  tcp::resolver resolver(io_);
  const auto endpoints = resolver.resolve(target_->address.host, target_->address.port,
                                          tcp::resolver::numeric_service, ec);
  if (ec) return ec;
  ec = run([&](auto handler) { stream_.async_connect(endpoints, std::move(handler)); });
  if (ec) return ec;
  beast::error_code ignored;
  stream_.socket().set_option(tcp::no_delay(true), ignored);  // the request goes out at once
  open_ = true;
  return ec;
}

bool HttpSender::reusable() {
  if (buffer_.size() > 0) return false;  // the server sent more than its answer
  // Closed by the server while idle (its idle timeout, a restart): the end of the stream is
  // readable. A peek that would block means the connection is still there.
  char byte = 0;
  const ssize_t n = ::recv(stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

void HttpSender::close() {
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream_.close();
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
  stream_.expires_at(stream.sent + target_->deadline);  // every operation below, together

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
  beast::error_code ec = open_ ? beast::error_code() : connect();
  if (!ec) ec = run([&](auto handler) { http::async_write(stream_, *req, std::move(handler)); });
  if (!ec) {
    ec = run([&](auto handler) {
      http::async_read_header(stream_, buffer_, parser, std::move(handler));
    });
  }
  if (ec) {
    close();
    record.e2e_ms = ms_since(stream.sent);
    record.status = status_of_transport_error(ec);
    return record;
  }

  // The body: events as they come (chunked), or a body of known length.
  if (!parser.is_done()) {
    ec = run([&](auto handler) { http::async_read(stream_, buffer_, parser, std::move(handler)); });
  }
  const unsigned http_status = parser.get().result_int();
  const bool success = http_status / 100 == 2;
  if (success && !parser.chunked()) stream.on_bytes(parser.get().body());
  if (ec || !parser.keep_alive()) close();

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
  if (!options.api_key.empty()) target->authorization = "Bearer " + options.api_key;
  return std::make_unique<HttpSenderFactory>(std::move(target));
}

}  // namespace cube3d
