#include "cube3d/server/mesh_service_core.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <variant>

#include "cube3d/core/logging.h"
#include "cube3d/core/printable.h"
#include "cube3d/server/grpc_status.h"
#include "cube3d/server/request_validation.h"

namespace cube3d {
namespace {

// How often a waiting call looks at its caller's cancellation and deadline.
constexpr auto kPollInterval = std::chrono::milliseconds(20);

// The outcome of one job, filled by scheduler/executor threads, read by the calling thread.
struct Pending {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<JobProgress> progress;
  std::optional<JobResult> result;
  std::optional<Error> error;
  bool done = false;
  bool running = false;  // past the queue, counted in cube3d_requests_running
};

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

MeshServiceCore::MeshServiceCore(ServiceOptions options, Metrics& metrics)
    : options_(std::move(options)), metrics_(metrics) {}

grpc::Status MeshServiceCore::generate(const v1::wire::GenerateMeshRequest& request,
                                       const CallContext& call, v1::GenerateMeshResponse* response,
                                       const ProgressSink& on_progress) {
  const auto start = SteadyClock::now();
  // This call's log lines carry its trace id, then its key's name and its request id.
  const LogContext log_scope({.traceparent = call.traceparent});
  // The client's id is logged only once validated (then it is plain [A-Za-z0-9._:-]); before
  // that, a short escaped excerpt: a raw id could forge log lines or flood the log.
  std::string request_id;
  std::string via = call.transport;  // "grpc", or "grpc, key studio-a" once the key is known
  const auto finish = [&](const grpc::Status& status, const JobResult* result) {
    const std::string code = grpc_code_name(status.error_code());
    if (!call.outcome_counted_by_front_door) metrics_.request_finished(code);
    const double total_ms = ms_between(start, SteadyClock::now());
    if (result) {
      metrics_.observe_request_seconds(total_ms / 1000.0);
      metrics_.observe_queue_seconds(result->timings.queue_ms / 1000.0);
      metrics_.observe_mesh_seconds(result->timings.mesh_ms / 1000.0);
      spdlog::info(
          "request {} OK ({}) bucket {} queue {:.1f} ms text {:.1f} ms prefill {:.1f} ms "
          "TPOT {:.3f} ms mesh {:.1f} ms total {:.1f} ms ({} faces)",
          request_id, via, result->batch_bucket, result->timings.queue_ms,
          result->timings.text_encoding_ms, result->timings.prefill_ms, result->timings.tpot_ms,
          result->timings.mesh_ms, total_ms, result->face_count);
    } else {
      const std::string who = !request_id.empty() ? request_id
                              : request.request_id().empty()
                                  ? std::string("-")
                                  : "- (request_id '" + printable(request.request_id(), 64) + "')";
      spdlog::info("request {} {} ({}) after {:.1f} ms: {}", who, code, via, total_ms,
                   status.error_message());
    }
    return status;
  };

  // Who is asking comes first: an unauthenticated caller learns nothing about its request.
  // The ticket holds one of its key's concurrent places until this call returns.
  ApiKeys::Ticket ticket;
  if (ApiKeys* const keys = api_keys_.load()) {
    auto admitted = keys->admit(call.authorization);
    if (auto* refused = std::get_if<ApiKeys::Refusal>(&admitted)) {
      if (refused->unauthenticated) {
        return finish(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, refused->message), nullptr);
      }
      const std::string seconds = std::to_string(refused->retry_after_s);
      if (call.add_trailer) call.add_trailer("retry-after", seconds);
      return finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                 refused->message + "; retry after " + seconds + " s"),
                    nullptr);
    }
    ticket = std::move(std::get<ApiKeys::Ticket>(admitted));
    LogContext::set_api_key(ticket.key_name());
    via += ", key " + ticket.key_name();
  }

  JobRequest job_request;
  try {
    job_request = validate_request(request, options_.policy);
  } catch (const Error& e) {
    return finish(to_grpc_status(e), nullptr);
  }
  job_request.client = ticket.key_name();
  request_id = job_request.request_id;
  LogContext::set_request_id(request_id);
  if (options_.log_prompts) {
    spdlog::info("request {} prompt: {}", request_id,
                 printable(job_request.prompt, job_request.prompt.size()));
  }

  auto pending = std::make_shared<Pending>();
  const int64_t default_ms = options_.policy.limits.default_deadline_ms;
  const auto deadline = call.deadline != SteadyClock::time_point::max() || default_ms <= 0
                            ? call.deadline
                            : start + std::chrono::milliseconds(default_ms);
  auto job = std::make_shared<Job>(
      std::move(job_request), deadline,
      [pending, &metrics = metrics_](const JobProgress& p) {
        const std::lock_guard lock(pending->mutex);
        if (p.stage != JobStage::kQueued && p.stage != JobStage::kDone && !pending->running &&
            !pending->done) {
          pending->running = true;
          metrics.request_running(+1);
        }
        pending->progress.push_back(p);
        pending->changed.notify_all();
      },
      [pending, &metrics = metrics_](const JobResult* result, const Error* error) {
        const std::lock_guard lock(pending->mutex);
        if (result) pending->result = *result;
        if (error) pending->error = *error;
        if (pending->running) metrics.request_running(-1);
        pending->running = false;
        pending->done = true;
        pending->changed.notify_all();
      });
  Scheduler* const scheduler = scheduler_.load();
  if (!scheduler) {
    return finish(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                               "the model is still loading; retry when health reports SERVING"),
                  nullptr);
  }
  try {
    scheduler->submit(job);
  } catch (const Error& e) {
    return finish(to_grpc_status(e), nullptr);
  }

  std::unique_lock lock(pending->mutex);
  for (;;) {
    // Forward progress first, so that a job that finished before this loop started still
    // streams its events (queued, decoding, ..., done) before its result.
    while (!pending->progress.empty()) {
      const JobProgress p = pending->progress.front();
      pending->progress.pop_front();
      if (on_progress) {
        lock.unlock();
        on_progress(p);
        lock.lock();
      }
    }
    if (pending->done) break;
    // The handler answers at once; the job is flagged so that the scheduler drops it (queued)
    // or the executor stops its batch when every request in it is gone.
    if (call.gone) {
      if (const std::optional<grpc::Status> status = call.gone()) {
        job->cancel();
        return finish(*status, nullptr);
      }
    }
    if (SteadyClock::now() >= deadline) {
      job->cancel();
      return finish(
          grpc::Status(
              grpc::StatusCode::DEADLINE_EXCEEDED,
              "deadline exceeded after " +
                  std::to_string(static_cast<int64_t>(ms_between(start, SteadyClock::now()))) +
                  " ms"),
          nullptr);
    }
    pending->changed.wait_for(lock, kPollInterval);
  }
  if (pending->error) return finish(to_grpc_status(*pending->error), nullptr);
  const JobResult result = std::move(*pending->result);
  lock.unlock();
  const grpc::Status status = fill_response(result, response);
  return finish(status, status.ok() ? &result : nullptr);
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
