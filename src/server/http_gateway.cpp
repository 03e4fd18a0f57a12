#include "cube3d/server/http_gateway.h"

#include <google/protobuf/util/json_util.h>
#include <httplib.h>
#include <netdb.h>
#include <poll.h>
#include <prometheus/text_serializer.h>
#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/core/logging.h"
#include "cube3d/core/net_address.h"
#include "cube3d/server/grpc_status.h"
#include "cube3d/server/http_status.h"

namespace cube3d {
namespace {

constexpr const char* kGeneratePath = "/v1/meshes:generate";
constexpr const char* kStreamPath = "/v1/meshes:generateStream";
constexpr const char* kTimeoutHeader = "X-Request-Timeout-Ms";
constexpr const char* kTimeoutParam = "timeout_ms";
constexpr const char* kRequestIdHeader = "X-Request-Id";
// A year: "no limit" for practical purposes, and far from overflowing the steady clock.
constexpr int64_t kMaxTimeoutMs = int64_t{365} * 24 * 3600 * 1000;
// Threads beyond the generate calls: probes, scrapes, idle keep-alive connections, errors.
constexpr int64_t kReservedThreads = 8;
// A quiet stream (a long wait in the queue) gets a comment line this often, so that proxies
// do not close it as idle.
constexpr auto kStreamKeepAlive = std::chrono::seconds(15);
// Also exactly the type cpp-httplib never compresses (a gzip stream would hold events back).
constexpr const char* kEventStreamType = "text/event-stream";

struct MeshMediaType {
  v1::MeshFormat format;
  const char* type;
  const char* extension;
};
// One media type per file format (RAW has none: it is JSON only).
constexpr MeshMediaType kMeshMediaTypes[] = {
    {v1::MESH_FORMAT_GLB, "model/gltf-binary", "glb"},
    {v1::MESH_FORMAT_OBJ, "model/obj", "obj"},
    {v1::MESH_FORMAT_PLY, "application/x-ply", "ply"},
};

const MeshMediaType* media_type_of(v1::MeshFormat format) {
  for (const auto& m : kMeshMediaTypes) {
    if (m.format == format) return &m;
  }
  return nullptr;
}

// An answer decided by the gateway itself (before or around the core).
class HttpError : public std::runtime_error {
 public:
  HttpError(int http_status, grpc::StatusCode code, const std::string& message,
            int64_t retry_after_seconds = 0)
      : std::runtime_error(message),
        http_status(http_status),
        code(code),
        retry_after_seconds(retry_after_seconds) {}
  int http_status;
  grpc::StatusCode code;
  int64_t retry_after_seconds;  // 0: no Retry-After
};

void reply_error(httplib::Response& res, int http_status, grpc::StatusCode code,
                 const std::string& message, int64_t retry_after_seconds = 0) {
  res.status = http_status;
  if (retry_after_seconds > 0) res.set_header("Retry-After", std::to_string(retry_after_seconds));
  res.set_content(http_error_body(http_status, code, message), "application/json");
}

// The scheduler's refusal when max_queue_size requests wait (scheduler.h): worth a retry soon,
// unlike a response over the message limit, which is RESOURCE_EXHAUSTED too.
bool is_queue_full(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
         status.error_message().starts_with("queue full");
}

// Headers the core asked for (add_trailer: "retry-after" over an API key's limit).
using Trailers = std::vector<std::pair<std::string, std::string>>;

void reply_status(httplib::Response& res, const grpc::Status& status, int64_t retry_after,
                  const Trailers& trailers = {}) {
  for (const auto& [key, value] : trailers) res.set_header(key, value);
  if (res.has_header("Retry-After")) retry_after = 0;  // the core's own value wins
  if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
    res.set_header("WWW-Authenticate", "Bearer");  // RFC 6750: how to authenticate
  }
  reply_error(res, http_status_of(status.error_code()), status.error_code(), status.error_message(),
              is_queue_full(status) ? retry_after : 0);
}

// The status of an answer cpp-httplib made itself (no route, a body over the limit, a request
// it could not parse), for the error body.
grpc::StatusCode code_of_http_status(int http_status) {
  switch (http_status) {
    case 400:
    case 414:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case 404:
      return grpc::StatusCode::NOT_FOUND;
    case 405:
      return grpc::StatusCode::UNIMPLEMENTED;
    case 413:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case 416:
      return grpc::StatusCode::OUT_OF_RANGE;
    default:
      return http_status >= 500 ? grpc::StatusCode::INTERNAL : grpc::StatusCode::UNKNOWN;
  }
}

const char* allowed_methods(const std::string& path) {
  if (path == kGeneratePath || path == kStreamPath) return "POST";
  if (path == "/healthz" || path == "/readyz" || path == "/metrics") return "GET, HEAD";
  return nullptr;
}

// Protobuf's parse errors span lines (the input and a caret): one line reads better in JSON.
std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

std::string to_json(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  // Every field, defaults included: HTTP clients have no generated defaults to fall back on.
  options.always_print_primitive_fields = true;
  std::string json;
  const auto status = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) {
    throw internal_error("cannot write " + message.GetTypeName() +
                         " as JSON: " + std::string(status.message()));
  }
  return json;
}

