#include "cube3d/server/grpc/mesh_service.h"

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/impl/rpc_service_method.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/server_callback.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cube3d/api/grpc_status.h"
#include "cube3d/core/peer_log.h"
#include "cube3d/core/printable.h"
#include "cube3d/server/admission/end_user.h"
#include "cube3d/server/grpc/call_outcome.h"
#include "cube3d/server/grpc/generate_request_bytes.h"
#include "cube3d/server/grpc/write_queue.h"
#include "cube3d/server/wire/answer_codec.h"
#include "cube3d/server/wire/progress_codec.h"
#include "cube3d/server/wire/request_codec.h"

namespace cube3d {
namespace {

// gRPC keeps the method name's pointer: string literals, which live as long as the program.
constexpr const char* kGenerateMeshMethod = "/cube3d.v1.MeshService/GenerateMesh";
constexpr const char* kGenerateMeshStreamMethod = "/cube3d.v1.MeshService/GenerateMeshStream";

// The final message of a call: the response itself (unary) or the result event (stream).
void set_final(v1::GenerateMeshResponse& out, v1::GenerateMeshResponse&& response) {
  out = std::move(response);
}
void set_final(v1::GenerateMeshEvent& out, v1::GenerateMeshResponse&& response) {
  *out.mutable_result() = std::move(response);
}

// One call to GenerateMesh (Response = GenerateMeshResponse) or GenerateMeshStream
// (GenerateMeshEvent). Kept alive by itself from creation until gRPC's OnDone, and by the service's
// observer while the service holds the call; timers hold it weakly. Every gRPC operation is
// started under `mutex_`, none after Finish; the service is never called with `mutex_` held (the
// service calls the observer with its own lock held).
template <typename Response>
class MeshCall final : public grpc::ServerBidiReactor<grpc::ByteBuffer, Response>,
                       public AwaitingCalls::Call,
                       public std::enable_shared_from_this<MeshCall<Response>> {
 public:
  static constexpr bool kStreaming = std::is_same_v<Response, v1::GenerateMeshEvent>;

  MeshCall(MeshServiceImpl& service, grpc::CallbackServerContext* context)
      : service_(service), context_(context) {}

  // The reactor gRPC gets: alive until OnDone.
  static grpc::ServerBidiReactor<grpc::ByteBuffer, Response>* create(
      MeshServiceImpl& service, grpc::CallbackServerContext* context) {
    auto call = std::make_shared<MeshCall>(service, context);
    call->self_ = call;
    call->begin();
    return call.get();
  }

  void OnReadDone(bool ok) override {
    {
      const std::lock_guard lock(mutex_);
      message_arrived_ = true;
      leave_awaiting_locked();
      read_timer_.cancel();
      if (finishing_) return;  // refused or timed out while the message was on its way
      if (!ok) {
        // No message: the client half-closed without one, or the transport refused it (over
        // the receive limit; the call is then cancelled, and the client reads
        // RESOURCE_EXHAUSTED).
        request_missing_ = true;
        finish_locked(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                   "the call carried no GenerateMeshRequest message"));
        return;
      }
    }
    start_on_service();
  }

  void OnWriteDone(bool ok) override {
    std::shared_ptr<ActiveCall> active;
    {
      const std::lock_guard lock(mutex_);
      writes_.written(ok);
      if (!ok) {
        // The client is gone (or the write timed out and the call was cancelled): nothing
        // more goes out; the service's outcome, or the one already here, finishes the call.
        broken_ = true;
        active = active_;
      }
      pump_locked();
    }
    if (active) {
      active->cancel(Status(ErrorCode::kCancelled, "the client went away"));
    }
  }

  void OnCancel() override {
    std::shared_ptr<ActiveCall> active;
    {
      const std::lock_guard lock(mutex_);
      cancelled_ = true;
      active = active_;
    }
    if (!active) return;
    // gRPC cancels a call whose deadline passed too, and its client sees DEADLINE_EXCEEDED:
    // answer (and count) what the client sees.
    if (grpc_outcome::deadline_reached(context_->deadline())) {
      active->cancel(Status(ErrorCode::kDeadlineExceeded, "the client's deadline passed"));
    } else {
      active->cancel(Status(ErrorCode::kCancelled, "the client cancelled the call"));
    }
  }

