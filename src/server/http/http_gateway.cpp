#include "cube3d/server/http/http_gateway.h"

#include <google/protobuf/util/json_util.h>
#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <utility>

#include "cube3d/core/error.h"
#include "cube3d/core/logging.h"
#include "cube3d/core/peer_log.h"
#include "cube3d/core/printable.h"
#include "cube3d/server/http/call_context.h"
#include "cube3d/server/http/content_negotiation.h"
#include "cube3d/server/http/http_error.h"
#include "cube3d/server/http/http_status.h"
#include "cube3d/server/http/inference_routes.h"
#include "cube3d/server/http/job_routes.h"
#include "cube3d/server/http/json_codec.h"
#include "cube3d/server/http/mesh_answers.h"
#include "cube3d/server/http/model_route.h"
#include "cube3d/server/http/usage_route.h"
#include "cube3d/server/httpd/cache_control.h"
#include "cube3d/server/httpd/router.h"
#include "cube3d/server/wire/answer_codec.h"
#include "cube3d/server/wire/progress_codec.h"
#include "cube3d/server/wire/request_codec.h"

namespace cube3d {
namespace {

using http::error_response;
using http::HttpError;
using http::kJsonType;
using http::kRequestIdHeader;
using http::parse_request;
using http::status_response;
using http::to_json;

constexpr const char* kApiListener = "http";
constexpr const char* kMetricsListener = "metrics";
constexpr const char* kGeneratePath = "/v1/meshes:generate";
constexpr const char* kStreamRoute = "/v1/meshes:generateStream";
constexpr const char* kMetricsType = "text/plain; version=0.0.4; charset=utf-8";
constexpr const char* kEventStreamType = "text/event-stream";
// The metrics listener's deadline for a request head: a scraper sends it at once.
constexpr std::chrono::milliseconds kMetricsHeaderTimeout{2000};
// A quiet stream (a long wait in the queue) gets a comment line this often, so that proxies
// do not close it as idle.
constexpr auto kStreamKeepAlive = std::chrono::seconds(15);

std::string sse_event(const char* name, const std::string& data) {
  // `data` is one line of JSON: one data field.
  return fmt::format("event: {}\ndata: {}\n\n", name, data);
}

// One of the gateway's generate calls in flight, released when the last copy goes (with the
// call's outcome).
std::shared_ptr<void> take_generate_slot(std::atomic<int64_t>& in_flight, int64_t max) {
  if (in_flight.fetch_add(1) >= max) {
    in_flight.fetch_sub(1);
    return nullptr;
  }
  // Points at the counter (a null pointer would read as "no slot"); the deleter only counts.
  return std::shared_ptr<void>(&in_flight,
                               [](std::atomic<int64_t>* count) { count->fetch_sub(1); });
}

// What a mesh call's client got, counted once its exchange ends (as the gRPC front door counts
// at the end of each call): the code of the answer when the answer was written in full,
// CANCELLED when the client went before (its connection closed, or it read nothing for
// http.write_timeout_ms), whatever the service had answered. Touched on the exchange's I/O thread
// only (the answer is set in a deferred task, the end reported there too).
struct CallTally {
  std::string answered_code;  // empty until an answer is on its way
};

// Cancels the service's work when the exchange is abandoned, and counts the call.
std::function<void(bool)> count_at_the_end(Metrics& metrics, std::shared_ptr<CallTally> tally,
                                           const std::shared_ptr<ActiveCall>& call) {
  return
      [&metrics, tally = std::move(tally), weak = std::weak_ptr<ActiveCall>(call)](bool delivered) {
        if (!delivered) {
          if (const auto active = weak.lock()) active->cancel(http::client_went_away());
        }
        metrics.request_finished(delivered && !tally->answered_code.empty() ? tally->answered_code
                                                                            : "CANCELLED");
      };
}

HttpError too_many_calls(int64_t max, int64_t retry_after) {
  return HttpError(
      429, ErrorCode::kResourceExhausted,
      "too many HTTP generate calls in flight (" + std::to_string(max) + "); retry later",
      retry_after);
}

}  // namespace

struct HttpGateway::Impl {
  Impl(Service& service, Metrics& metrics, HttpGatewayOptions options)
      : service(service),
        metrics(metrics),
        options(std::move(options)),
        api_router(http::Cors(this->options.cors_allowed_origins), refuse_and_count()) {
    api_router.add(kGeneratePath, {"POST"},
                   [this](const auto& ex) { guarded(ex, &Impl::generate); });
    api_router.add(kStreamRoute, {"POST"}, [this](const auto& ex) { guarded(ex, &Impl::stream); });
    api_router.add("/healthz", {"GET"}, [](const auto& ex) {
      ex->respond(http::make_response(200, "ok\n", "text/plain"));
    });
    api_router.add("/readyz", {"GET"}, [this](const auto& ex) { readyz(ex); });
    // On the API port, anyone may scrape: no per-key series (key names, each key's traffic).
    api_router.add("/metrics", {"GET"},
                   [this](const auto& ex) { serve_metrics(ex, /*per_key=*/false); });
    api_router.add(http::kUsagePath, {"GET"},
                   [this](const auto& ex) { http::serve_usage(this->service, ex); });
    api_router.add(http::kModelPath, {"GET"},
                   [this](const auto& ex) { http::serve_model(this->service, ex); });
    if (const auto& site = this->options.playground) {
      for (const std::string& path : site->paths()) {
        api_router.add(
            path, {"GET"},
            [site, file = site->find(path)](const auto& ex) { http::StaticSite::serve(*file, ex); },
            /*listed=*/path == "/");
      }
    }
    if (this->options.inference) {
      http::InferenceRouteOptions v2;
      v2.retry_after_seconds = this->options.retry_after_seconds;
      v2.max_generating = this->options.max_generating;
      v2.take_slot = [this] {
        return take_generate_slot(generating, this->options.max_generating);
      };
      inference.emplace(*this->options.inference, metrics, std::move(v2));
      inference->add_to(api_router);
    }
    if (this->options.jobs) {
      jobs.emplace(*this->options.jobs, this->options.retry_after_seconds);
      api_router.add(http::kJobsPath, {"POST"},
                     [this](const auto& ex) { guarded(ex, &Impl::submit_job); });
      api_router.add(http::kJobPath, {"GET", "DELETE"},
                     [this](const auto& ex) { guarded(ex, &Impl::job); });
      api_router.add(http::kJobMeshPath, {"GET"},
                     [this](const auto& ex) { guarded(ex, &Impl::job_mesh); });
    }
  }