v1::GenerateMeshRequest parse_request(const std::string& body) {
  v1::GenerateMeshRequest request;
  // Unknown fields are an error (a misspelt field must not be silently dropped); both the
  // lowerCamelCase and the proto field names are read, as protobuf's JSON mapping defines.
  const google::protobuf::util::JsonParseOptions options;
  const auto status = google::protobuf::util::JsonStringToMessage(body, &request, options);
  if (!status.ok()) {
    throw HttpError(400, grpc::StatusCode::INVALID_ARGUMENT,
                    "the body is not a cube3d.v1.GenerateMeshRequest in JSON: " +
                        one_line(std::string(status.message())));
  }
  return request;
}

SteadyClock::time_point deadline_of(const httplib::Request& req, SteadyClock::time_point now) {
  std::string text;
  std::string source;
  if (req.has_header(kTimeoutHeader)) {
    text = req.get_header_value(kTimeoutHeader);
    source = std::string("header ") + kTimeoutHeader;
  } else if (req.has_param(kTimeoutParam)) {
    text = req.get_param_value(kTimeoutParam);
    source = std::string("query parameter ") + kTimeoutParam;
  } else {
    return SteadyClock::time_point::max();
  }
  int64_t ms = 0;
  const char* const end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, ms);
  if (error != std::errc() || stop != end || ms <= 0 || ms > kMaxTimeoutMs) {
    throw HttpError(400, grpc::StatusCode::INVALID_ARGUMENT,
                    source + " is '" + text + "': it must be a whole number of milliseconds, 1.." +
                        std::to_string(kMaxTimeoutMs));
  }
  return now + std::chrono::milliseconds(ms);
}

// What an Accept header asks for: mesh formats (by preference) and whether JSON will do.
struct Accepted {
  std::vector<v1::MeshFormat> meshes;
  bool json = false;
};

std::string trimmed_lower(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

Accepted parse_accept(const std::string& header) {
  Accepted accepted;
  if (trimmed_lower(header).empty()) {
    accepted.json = true;
    return accepted;
  }
  struct Range {
    std::string type;
    double q;
  };
  std::vector<Range> ranges;
  std::string_view rest = header;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const size_t semicolon = item.find(';');
    Range range{trimmed_lower(item.substr(0, semicolon)), 1.0};
    for (std::string_view params = semicolon == std::string_view::npos ? std::string_view()
                                                                       : item.substr(semicolon + 1);
         !params.empty();) {
      const size_t next = params.find(';');
      const std::string param = trimmed_lower(params.substr(0, next));
      params = next == std::string_view::npos ? std::string_view() : params.substr(next + 1);
      if (param.starts_with("q=")) {
        try {
          range.q = std::stod(param.substr(2));
        } catch (const std::exception&) {
          range.q = 1.0;  // an unreadable weight: as if none were given
        }
      }
    }
    if (range.q > 0 && !range.type.empty()) ranges.push_back(std::move(range));
  }
  std::stable_sort(ranges.begin(), ranges.end(),
                   [](const Range& a, const Range& b) { return a.q > b.q; });
  for (const auto& range : ranges) {
    if (range.type == "application/json" || range.type == "*/*" || range.type == "application/*") {
      accepted.json = true;
    }
    for (const auto& m : kMeshMediaTypes) {
      if (range.type == m.type && std::find(accepted.meshes.begin(), accepted.meshes.end(),
                                            m.format) == accepted.meshes.end()) {
        accepted.meshes.push_back(m.format);
      }
    }
  }
  return accepted;
}