  void OnDone() override {
    std::string code;
    {
      const std::lock_guard lock(mutex_);
      grpc_done_ = true;
      leave_awaiting_locked();
      read_timer_.cancel();
      writes_.stop_timer();
      const bool deadline_passed = grpc_outcome::deadline_reached(context_->deadline());
      if (finished_unread_) {
        // We ended a call that never sent its message: its client read what we sent, unless
        // its own deadline ended it first.
        code = cancelled_ && deadline_passed ? "DEADLINE_EXCEEDED" : sent_code_;
      } else {
        code = grpc_outcome::code_seen_by_client(sent_code_, cancelled_, deadline_passed,
                                                 request_missing_);
      }
      active_.reset();
    }
    service_.count(code);
    // gRPC's side lets go; the object may live on briefly in a timer action's lock.
    const std::shared_ptr<MeshCall> last = std::move(self_);
  }

  void refuse_unread(const grpc::Status& status) override {
    const std::lock_guard lock(mutex_);
    if (finishing_ || message_arrived_) return;
    leave_awaiting_locked();
    read_timer_.cancel();
    finished_unread_ = true;
    finish_locked(status);
  }

 private:
  void begin() {
    const std::weak_ptr<MeshCall> weak = this->shared_from_this();
    // Not under mutex_: registering may refuse the oldest waiting call, which takes its lock.
    const uint64_t place = service_.awaiting().await(weak);
    const std::lock_guard lock(mutex_);
    awaiting_place_ = place;
    awaiting_ = true;
    if (finishing_) {
      // Refused (by a younger call's registration) before it was ready to read.
      leave_awaiting_locked();
      return;
    }
    const int64_t limit_ms = service_.service().options().policy.limits.request_read_timeout_ms;
    read_timer_ = service_.service().timers().schedule_after(
        std::chrono::milliseconds(limit_ms), [weak, limit_ms] {
          if (const auto call = weak.lock()) {
            call->refuse_unread(
                grpc::Status(grpc::StatusCode::CANCELLED,
                             "no request message within limits.request_read_timeout_ms (" +
                                 std::to_string(limit_ms) + " ms)"));
          }
        });
    this->StartRead(&request_bytes_);
  }

  void start_on_service() {
    v1::GenerateMeshRequest request;
    if (!parse_generate_request(flat_bytes(request_bytes_), request)) {
      const size_t bytes = request_bytes_.Length();
      const std::lock_guard lock(mutex_);
      if (!finishing_) {
        // Logged here, rate-limited (a peer's doing): the service never sees it.
        peer_log().report(
            "grpc", "protocol", spdlog::level::info,
            fmt::format("request - INVALID_ARGUMENT (grpc): {} bytes that are no request", bytes));
        finish_locked(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                   "the request message (" + std::to_string(bytes) +
                                       " bytes) does not parse as a "
                                       "cube3d.v1.GenerateMeshRequest"));
      }
      return;
    }
    const std::shared_ptr<MeshCall> self = this->shared_from_this();
    CallObserver observer;
    if constexpr (kStreaming) {
      observer.progress = [self](const TaskProgress& p) {
        v1::GenerateMeshEvent event;
        *event.mutable_progress() = progress_message(p);
        self->enqueue(std::move(event));
      };
    }
    observer.done = [self](CallOutcome outcome) { self->on_outcome(std::move(outcome)); };
    std::shared_ptr<ActiveCall> active = service_.service().start(
        client_request_of(request), call_of(*context_), std::move(observer));
    bool cancelled = false;
    {
      const std::lock_guard lock(mutex_);
      active_ = active;
      cancelled = cancelled_;
    }
    // OnCancel ran before the handle was here: pass it on now.
    if (cancelled) {
      active->cancel(Status(ErrorCode::kCancelled, "the client cancelled the call"));
    }
  }

  void enqueue(Response message) {
    const std::lock_guard lock(mutex_);
    if (finishing_ || final_status_ || broken_) return;
    writes_.push(std::move(message));
    pump_locked();
  }