  // The router's refusals (404, 405, 403): the error body, on the API listener counted like
  // the service's answers (a request that ended with this status), not on the metrics one.
  http::Router::Refuse refuse_and_count() {
    return [this](const std::shared_ptr<http::Exchange>& ex, int http_status, ErrorCode code,
                  const std::string& message, http::Headers extra) {
      metrics.request_finished(std::string(to_string(code)));
      // A peer's doing (a path that does not exist, a method it does not take): rate-limited.
      peer_log().report("http", "refused", spdlog::level::info,
                        fmt::format("http {} {}: {} {}: {}", printable(ex->request().method, 16),
                                    printable(ex->request().path, 200), http_status,
                                    std::string(to_string(code)), message));
      http::Response response = http::is_inference_path(ex->request().path)
                                    ? http::inference_error(Status(code, message), 0)
                                    : error_response(http_status, code, message);
      response.status = http_status;
      for (const auto& [k, v] : extra) response.headers.set(k, v);
      ex->respond(std::move(response));
    };
  }

  // Runs a mesh handler, answering the gateway's own errors with their status and body.
  template <typename Handler>
  void guarded(const std::shared_ptr<http::Exchange>& ex, Handler handler) {
    // The gateway's own lines carry the caller's trace too (the service adds the rest).
    const LogContext log_scope({.traceparent = ex->request().headers.value_or("traceparent")});
    try {
      (this->*handler)(ex);
    } catch (const HttpError& e) {
      // Counted like the service's answers: a request that ended with this status.
      metrics.request_finished(std::string(to_string(e.code)));
      // Refused before the service (a body that does not parse, a header it cannot read, no
      // generate slot): the peer's doing, rate-limited like the router's refusals.
      peer_log().report("http", "refused", spdlog::level::info,
                        fmt::format("http {} {}: {} {}: {}", printable(ex->request().method, 16),
                                    printable(ex->request().path, 200), e.http_status,
                                    std::string(to_string(e.code)), e.what()));
      ex->respond(error_response(e.http_status, e.code, e.what(), e.retry_after_seconds));
    }
  }

