#include "cube3d/server/core/mesh_service_core.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <variant>

#include "cube3d/api/grpc_status.h"
#include "cube3d/core/logging.h"
#include "cube3d/core/printable.h"
#include "cube3d/server/core/request_validation.h"

namespace cube3d {
namespace {

v1::Stage to_proto(JobStage stage) {
  switch (stage) {
    case JobStage::kQueued:
      return v1::STAGE_QUEUED;
    case JobStage::kTextEncoding:
      return v1::STAGE_TEXT_ENCODING;
    case JobStage::kDecoding:
      return v1::STAGE_DECODING;
    case JobStage::kMeshing:
      return v1::STAGE_MESHING;
    case JobStage::kDone:
      return v1::STAGE_DONE;
  }
  return v1::STAGE_UNSPECIFIED;
}

}  // namespace

v1::wire::GenerateMeshRequest to_wire(const v1::GenerateMeshRequest& request) {
  v1::wire::GenerateMeshRequest wire;
  if (!wire.ParseFromString(request.SerializeAsString())) {
    throw internal_error("GenerateMeshRequest does not read as its wire twin");
  }
  return wire;
}

v1::Progress to_progress_event(const JobProgress& p, int64_t tokens_per_shape) {
  v1::Progress event;
  event.set_stage(to_proto(p.stage));
  event.set_tokens_done(static_cast<uint32_t>(p.tokens_done));
  // Stages before decoding know no token counts; the total is the model's T anyway.
  const int64_t total = p.tokens_total > 0 ? p.tokens_total : tokens_per_shape;
  event.set_tokens_total(static_cast<uint32_t>(total));
  if (p.stage == JobStage::kMeshing && p.levels_total > 0) {
    event.set_points_done(static_cast<uint64_t>(p.points_done));
    event.set_points_planned(static_cast<uint64_t>(p.points_planned));
    event.set_levels_done(static_cast<uint32_t>(p.levels_done));
    event.set_levels_total(static_cast<uint32_t>(p.levels_total));
  }
  return event;
}

// One call from start() to its outcome. Owned by the job's callbacks (until the job is done)
// and by the front door's handle; it holds the job only until the call ends, so nothing keeps
// the two alive in a cycle once either side is done.
class CoreCall final : public ActiveCall, public std::enable_shared_from_this<CoreCall> {
 public:
  CoreCall(MeshServiceCore& core, const v1::wire::GenerateMeshRequest& request,
           const CallContext& call, CallObserver observer)
      : core_(core),
        observer_(std::move(observer)),
        start_(SteadyClock::now()),
        counted_by_front_door_(call.outcome_counted_by_front_door),
        traceparent_(call.traceparent),
        via_(call.transport),
        // The client's id is logged only once validated (then it is plain [A-Za-z0-9._:-]);
        // before that, a short escaped excerpt: a raw id could forge log lines or flood the log.
        unvalidated_id_(request.request_id().empty()
                            ? std::string("-")
                            : "- (request_id '" + printable(request.request_id(), 64) + "')") {}

  // The admission, validation and submission of start(); the outcome may come before it
  // returns.
  void begin(const v1::wire::GenerateMeshRequest& request, const CallContext& call);

  void cancel(const grpc::Status& why) override {
    std::shared_ptr<Job> job;
    {
      const std::lock_guard lock(mutex_);
      job = job_;
    }
    // The flag first, so that the scheduler drops the job (queued) or the executor stops the
    // batch once every request in it is gone; then the answer, at once.
    if (job) job->cancel();
    finish(why, nullptr);
  }

  bool finished() const override {
    const std::lock_guard lock(mutex_);
    return done_;
  }

 private:
  void on_progress(const JobProgress& p);
  void on_job_done(const JobResult* result, const Error* error);
  void on_deadline();
  // The one end of the call: counts, logs and tells the observer, once.
  void finish(const grpc::Status& status, const JobResult* result);

  MeshServiceCore& core_;
  CallObserver observer_;
  const SteadyClock::time_point start_;
  const bool counted_by_front_door_;
  const std::string traceparent_;
  std::string via_;  // "grpc", or "grpc, key studio-a" once the key is known
  std::string key_name_;
  std::string request_id_;  // once validated
  const std::string unvalidated_id_;
  std::vector<std::pair<std::string, std::string>> trailers_;