  void on_outcome(CallOutcome outcome) {
    const std::lock_guard lock(mutex_);
    if (finishing_ || final_status_) return;
    for (const auto& [key, value] : outcome.trailers) context_->AddTrailingMetadata(key, value);
    if (outcome.status.ok() && !broken_) {
      Response last;
      set_final(last, response_message(outcome.answer));
      writes_.push(std::move(last));
    }
    final_status_ = to_grpc_status(outcome.status);  // the door's one map
    pump_locked();
  }

  // Starts the next write, or the Finish once every write is done and the outcome is known.
  void pump_locked() {
    if (finishing_ || writes_.writing()) return;
    if (writes_.empty()) {
      if (final_status_) finish_locked(*final_status_);
      return;
    }
    const bool last = writes_.size() == 1 && final_status_ && final_status_->ok();
    const std::weak_ptr<MeshCall> weak = this->shared_from_this();
    const int64_t limit_ms = service_.options().write_timeout_ms;
    Response* const next = writes_.start(service_.service().timers(),
                                         std::chrono::milliseconds(limit_ms), [weak, limit_ms] {
                                           if (const auto call = weak.lock()) {
                                             call->on_write_timeout(limit_ms);
                                           }
                                         });
    if (last) {
      // The last message goes out with the status (one operation; no OnWriteDone follows).
      finishing_ = true;
      sent_code_ = "OK";
      this->StartWriteAndFinish(next, grpc::WriteOptions(), *final_status_);
    } else {
      this->StartWrite(next);
    }
  }

  void on_write_timeout(int64_t limit_ms) {
    std::shared_ptr<ActiveCall> active;
    {
      const std::lock_guard lock(mutex_);
      if (!writes_.writing() || grpc_done_) return;
      spdlog::info("grpc: a client took no {} for {} ms (grpc.write_timeout_ms): cancelled",
                   kStreaming ? "event" : "response", limit_ms);
      active = active_;
      // The pending write then fails (OnWriteDone(false)) and the call finishes.
      context_->TryCancel();
    }
    if (active) {
      active->cancel(Status(ErrorCode::kCancelled, "the client read nothing for " +
                                                       std::to_string(limit_ms) +
                                                       " ms (grpc.write_timeout_ms)"));
    }
  }

  void finish_locked(const grpc::Status& status) {
    if (finishing_) return;
    finishing_ = true;
    sent_code_ = grpc_code_name(status.error_code());
    this->Finish(status);
  }

  void leave_awaiting_locked() {
    if (!awaiting_) return;
    awaiting_ = false;
    service_.awaiting().arrived(awaiting_place_);
  }

  MeshServiceImpl& service_;
  grpc::CallbackServerContext* const context_;  // valid until OnDone
  grpc::ByteBuffer request_bytes_;

  std::mutex mutex_;
  std::shared_ptr<MeshCall> self_;  // until OnDone
  std::shared_ptr<ActiveCall> active_;
  bool awaiting_ = false;  // registered with the service's bound
  uint64_t awaiting_place_ = 0;
  bool message_arrived_ = false;
  TimerQueue::Timer read_timer_;
  WriteQueue<Response> writes_;
  bool broken_ = false;  // a write failed: the client is gone
  std::optional<grpc::Status> final_status_;
  bool finishing_ = false;  // Finish was called: no gRPC operation after it
  bool grpc_done_ = false;  // OnDone ran: context_ is gone
  std::string sent_code_;
  bool cancelled_ = false;        // OnCancel ran
  bool request_missing_ = false;  // the read ended without a message
  bool finished_unread_ = false;  // refused or timed out before its message came
};

}  // namespace