// The mesh file format of the answer (the request's format is set to it), or none for JSON.
std::optional<v1::MeshFormat> negotiate(const std::string& accept_header,
                                        v1::GenerateMeshRequest& request) {
  const Accepted accepted = parse_accept(accept_header);
  if (accepted.meshes.empty()) return std::nullopt;
  if (!request.has_format() || request.format() == v1::MESH_FORMAT_UNSPECIFIED) {
    request.set_format(accepted.meshes.front());
    return accepted.meshes.front();
  }
  // The body's format decides what is generated; Accept only says how it comes back.
  if (std::find(accepted.meshes.begin(), accepted.meshes.end(), request.format()) !=
      accepted.meshes.end()) {
    return request.format();
  }
  if (accepted.json) return std::nullopt;
  throw HttpError(406, grpc::StatusCode::INVALID_ARGUMENT,
                  "the body asks for format " + v1::MeshFormat_Name(request.format()) +
                      " but Accept is '" + accept_header +
                      "': make them agree, drop one of them, or accept application/json");
}

std::string server_timing(const v1::Timings& t) {
  return fmt::format(
      "queue;dur={:.1f}, text;dur={:.1f}, prefill;dur={:.1f}, decode;dur={:.1f}, "
      "mesh;dur={:.1f}, total;dur={:.1f}",
      t.queue_ms(), t.text_encoding_ms(), t.prefill_ms(), t.decode_ms(), t.mesh_ms(), t.total_ms());
}

std::string sse_event(const char* name, const std::string& data) {
  // `data` is one line of JSON: one data field.
  return fmt::format("event: {}\ndata: {}\n\n", name, data);
}

// The connection a handler serves. cpp-httplib 0.11 hands a handler the request but not its
// socket; the socket is found by its address pair, which only one TCP socket has. The
// connection's own thread runs the handler and keeps the socket open until the handler and its
// content provider return, so the descriptor found stays this connection's meanwhile.
class PeerWatch {
 public:
  explicit PeerWatch(const httplib::Request& req) : fd_(find_socket(req)) {
    if (fd_ < 0) {
      spdlog::warn("http: connection {}:{} not found; its disconnect will not cancel the request",
                   req.remote_addr, req.remote_port);
    }
  }

  // Whether the client closed the connection (or it broke). A readable socket with nothing to
  // read is the peer's end of stream; bytes waiting (a pipelined request) are not.
  bool closed() const {
    if (fd_ < 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return true;
    if (!(p.revents & POLLIN)) return false;
    char byte;
    const ssize_t n = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }

 private:
  static bool address_of(const sockaddr_storage& addr, socklen_t len, std::string& host,
                         int& port) {
    if (addr.ss_family == AF_INET) {
      port = ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
    } else if (addr.ss_family == AF_INET6) {
      port = ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
    } else {
      return false;
    }
    // Formatted as cpp-httplib formats Request::remote_addr and local_addr.
    char text[NI_MAXHOST] = {};
    if (::getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, text, sizeof(text), nullptr, 0,
                      NI_NUMERICHOST) != 0) {
      return false;
    }
    host = text;
    return true;
  }

  static int find_socket(const httplib::Request& req) {
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
      const std::string name = it->path().filename().string();
      int fd = -1;
      if (std::from_chars(name.data(), name.data() + name.size(), fd).ec != std::errc()) continue;
      sockaddr_storage local{};
      socklen_t local_len = sizeof(local);
      if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) continue;
      std::string local_host;
      int local_port = 0;
      if (!address_of(local, local_len, local_host, local_port) || local_port != req.local_port ||
          local_host != req.local_addr) {
        continue;
      }
      sockaddr_storage peer{};
      socklen_t peer_len = sizeof(peer);
      if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) continue;
      std::string peer_host;
      int peer_port = 0;
      if (address_of(peer, peer_len, peer_host, peer_port) && peer_port == req.remote_port &&
          peer_host == req.remote_addr) {
        return fd;
      }
    }
    return -1;
  }

  int fd_;
};