  struct Prepared {
    v1::GenerateMeshRequest request;
    CallContext call;
  };
  Prepared prepare(const http::Request& req) const;
  void generate(const std::shared_ptr<http::Exchange>& ex);
  void stream(const std::shared_ptr<http::Exchange>& ex);
  void readyz(const std::shared_ptr<http::Exchange>& ex) const;
  void submit_job(const std::shared_ptr<http::Exchange>& ex) {
    const Prepared prepared = prepare(ex->request());
    jobs->submit(ex, prepared.request, prepared.call);
  }
  void job(const std::shared_ptr<http::Exchange>& ex) { jobs->job(ex); }
  void job_mesh(const std::shared_ptr<http::Exchange>& ex) { jobs->mesh(ex); }
  void serve_metrics(const std::shared_ptr<http::Exchange>& ex, bool per_key) const {
    ex->respond(http::make_response(200, metrics.exposition(per_key), kMetricsType));
  }
  // The metrics listener: GET (or HEAD) /metrics and nothing else, for scrapers (404 otherwise,
  // in plain text, as a scraper's log shows it).
  void metrics_endpoint(const std::shared_ptr<http::Exchange>& ex) const {
    const http::Request& r = ex->request();
    if ((r.method == "GET" || r.method == "HEAD") && r.path == "/metrics") {
      return serve_metrics(ex, /*per_key=*/true);
    }
    ex->respond(http::make_response(404, "metrics are served at /metrics\n", "text/plain"));
  }
  http::Response answer(ResponseOutcome outcome, std::optional<v1::MeshFormat> file_format) const {
    return http::mesh_answer(std::move(outcome), file_format, options.retry_after_seconds);
  }

  Service& service;
  Metrics& metrics;
  const HttpGatewayOptions options;
  http::Router api_router;
  std::atomic<bool> draining{false};
  std::atomic<bool> device_failed{false};
  std::atomic<int64_t> generating{0};
  std::optional<http::JobRoutes> jobs;
  std::optional<http::InferenceRoutes> inference;
  std::unique_ptr<http::Server> server;  // last: stops (and joins) before the routes go
};

HttpGateway::Impl::Prepared HttpGateway::Impl::prepare(const http::Request& req) const {
  const auto now = SteadyClock::now();
  Prepared prepared{parse_request(req.body), {}};
  if (prepared.request.request_id().empty()) {
    if (const auto id = req.headers.get(kRequestIdHeader)) {
      prepared.request.set_request_id(std::string(*id));
    }
  }
  // A client (or a proxy) that asks for a fresh answer gets one: neither read from the result
  // cache nor stored in it.
  if (http::wants_fresh_answer(req.headers)) prepared.request.set_bypass_cache(true);
  prepared.call = http::call_context_of(req, now);
  return prepared;
}

void HttpGateway::Impl::generate(const std::shared_ptr<http::Exchange>& ex) {
  Prepared prepared = prepare(ex->request());
  // ?size= is checked whatever the answer, so that a typo fails before any work, not only when
  // it would have mattered.
  const int png_size = http::png_size(ex->request());
  const http::Negotiated negotiated =
      http::negotiate(ex->request().headers.value_or("Accept"), prepared.request);
  std::optional<http::PngAnswer> png;
  if (negotiated.kind == http::Negotiated::Kind::kPng) {
    png = http::PngAnswer{png_size, negotiated.ignored_format, prepared.request.prompt()};
  }
  std::shared_ptr<void> slot = take_generate_slot(generating, options.max_generating);
  if (!slot) throw too_many_calls(options.max_generating, options.retry_after_seconds);

  prepared.call.outcome_counted_by_front_door = true;
  auto tally = std::make_shared<CallTally>();
  CallObserver observer;
  observer.done = [this, ex, negotiated, png, tally, slot = std::move(slot)](CallOutcome outcome) {
    // The answer (JSON with a base64 mesh, the file, or the PNG drawn from the raw arrays) is
    // made on the connection's I/O thread, not on the executor's that delivers the outcome
    // (drawing 20k faces at 512 x 512 takes some 30 ms: the executor must not wait for it).
    ex->defer([this, ex, negotiated, png, tally, call_outcome = std::move(outcome)]() mutable {
      ResponseOutcome outcome = response_outcome(std::move(call_outcome));
      const bool ok = outcome.status.ok();
      tally->answered_code = std::string(to_string(outcome.status.code()));
      http::Response response =
          png ? http::mesh_png_answer(std::move(outcome), *png, options.retry_after_seconds)
              : answer(std::move(outcome), negotiated.file());
      // A mesh the service made that could not be drawn: counted as what the client got.
      if (ok && response.status != 200) {
        tally->answered_code = std::string(to_string(ErrorCode::kInternal));
      }
      ex->respond(std::move(response));
    });
  };
  const std::shared_ptr<ActiveCall> call =
      service.start(client_request_of(prepared.request), prepared.call, std::move(observer));
  ex->on_finished(count_at_the_end(metrics, tally, call));
}

// One streaming call's side of the gateway: the status line waits for the job's first event,
// so that what fails before the job is queued (a bad request, a full queue, loading, draining)
// is an HTTP status rather than a 200 stream of one error event. The service calls the observer
// one event at a time, in order.
struct StreamCall {
  std::shared_ptr<http::Exchange> exchange;
  std::shared_ptr<void> slot;
  int64_t retry_after = 1;
  bool started = false;