std::string flat_bytes(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return {};
  std::string flat;
  flat.reserve(buffer.Length());
  for (const auto& slice : slices) {
    flat.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return flat;
}

SteadyClock::time_point steady_deadline(const grpc::CallbackServerContext& context) {
  const auto now_system = std::chrono::system_clock::now();
  const auto client = context.deadline();
  // gRPC reports "no deadline" as a time point far in the future.
  if (client >= now_system + std::chrono::hours(24 * 365)) return SteadyClock::time_point::max();
  return SteadyClock::now() +
         std::chrono::duration_cast<SteadyClock::duration>(client - now_system);
}

std::string metadata_value(const grpc::CallbackServerContext& context, const char* key) {
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find(key);
  return it == metadata.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

CallContext call_of(const grpc::CallbackServerContext& context) {
  CallContext call;
  call.deadline = steady_deadline(context);
  call.transport = "grpc";
  call.outcome_counted_by_front_door = true;
  call.authorization = metadata_value(context, "authorization");
  call.traceparent = metadata_value(context, "traceparent");
  call.end_user_count = context.client_metadata().count(kEndUserMetadata);
  if (call.end_user_count > 0) call.end_user = metadata_value(context, kEndUserMetadata);
  return call;
}

MeshServiceImpl::MeshServiceImpl(cube3d::Service& service, AwaitingCalls& awaiting,
                                 GrpcOptions options, Count count, JobService* jobs)
    : service_(service),
      options_(std::move(options)),
      count_(std::move(count)),
      jobs_(jobs),
      awaiting_(awaiting) {
  // grpc::Service takes ownership of the method and handler objects (its API takes raw
  // pointers); a callback method's handler is set by MarkMethodCallback.
  AddMethod(new grpc::internal::RpcServiceMethod(  // NOLINT(cppcoreguidelines-owning-memory)
      kGenerateMeshMethod, grpc::internal::RpcMethod::BIDI_STREAMING, nullptr));
  AddMethod(new grpc::internal::RpcServiceMethod(  // NOLINT(cppcoreguidelines-owning-memory)
      kGenerateMeshStreamMethod, grpc::internal::RpcMethod::BIDI_STREAMING, nullptr));
  MarkMethodCallback(
      0,
      new grpc::internal::CallbackBidiHandler<  // NOLINT(cppcoreguidelines-owning-memory)
          grpc::ByteBuffer, v1::GenerateMeshResponse>([this](grpc::CallbackServerContext* context) {
        return MeshCall<v1::GenerateMeshResponse>::create(*this, context);
      }));
  MarkMethodCallback(
      1, new grpc::internal::CallbackBidiHandler<  // NOLINT(cppcoreguidelines-owning-memory)
             grpc::ByteBuffer, v1::GenerateMeshEvent>([this](grpc::CallbackServerContext* context) {
        return MeshCall<v1::GenerateMeshEvent>::create(*this, context);
      }));
  if (jobs_) add_job_methods(*this, *jobs_);
}

MeshServiceImpl::~MeshServiceImpl() = default;

UnknownMethods::UnknownMethods(std::function<void(const std::string& code)> count)
    : count_(std::move(count)) {}

grpc::ServerGenericBidiReactor* UnknownMethods::CreateReactor(
    grpc::GenericCallbackServerContext* context) {
  // Answers at once; counted once gRPC is done with the call, with what its client saw.
  class Refusal final : public grpc::ServerGenericBidiReactor {
   public:
    Refusal(grpc::GenericCallbackServerContext* context, const UnknownMethods& owner)
        : context_(context), owner_(owner) {
      Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                          "unknown method " + printable(context->method(), 200) +
                              ": this server has /cube3d.v1.MeshService/ GenerateMesh, "
                              "GenerateMeshStream, SubmitMeshJob, GetMeshJob and CancelMeshJob; "
                              "/inference.GRPCInferenceService/ ServerLive, ServerReady, "
                              "ModelReady, ServerMetadata, ModelMetadata, ModelInfer, "
                              "ModelStreamInfer, ModelConfig, ModelStatistics and "
                              "RepositoryIndex (and grpc.health.v1, server reflection)"));
    }
    void OnCancel() override { cancelled_ = true; }
    void OnDone() override {
      const bool deadline_passed = grpc_outcome::deadline_reached(context_->deadline());
      if (owner_.count_) {
        owner_.count_(
            grpc_outcome::code_seen_by_client("UNIMPLEMENTED", cancelled_, deadline_passed, false));
      }
      delete this;  // NOLINT(cppcoreguidelines-owning-memory): gRPC's reactor contract
    }

   private:
    grpc::GenericCallbackServerContext* const context_;
    const UnknownMethods& owner_;
    std::atomic<bool> cancelled_{false};
  };
  // gRPC's callback API: the reactor deletes itself in OnDone.
  return new Refusal(context, *this);  // NOLINT(cppcoreguidelines-owning-memory)
}

}  // namespace cube3d