  mutable std::mutex mutex_;
  bool done_ = false;
  bool running_ = false;  // past the queue, counted in cube3d_requests_running
  std::shared_ptr<Job> job_;
  ApiKeys::Ticket ticket_;  // one of the key's concurrent places, until the call ends
  TimerQueue::Timer deadline_timer_;
};

void CoreCall::begin(const v1::wire::GenerateMeshRequest& request, const CallContext& call) {
  // This call's log lines carry its trace id, then its key's name and its request id.
  const LogContext log_scope({.traceparent = traceparent_});
  // Who is asking comes first: an unauthenticated caller learns nothing about its request.
  ApiKeys::Ticket ticket;
  if (ApiKeys* const keys = core_.api_keys_.load()) {
    auto admitted = keys->admit(call.authorization);
    if (auto* refused = std::get_if<ApiKeys::Refusal>(&admitted)) {
      if (refused->unauthenticated) {
        return finish(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, refused->message), nullptr);
      }
      const std::string seconds = std::to_string(refused->retry_after_s);
      trailers_.emplace_back("retry-after", seconds);
      return finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                 refused->message + "; retry after " + seconds + " s"),
                    nullptr);
    }
    ticket = std::move(std::get<ApiKeys::Ticket>(admitted));
    key_name_ = ticket.key_name();
    via_ += ", key " + key_name_;
  }

  JobRequest job_request;
  try {
    job_request = validate_request(request, core_.options_.policy);
  } catch (const Error& e) {
    return finish(to_grpc_status(e), nullptr);
  }
  job_request.client = key_name_;
  request_id_ = job_request.request_id;
  if (core_.options_.log_prompts) {
    LogContext::set_api_key(key_name_);
    LogContext::set_request_id(request_id_);
    spdlog::info("request {} prompt: {}", request_id_,
                 printable(job_request.prompt, job_request.prompt.size()));
  }

  const int64_t default_ms = core_.options_.policy.limits.default_deadline_ms;
  const auto deadline = call.deadline != SteadyClock::time_point::max() || default_ms <= 0
                            ? call.deadline
                            : start_ + std::chrono::milliseconds(default_ms);
  // The job's callbacks own the call until the job is done (the scheduler delivers exactly one
  // outcome to every job it accepts).
  const std::shared_ptr<CoreCall> self = shared_from_this();
  auto job = std::make_shared<Job>(
      std::move(job_request), deadline, [self](const JobProgress& p) { self->on_progress(p); },
      [self](const JobResult* result, const Error* error) { self->on_job_done(result, error); });
  Scheduler* const scheduler = core_.scheduler_.load();
  if (!scheduler) {
    return finish(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                               "the model is still loading; retry when health reports SERVING"),
                  nullptr);
  }
  {
    const std::lock_guard lock(mutex_);
    job_ = job;
    ticket_ = std::move(ticket);
  }
  try {
    scheduler->submit(job);
  } catch (const Error& e) {
    return finish(to_grpc_status(e), nullptr);
  }
  if (deadline != SteadyClock::time_point::max()) {
    const std::weak_ptr<CoreCall> weak = self;
    TimerQueue::Timer timer = core_.timers_.schedule(deadline, [weak] {
      if (const auto call = weak.lock()) call->on_deadline();
    });
    const std::lock_guard lock(mutex_);
    // A call that ended meanwhile keeps no timer (it would only fire into a finished call).
    if (!done_) deadline_timer_ = std::move(timer);
  }
}

void CoreCall::on_progress(const JobProgress& p) {
  const std::lock_guard lock(mutex_);
  if (done_) return;
  if (p.stage != JobStage::kQueued && p.stage != JobStage::kDone && !running_) {
    running_ = true;
    core_.metrics_.request_running(+1);
  }
  if (observer_.progress) observer_.progress(p);
}

void CoreCall::on_job_done(const JobResult* result, const Error* error) {
  if (error) return finish(to_grpc_status(*error), nullptr);
  finish(grpc::Status::OK, result);
}

void CoreCall::on_deadline() {
  std::shared_ptr<Job> job;
  {
    const std::lock_guard lock(mutex_);
    if (done_) return;
    job = job_;
  }
  if (job) job->cancel();
  finish(
      grpc::Status(
          grpc::StatusCode::DEADLINE_EXCEEDED,
          "deadline exceeded after " +
              std::to_string(static_cast<int64_t>(ms_between(start_, SteadyClock::now()))) + " ms"),
      nullptr);
}