grpc::Status client_closed() {
  return grpc::Status(grpc::StatusCode::CANCELLED, "the client closed the connection");
}

// One of the gateway's generate calls in flight, or none when all are taken.
class GenerateSlot {
 public:
  GenerateSlot(std::atomic<int64_t>& in_flight, int64_t max)
      : in_flight_(in_flight), held_(in_flight.fetch_add(1) < max) {
    if (!held_) in_flight_.fetch_sub(1);
  }
  ~GenerateSlot() {
    if (held_) in_flight_.fetch_sub(1);
  }
  GenerateSlot(const GenerateSlot&) = delete;
  GenerateSlot& operator=(const GenerateSlot&) = delete;
  explicit operator bool() const { return held_; }

 private:
  std::atomic<int64_t>& in_flight_;
  const bool held_;
};

HttpError too_many_calls(int64_t max, int64_t retry_after) {
  return HttpError(
      429, grpc::StatusCode::RESOURCE_EXHAUSTED,
      "too many HTTP generate calls in flight (" + std::to_string(max) + "); retry later",
      retry_after);
}

// One streaming call. The core runs on `worker` and queues the framed events; the connection's
// thread writes them. The status line waits for the job's first event, so that what fails
// before the job is queued (a bad request, a full queue, loading, draining) is an HTTP status
// rather than a 200 stream of one error event.
struct StreamCall {
  StreamCall(const httplib::Request& req, std::atomic<int64_t>& in_flight, int64_t max)
      : slot(in_flight, max), peer(req) {}
  ~StreamCall() { abandon(); }
  StreamCall(const StreamCall&) = delete;
  StreamCall& operator=(const StreamCall&) = delete;

  std::optional<grpc::Status> gone() const {
    if (abandoned.load() || peer.closed()) return client_closed();
    return std::nullopt;
  }

  void push(std::string event) {
    const std::lock_guard lock(mutex);
    events.push_back(std::move(event));
    started = true;
    changed.notify_all();
  }

  void add_trailer(const std::string& key, const std::string& value) {
    const std::lock_guard lock(mutex);
    trailers.emplace_back(key, value);
  }

  void finish(const grpc::Status& final_status, std::string event) {
    const std::lock_guard lock(mutex);
    events.push_back(std::move(event));
    status = final_status;
    finished = true;
    changed.notify_all();
  }

  // The connection is done with the call (written, failed, or never started): the job is
  // cancelled if it still runs, and the worker joined before the socket can close.
  void abandon() {
    abandoned = true;
    if (worker.joinable()) worker.join();
  }

  // The content provider: every event as it comes, then the end of the stream.
  bool write_to(httplib::DataSink& sink) {
    std::unique_lock lock(mutex);
    for (;;) {
      while (!events.empty()) {
        const std::string event = std::move(events.front());
        events.pop_front();
        lock.unlock();
        const bool written = sink.write(event.data(), event.size());
        lock.lock();
        if (!written) {
          abandoned = true;  // the client left: the worker's next poll cancels the job
          return false;
        }
      }
      if (finished) break;
      if (!changed.wait_for(lock, kStreamKeepAlive, [&] { return !events.empty() || finished; })) {
        lock.unlock();
        const bool written = sink.write(":\n\n", 3);
        lock.lock();
        if (!written) {
          abandoned = true;
          return false;
        }
      }
    }
    lock.unlock();
    sink.done();
    return true;
  }

  const GenerateSlot slot;
  const PeerWatch peer;
  std::atomic<bool> abandoned{false};
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::string> events;  // framed, not yet written
  bool started = false;            // the job was accepted (its first progress event)
  bool finished = false;
  grpc::Status status;
  Trailers trailers;  // for an HTTP error answer; a stream under way has no place for them
  std::thread worker;
};

// cpp-httplib's listen backlog is 5, compiled into Debian's library: a burst of clients would
// wait for SYN retries. listen() again on the bound socket raises it.
class GatewayServer final : public httplib::Server {
 public:
  void raise_backlog() { ::listen(svr_sock_.load(), SOMAXCONN); }
};