  void start() {
    started = true;
    http::Response head;
    head.status = 200;
    head.headers.set("Content-Type", kEventStreamType);
    head.headers.set("Cache-Control", "no-cache");
    head.headers.set("X-Accel-Buffering", "no");  // proxies such as nginx: pass each event on
    exchange->start_stream(std::move(head), {":\n\n", kStreamKeepAlive});
  }
};

void HttpGateway::Impl::stream(const std::shared_ptr<http::Exchange>& ex) {
  Prepared prepared = prepare(ex->request());
  std::shared_ptr<void> slot = take_generate_slot(generating, options.max_generating);
  if (!slot) throw too_many_calls(options.max_generating, options.retry_after_seconds);
  auto call = std::make_shared<StreamCall>();
  call->exchange = ex;
  call->slot = std::move(slot);
  call->retry_after = options.retry_after_seconds;

  prepared.call.outcome_counted_by_front_door = true;
  auto tally = std::make_shared<CallTally>();
  CallObserver observer;
  observer.progress = [call](const TaskProgress& p) {
    if (!call->started) call->start();
    // The event's JSON is made on the connection's I/O thread: the news comes from the
    // scheduler's worker, between decode steps.
    call->exchange->defer([ex = call->exchange, p] {
      ex->write(sse_event("progress", to_json(progress_message(p))));
    });
  };
  observer.done = [call, tally](CallOutcome outcome) {
    auto& ex = call->exchange;
    // An answer with no progress before it (a cache hit) is still a stream: its one event.
    if (!call->started && outcome.status.ok()) call->start();
    const bool started = call->started;
    const int64_t retry_after = call->retry_after;
    ex->defer([ex, tally, started, retry_after, outcome = std::move(outcome)] {
      tally->answered_code = std::string(to_string(outcome.status.code()));
      if (!started && !outcome.status.ok()) {
        ex->respond(status_response(outcome.status, retry_after, outcome.trailers));
        return;
      }
      ex->write(outcome.status.ok() ? sse_event("result", to_json(response_message(outcome.answer)))
                                    : sse_event("error", http_error_body(outcome.status)));
      ex->end_stream();
    });
  };
  const std::shared_ptr<ActiveCall> active =
      service.start(client_request_of(prepared.request), prepared.call, std::move(observer));
  ex->on_finished(count_at_the_end(metrics, tally, active));
}

void HttpGateway::Impl::readyz(const std::shared_ptr<http::Exchange>& ex) const {
  if (device_failed.load()) {
    ex->respond(error_response(503, ErrorCode::kUnavailable,
                               "device failed: this replica stopped serving and is restarting"));
  } else if (draining.load()) {
    ex->respond(
        error_response(503, ErrorCode::kUnavailable, "draining: the server is shutting down"));
  } else if (!service.ready()) {
    ex->respond(error_response(503, ErrorCode::kUnavailable,
                               "loading: the model is still loading and warming up"));
  } else if (const Status jobs_ok = options.jobs_health ? options.jobs_health() : Status();
             !jobs_ok.ok()) {
    // The shared job store cannot be reached: job submits are refused (synchronous calls still
    // serve, and gRPC health stays SERVING: every replica shares the store).
    ex->respond(error_response(503, ErrorCode::kUnavailable, jobs_ok.message()));
  } else {
    ex->respond(http::make_response(200, "ready\n", "text/plain"));
  }
}

HttpGateway::HttpGateway(Service& service, Metrics& metrics, HttpGatewayOptions options)
    : impl_(std::make_unique<Impl>(service, metrics, std::move(options))) {
  Impl& impl = *impl_;
  http::ServerOptions server_options = impl.options.server;
  // Requests the HTTP layer refuses itself (a malformed head, a body over the limit, ...): the
  // error body; on the API listener counted like every other answer.
  server_options.refusal = [&impl](const std::string& listener, int status,
                                   const std::string& message) {
    const ErrorCode code = code_of_http_status(status);
    if (listener == kApiListener) {
      impl.metrics.request_finished(std::string(to_string(code)));
      peer_log().report("http", "protocol", spdlog::level::info,
                        fmt::format("http: refused a request: {} {}: {}", status,
                                    std::string(to_string(code)), message));
    }
    return error_response(status, code, message);
  };
  server_options.observer.opened = [&impl](const std::string& listener) {
    impl.metrics.http_connection_opened(listener);
  };
  server_options.observer.closed = [&impl](const std::string& listener, const std::string& reason) {
    impl.metrics.http_connection_closed(listener, reason);
  };
  server_options.observer.refused = [&impl](const std::string& listener,
                                            const std::string& reason) {
    impl.metrics.http_connection_refused(listener, reason);
  };
  server_options.observer.tls_failed = [](const std::string& listener, const std::string& client,
                                          const std::string& reason) {
    peer_log().report("http", "tls_handshake", spdlog::level::info,
                      fmt::format("{}: a TLS handshake from {} failed: {}", listener,
                                  printable(client, 64), printable(reason, 200)));
  };
  std::vector<http::Listener> listeners;
  if (!impl.options.listen.empty()) {
    http::Listener api;
    api.name = kApiListener;
    api.address = impl.options.listen;
    api.config_key = "http_listen";
    api.handler = [&impl](const auto& ex) { impl.api_router.handle(ex); };
    api.tls = impl.options.tls;
    listeners.push_back(std::move(api));
  }
  if (!impl.options.metrics_listen.empty()) {
    // Scrapers send their head at once and scrape seldom: a short head deadline, and one
    // request per connection (what the endpoint always did).
    listeners.push_back({kMetricsListener, impl.options.metrics_listen, "metrics_listen",
                         [&impl](const auto& ex) { impl.metrics_endpoint(ex); },
                         kMetricsHeaderTimeout, /*keep_alive=*/false});
  }
  impl.server = std::make_unique<http::Server>(std::move(server_options), std::move(listeners));
}

HttpGateway::~HttpGateway() { stop(std::chrono::milliseconds(0)); }

int HttpGateway::port() const { return impl_->server->port(kApiListener); }
int HttpGateway::metrics_port() const { return impl_->server->port(kMetricsListener); }

void HttpGateway::set_draining(bool draining) {
  impl_->draining = draining;
  impl_->server->set_draining(draining);
}

void HttpGateway::set_device_failed() {
  impl_->device_failed = true;
  set_draining(true);
}

void HttpGateway::stop(std::chrono::milliseconds grace) { impl_->server->stop(grace); }

}  // namespace cube3d