void CoreCall::finish(const grpc::Status& status_in, const JobResult* result) {
  const std::lock_guard lock(mutex_);
  if (done_) return;
  done_ = true;
  if (running_) core_.metrics_.request_running(-1);
  running_ = false;
  deadline_timer_.cancel();
  job_.reset();
  // The key's concurrent place is free from here on (a retry may follow at once).
  ticket_ = ApiKeys::Ticket();

  CallOutcome outcome;
  outcome.status = status_in;
  outcome.trailers = std::move(trailers_);
  if (result && status_in.ok()) outcome.status = core_.fill_response(*result, &outcome.response);
  const grpc::Status& status = outcome.status;

  // The end of a call may come on any thread: its log lines carry the call's own context.
  const LogContext log_scope(
      {.request_id = request_id_, .api_key = key_name_, .traceparent = traceparent_});
  const std::string code = grpc_code_name(status.error_code());
  if (!counted_by_front_door_) core_.metrics_.request_finished(code);
  const double total_ms = ms_between(start_, SteadyClock::now());
  if (status.ok()) {
    core_.metrics_.observe_request_seconds(total_ms / 1000.0);
    core_.metrics_.observe_queue_seconds(result->timings.queue_ms / 1000.0);
    core_.metrics_.observe_mesh_seconds(result->timings.mesh_ms / 1000.0);
    spdlog::info(
        "request {} OK ({}) bucket {} queue {:.1f} ms text {:.1f} ms prefill {:.1f} ms "
        "TPOT {:.3f} ms mesh {:.1f} ms total {:.1f} ms ({} faces)",
        request_id_, via_, result->batch_bucket, result->timings.queue_ms,
        result->timings.text_encoding_ms, result->timings.prefill_ms, result->timings.tpot_ms,
        result->timings.mesh_ms, total_ms, result->face_count);
  } else {
    spdlog::info("request {} {} ({}) after {:.1f} ms: {}",
                 request_id_.empty() ? unvalidated_id_ : request_id_, code, via_, total_ms,
                 status.error_message());
  }
  if (observer_.done) observer_.done(std::move(outcome));
  // What the observer captured (a connection, a reactor) is not kept by a finished call.
  observer_ = CallObserver();
}

MeshServiceCore::MeshServiceCore(ServiceOptions options, Metrics& metrics)
    : options_(std::move(options)), metrics_(metrics) {}

MeshServiceCore::~MeshServiceCore() = default;

std::shared_ptr<ActiveCall> MeshServiceCore::start(const v1::wire::GenerateMeshRequest& request,
                                                   const CallContext& call, CallObserver observer) {
  auto active = std::make_shared<CoreCall>(*this, request, call, std::move(observer));
  active->begin(request, call);
  return active;
}

grpc::Status MeshServiceCore::fill_response(const JobResult& result,
                                            v1::GenerateMeshResponse* response) const {
  response->set_request_id(result.request_id);
  response->set_format(to_proto(result.format));
  if (result.format == MeshFormat::kRaw) {
    auto* raw = response->mutable_raw();
    raw->mutable_vertices()->Add(result.vertices.begin(), result.vertices.end());
    raw->mutable_indices()->Add(result.indices.begin(), result.indices.end());
  } else {
    response->set_encoded(result.encoded);
  }
  response->set_vertex_count(static_cast<uint32_t>(result.vertex_count));
  response->set_face_count(static_cast<uint32_t>(result.face_count));
  response->set_occupancy_points(static_cast<uint64_t>(result.occupancy_points));
  for (const int64_t t : result.shape_tokens) response->add_shape_tokens(t);
  response->set_batch_bucket(static_cast<uint32_t>(result.batch_bucket));
  for (const auto& w : result.warnings) response->add_warnings(w);
  auto* t = response->mutable_timings();
  t->set_queue_ms(result.timings.queue_ms);
  t->set_text_encoding_ms(result.timings.text_encoding_ms);
  t->set_prefill_ms(result.timings.prefill_ms);
  t->set_decode_ms(result.timings.decode_ms);
  t->set_tpot_ms(result.timings.tpot_ms);
  t->set_mesh_ms(result.timings.mesh_ms);
  t->set_occupancy_ms(result.timings.occupancy_ms);
  t->set_total_ms(result.timings.total_ms);

  const size_t bytes = response->ByteSizeLong();
  if (static_cast<int64_t>(bytes) > options_.policy.limits.max_message_bytes) {
    response->Clear();
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "the mesh response is " + std::to_string(bytes) +
                            " bytes, over the server's " +
                            std::to_string(options_.policy.limits.max_message_bytes) +
                            "-byte message limit; ask for less: a lower resolution_base, a smaller "
                            "target_face_count, or an encoded format (GLB) instead of RAW");
  }
  return grpc::Status::OK;
}

}  // namespace cube3d