// The gRPC server's address forms, and port 0 (a free port, for tests).
HostPort parse_listen(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  if (colon != std::string::npos && listen.substr(colon + 1) == "0") {
    std::string host = listen.substr(0, colon);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    return HostPort{host, 0};
  }
  return parse_host_port(listen, "http_listen");
}

}  // namespace

HttpGatewayOptions http_gateway_options(const ServerConfig& config) {
  HttpGatewayOptions options;
  options.max_body_bytes = config.limits.max_message_bytes;
  const auto& buckets = config.batching.batch_buckets;
  const int64_t largest = buckets.empty() ? 1 : *std::max_element(buckets.begin(), buckets.end());
  // Generous: the core's limits (the queue above all) are what refuse work; this only keeps
  // threads for the probes, beyond every request the scheduler holds (queued, decoding,
  // meshing) and a burst of arrivals that the core refuses at once.
  options.max_generating = config.batching.max_queue_size + 4 * largest + 16;
  options.threads = std::max<int64_t>(16, options.max_generating + kReservedThreads);
  return options;
}

struct HttpGateway::Impl {
  Impl(MeshServiceCore& core, Metrics& metrics, HttpGatewayOptions options)
      : core(core), metrics(metrics), options(std::move(options)) {}

  void routes();
  void generate(const httplib::Request& req, httplib::Response& res);
  void generate_stream(const httplib::Request& req, httplib::Response& res);
  void readyz(httplib::Response& res) const;
  httplib::Server::HandlerResponse fill_error(const httplib::Request& req,
                                              httplib::Response& res) const;

  struct Prepared {
    v1::GenerateMeshRequest request;
    CallContext call;
  };
  Prepared prepare(const httplib::Request& req) const;

  // Runs a handler, answering the gateway's own errors with their status and body.
  template <typename Handler>
  httplib::Server::Handler guarded(Handler handler) {
    return [this, handler](const httplib::Request& req, httplib::Response& res) {
      // The gateway's own lines carry the caller's trace too (the core adds the rest).
      const LogContext log_scope({.traceparent = req.get_header_value("traceparent")});
      try {
        (this->*handler)(req, res);
      } catch (const HttpError& e) {
        // Counted like the core's answers: a request that ended with this status.
        metrics.request_finished(grpc_code_name(e.code));
        spdlog::info("http {} {}: {} {}: {}", req.method, req.path, e.http_status,
                     grpc_code_name(e.code), e.what());
        reply_error(res, e.http_status, e.code, e.what(), e.retry_after_seconds);
      }
    };
  }

  MeshServiceCore& core;
  Metrics& metrics;
  const HttpGatewayOptions options;
  GatewayServer server;
  std::thread listener;
  std::atomic<bool> listener_done{false};
  std::atomic<bool> draining{false};
  std::atomic<int64_t> generating{0};
  std::mutex stop_mutex;
  int port = 0;
};

HttpGateway::Impl::Prepared HttpGateway::Impl::prepare(const httplib::Request& req) const {
  const auto now = SteadyClock::now();
  Prepared prepared{parse_request(req.body), {}};
  if (prepared.request.request_id().empty() && req.has_header(kRequestIdHeader)) {
    prepared.request.set_request_id(req.get_header_value(kRequestIdHeader));
  }
  prepared.call.deadline = deadline_of(req, now);
  prepared.call.transport = "http";
  prepared.call.authorization = req.get_header_value("Authorization");
  prepared.call.traceparent = req.get_header_value("traceparent");
  return prepared;
}

void HttpGateway::Impl::generate(const httplib::Request& req, httplib::Response& res) {
  Prepared prepared = prepare(req);
  const std::optional<v1::MeshFormat> file_format =
      negotiate(req.get_header_value("Accept"), prepared.request);
  const GenerateSlot slot(generating, options.max_generating);
  if (!slot) throw too_many_calls(options.max_generating, options.retry_after_seconds);

  const PeerWatch peer(req);
  prepared.call.gone = [&peer]() -> std::optional<grpc::Status> {
    if (peer.closed()) return client_closed();
    return std::nullopt;
  };
  Trailers trailers;
  prepared.call.add_trailer = [&trailers](const std::string& key, const std::string& value) {
    trailers.emplace_back(key, value);
  };
  v1::GenerateMeshResponse response;
  const grpc::Status status =
      core.generate(to_wire(prepared.request), prepared.call, &response, nullptr);
  if (!status.ok()) {
    reply_status(res, status, options.retry_after_seconds, trailers);
    return;
  }
  res.set_header(kRequestIdHeader, response.request_id());
  res.set_header("Server-Timing", server_timing(response.timings()));
  const MeshMediaType* const media = file_format ? media_type_of(*file_format) : nullptr;
  if (!media) {
    res.set_content(to_json(response), "application/json");
    return;
  }
  res.set_header("X-Vertex-Count", std::to_string(response.vertex_count()));
  res.set_header("X-Face-Count", std::to_string(response.face_count()));
  res.set_header("X-Batch-Bucket", std::to_string(response.batch_bucket()));
  res.set_header("X-Occupancy-Points", std::to_string(response.occupancy_points()));
  for (const auto& warning : response.warnings()) res.set_header("X-Warning", warning);
  res.set_header("Content-Disposition", fmt::format("inline; filename=\"{}.{}\"",
                                                    response.request_id(), media->extension));
  res.set_content(response.encoded(), media->type);
}

void HttpGateway::Impl::generate_stream(const httplib::Request& req, httplib::Response& res) {
  Prepared prepared = prepare(req);
  auto stream = std::make_shared<StreamCall>(req, generating, options.max_generating);
  if (!stream->slot) throw too_many_calls(options.max_generating, options.retry_after_seconds);

  StreamCall* const call = stream.get();  // outlives the worker: ~StreamCall joins it
  prepared.call.gone = [call] { return call->gone(); };
  prepared.call.add_trailer = [call](const std::string& key, const std::string& value) {
    call->add_trailer(key, value);
  };
  call->worker = std::thread(
      [this, call, wire = to_wire(prepared.request), context = std::move(prepared.call)] {
        const int64_t tokens = core.options().tokens_per_shape;
        v1::GenerateMeshResponse response;
        grpc::Status status;
        std::string last;
        try {
          status = core.generate(wire, context, &response, [&](const JobProgress& p) {
            call->push(sse_event("progress", to_json(to_progress_event(p, tokens))));
          });
          if (status.ok()) last = sse_event("result", to_json(response));
        } catch (const std::exception& e) {
          status = grpc::Status(grpc::StatusCode::INTERNAL, e.what());
        }
        if (!status.ok()) last = sse_event("error", http_error_body(status));
        call->finish(status, std::move(last));
      });

  {
    std::unique_lock lock(call->mutex);
    call->changed.wait(lock, [&] { return call->started || call->finished; });
    if (!call->started && !call->status.ok()) {
      const grpc::Status status = call->status;
      const Trailers trailers = call->trailers;
      lock.unlock();
      call->abandon();
      reply_status(res, status, options.retry_after_seconds, trailers);
      return;
    }
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");  // proxies such as nginx: pass each event on
  res.set_chunked_content_provider(
      kEventStreamType,
      [stream](size_t /*offset*/, httplib::DataSink& sink) { return stream->write_to(sink); },
      [stream](bool /*success*/) { stream->abandon(); });
}

void HttpGateway::Impl::readyz(httplib::Response& res) const {
  if (draining.load()) {
    reply_error(res, 503, grpc::StatusCode::UNAVAILABLE, "draining: the server is shutting down");
  } else if (!core.ready()) {
    reply_error(res, 503, grpc::StatusCode::UNAVAILABLE,
                "loading: the model is still loading and warming up");
  } else {
    res.set_content("ready\n", "text/plain");
  }
}

httplib::Server::HandlerResponse HttpGateway::Impl::fill_error(const httplib::Request& req,
                                                               httplib::Response& res) const {
  // Answers of the handlers carry their own body; this is for cpp-httplib's own answers.
  if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
  std::string message;
  if (res.status == 404) {
    if (const char* allow = allowed_methods(req.path)) {
      res.status = 405;
      res.set_header("Allow", allow);
      message = req.method + " is not allowed on " + req.path + " (allowed: " + allow + ")";
    } else {
      message = "no such path: " + req.path +
                " (POST /v1/meshes:generate, POST /v1/meshes:generateStream, GET /healthz, "
                "GET /readyz, GET /metrics)";
    }
  } else if (res.status == 413) {
    message = "the request body is over the server's " + std::to_string(options.max_body_bytes) +
              "-byte limit (limits.max_message_bytes)";
  } else if (res.status == 400) {
    message = "malformed HTTP request";
  } else {
    message = "HTTP status " + std::to_string(res.status);
  }
  const grpc::StatusCode code = code_of_http_status(res.status);
  // Requests that reached the server and were refused before any handler: counted like the
  // gRPC front door's unknown methods and oversized messages, with the code the client reads.
  metrics.request_finished(grpc_code_name(code));
  spdlog::info("http {} {}: {} {}: {}", req.method, req.path, res.status, grpc_code_name(code),
               message);
  reply_error(res, res.status, code, message);
  return httplib::Server::HandlerResponse::Handled;
}

void HttpGateway::Impl::routes() {
  server.Post(kGeneratePath, guarded(&Impl::generate));
  server.Post(kStreamPath, guarded(&Impl::generate_stream));
  server.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  server.Get("/readyz", [this](const httplib::Request&, httplib::Response& res) { readyz(res); });
  server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(prometheus::TextSerializer().Serialize(metrics.registry()->Collect()),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  server.set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& req, httplib::Response& res) {
        return fill_error(req, res);
      }));
  server.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr thrown) {
        std::string message = "unknown error";
        try {
          std::rethrow_exception(thrown);
        } catch (const std::exception& e) {
          message = e.what();
        } catch (...) {
        }
        spdlog::error("http {} {}: {}", req.method, req.path, message);
        reply_error(res, 500, grpc::StatusCode::INTERNAL, message);
      });
  server.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    spdlog::debug("http {} {} from {}:{}: {}", req.method, req.path, req.remote_addr,
                  req.remote_port, res.status);
  });
}

HttpGateway::HttpGateway(const std::string& listen, MeshServiceCore& core, Metrics& metrics,
                         HttpGatewayOptions options)
    : impl_(std::make_unique<Impl>(core, metrics, std::move(options))) {
  const HostPort at = parse_listen(listen);
  Impl& impl = *impl_;
  const auto threads = static_cast<size_t>(std::max<int64_t>(1, impl.options.threads));
  impl.server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // SO_REUSEADDR only: cpp-httplib's default adds SO_REUSEPORT, with which a second server on
  // a busy port would start and silently share the traffic.
  impl.server.set_socket_options([](socket_t sock) {
    const int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  impl.server.set_tcp_nodelay(true);  // events go out as they come
  impl.server.set_payload_max_length(static_cast<size_t>(impl.options.max_body_bytes));
  impl.server.set_read_timeout(impl.options.read_timeout.count());
  impl.server.set_write_timeout(impl.options.write_timeout.count());
  impl.server.set_keep_alive_timeout(impl.options.keep_alive.count());
  impl.server.set_keep_alive_max_count(100);
  impl.routes();

  bool bound = false;
  if (at.port == 0) {
    impl.port = impl.server.bind_to_any_port(at.host);
    bound = impl.port > 0;
  } else {
    bound = impl.server.bind_to_port(at.host, at.port);
    impl.port = at.port;
  }
  if (!bound) {
    throw unavailable("http_listen " + listen +
                      ": cannot listen on this address: the port is in use by another process "
                      "(is another cube3d-server running?) or the host is not an address of "
                      "this machine");
  }
  impl.server.raise_backlog();
  impl.listener = std::thread([&impl] {
    if (!impl.server.listen_after_bind()) spdlog::error("http: the listening socket failed");
    impl.listener_done = true;
  });
  // stop() does nothing to a server that is not running yet: wait until it is.
  while (!impl.server.is_running() && !impl.listener_done.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

HttpGateway::~HttpGateway() { stop(); }

int HttpGateway::port() const { return impl_->port; }

void HttpGateway::set_draining(bool draining) { impl_->draining = draining; }

void HttpGateway::stop() {
  const std::lock_guard lock(impl_->stop_mutex);
  if (!impl_->listener.joinable()) return;
  // Closes the listening socket; the pool finishes the calls in flight and joins its threads.
  impl_->server.stop();
  impl_->listener.join();
}

}  // namespace cube3d
