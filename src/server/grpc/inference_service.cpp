#include "cube3d/server/grpc/inference_service.h"

#include <google/protobuf/util/json_util.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/impl/rpc_service_method.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/server_callback.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cube3d/api/grpc_status.h"
#include "cube3d/core/error.h"
#include "cube3d/server/grpc/infer_proto.h"
#include "cube3d/server/grpc/mesh_service.h"
#include "cube3d/server/grpc/message_bytes.h"
#include "cube3d/server/grpc/write_queue.h"
#include "cube3d/server/inference/protocol_json.h"
#include "inference/grpc_service.pb.h"

namespace cube3d {
namespace {

namespace oip = ::inference;
using ::grpc::ByteBuffer;

// gRPC keeps the method name's pointer: string literals, which live as long as the program.
constexpr const char* kServerLive = "/inference.GRPCInferenceService/ServerLive";
constexpr const char* kServerReady = "/inference.GRPCInferenceService/ServerReady";
constexpr const char* kModelReady = "/inference.GRPCInferenceService/ModelReady";
constexpr const char* kServerMetadata = "/inference.GRPCInferenceService/ServerMetadata";
constexpr const char* kModelMetadata = "/inference.GRPCInferenceService/ModelMetadata";
constexpr const char* kModelInfer = "/inference.GRPCInferenceService/ModelInfer";
constexpr const char* kModelStreamInfer = "/inference.GRPCInferenceService/ModelStreamInfer";
constexpr const char* kModelConfig = "/inference.GRPCInferenceService/ModelConfig";
constexpr const char* kModelStatistics = "/inference.GRPCInferenceService/ModelStatistics";
constexpr const char* kRepositoryIndex = "/inference.GRPCInferenceService/RepositoryIndex";

// The protocol's JSON rendering (inference/protocol_json.h) into its gRPC message: one
// rendering for both doors.
void from_json(const nlohmann::json& json, google::protobuf::Message* message) {
  const auto status = google::protobuf::util::JsonStringToMessage(json.dump(), message);
  if (!status.ok()) {
    throw internal_error("the " + message->GetTypeName() +
                         " rendering does not parse: " + std::string(status.message()));
  }
}

std::string caller_authorization(const grpc::CallbackServerContext& context) {
  return call_of(context).authorization;
}

Status cancelled_by_client(const grpc::CallbackServerContext& context) {
  if (grpc_outcome::deadline_reached(context.deadline())) {
    return Status(ErrorCode::kDeadlineExceeded, "the client's deadline passed");
  }
  return Status(ErrorCode::kCancelled, "the client cancelled the call");
}

// A unary method answered at once: `answer(context, request, response)` fills the response or
// throws cube3d::Error, which becomes the call's status.
template <typename Request, typename Response, typename Answer>
void add_answered(InferenceServiceImpl& service, int index, const char* method, Answer answer) {
  service.AddMethod(new grpc::internal::RpcServiceMethod(  // NOLINT(*-owning-memory)
      method, grpc::internal::RpcMethod::NORMAL_RPC, nullptr));
  service.MarkMethodCallback(
      index,
      new grpc::internal::CallbackUnaryHandler<ByteBuffer, ByteBuffer>(  // NOLINT
          [answer](grpc::CallbackServerContext* context, const ByteBuffer* bytes, ByteBuffer* out) {
            grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
            Request request;
            if (!parse_message(*bytes, &request)) {
              reactor->Finish(unparsable_message(*bytes, Request().GetTypeName()));
              return reactor;
            }
            Response response;
            try {
              answer(*context, request, response);
            } catch (const Error& e) {
              reactor->Finish(to_grpc_status(Status(e)));
              return reactor;
            }
            *out = serialized_message(response);
            reactor->Finish(grpc::Status::OK);
            return reactor;
          }));
}

// ModelInfer: one inference, answered when it ends; cancelled with the call.
class InferCall final : public grpc::ServerUnaryReactor,
                        public std::enable_shared_from_this<InferCall> {
 public:
  InferCall(InferenceServiceImpl& service, grpc::CallbackServerContext* context, ByteBuffer* out)
      : service_(service), context_(context), out_(out) {}

  static grpc::ServerUnaryReactor* create(InferenceServiceImpl& service,
                                          grpc::CallbackServerContext* context,
                                          const ByteBuffer* bytes, ByteBuffer* out) {
    auto call = std::make_shared<InferCall>(service, context, out);
    call->self_ = call;
    call->start(*bytes);
    return call.get();
  }

  void OnCancel() override {
    std::shared_ptr<inference::InferRun> run;
    {
      const std::lock_guard lock(mutex_);
      cancelled_ = true;
      run = run_;
    }
    if (run) run->cancel(cancelled_by_client(*context_));
  }

  void OnDone() override {
    std::shared_ptr<InferCall> last;
    const std::lock_guard lock(mutex_);
    run_.reset();
    last = std::move(self_);
  }

 private:
  void start(const ByteBuffer& bytes) {
    oip::ModelInferRequest message;
    if (!parse_message(bytes, &message))
      return refuse(unparsable_message(bytes, "inference.ModelInferRequest"));
    try {
      inference::InferRequest request = infer_request_of(message);
      message.Clear();  // its inputs are copied: let the bytes go
      CallContext call = call_of(*context_);
      call.outcome_counted_by_front_door = false;  // the service counts each prompt
      inference::InferObserver observer;
      observer.done = [self = shared_from_this()](inference::InferOutcome outcome) {
        self->on_outcome(std::move(outcome));
      };
      std::shared_ptr<inference::InferRun> run =
          service_.endpoint().infer(std::move(request), std::move(call), std::move(observer));
      bool cancelled = false;
      {
        const std::lock_guard lock(mutex_);
        if (!finished_) run_ = run;
        cancelled = cancelled_;
      }
      if (cancelled) run->cancel(cancelled_by_client(*context_));
    } catch (const Error& e) {
      service_.count(std::string(to_string(e.code())));
      refuse(to_grpc_status(Status(e)));
    }
  }

  void refuse(const grpc::Status& status) {
    const std::lock_guard lock(mutex_);
    if (finished_) return;
    finished_ = true;
    Finish(status);
  }

  void on_outcome(inference::InferOutcome outcome) {
    const std::lock_guard lock(mutex_);
    if (finished_) return;
    finished_ = true;
    run_.reset();
    for (const auto& [key, value] : outcome.trailers) context_->AddTrailingMetadata(key, value);
    if (!outcome.status.ok()) {
      Finish(to_grpc_status(outcome.status));
      return;
    }
    oip::ModelInferResponse response;
    fill_infer_response(outcome.answer, &response);
    *out_ = serialized_message(response);
    Finish(grpc::Status::OK);
  }

  InferenceServiceImpl& service_;
  grpc::CallbackServerContext* const context_;
  ByteBuffer* const out_;
  std::mutex mutex_;
  std::shared_ptr<InferCall> self_;  // until OnDone
  std::shared_ptr<inference::InferRun> run_;
  bool cancelled_ = false;
  bool finished_ = false;
};

// ModelStreamInfer: requests read one after another (at most kMaxStreamInferences in flight),
// each answered as it ends; the stream ends OK once the client has half-closed and every answer
// is written. Until its first request arrives the stream counts against
// grpc.max_calls_awaiting_message (awaiting_calls.h), with no read timeout of its own: Triton's
// clients open a stream (start_stream) well before they send on it. Every gRPC operation is
// started under mutex_; the endpoint is never called with it held (a run may end at once, into
// on_run_done).
class InferStream final : public grpc::ServerBidiReactor<ByteBuffer, ByteBuffer>,
                          public AwaitingCalls::Call,
                          public std::enable_shared_from_this<InferStream> {
 public:
  InferStream(InferenceServiceImpl& service, grpc::CallbackServerContext* context)
      : service_(service), context_(context) {}

  static grpc::ServerBidiReactor<ByteBuffer, ByteBuffer>* create(
      InferenceServiceImpl& service, grpc::CallbackServerContext* context) {
    auto stream = std::make_shared<InferStream>(service, context);
    stream->self_ = stream;
    // Not under mutex_: registering may refuse the oldest waiting call, which takes its lock.
    const uint64_t place = service.awaiting().await(stream);
    const std::lock_guard lock(stream->mutex_);
    stream->awaiting_place_ = place;
    stream->awaiting_ = true;
    if (stream->finishing_) {
      stream->leave_awaiting_locked();  // refused by a younger call's registration already
    } else {
      stream->read_locked();
    }
    return stream.get();
  }

  void refuse_unread(const grpc::Status& status) override {
    const std::lock_guard lock(mutex_);
    if (finishing_ || first_read_) return;
    leave_awaiting_locked();
    finishing_ = true;
    Finish(status);
  }

  void OnReadDone(bool ok) override {
    {
      const std::lock_guard lock(mutex_);
      first_read_ = true;
      leave_awaiting_locked();
    }
    if (!ok) {
      // The client half-closed (or the call is cancelled): answer what is in flight, then end.
      const std::lock_guard lock(mutex_);
      reading_ = false;
      half_closed_ = true;
      pump_locked();
      return;
    }
    ByteBuffer bytes;
    {
      const std::lock_guard lock(mutex_);
      reading_ = false;
      bytes = std::move(read_bytes_);
      read_bytes_.Clear();
    }
    handle(bytes);
  }

  void OnWriteDone(bool ok) override {
    std::vector<std::shared_ptr<inference::InferRun>> runs;
    {
      const std::lock_guard lock(mutex_);
      writes_.written(ok);
      if (!ok) {
        // The client is gone: nothing more goes out, and what runs for it stops.
        broken_ = true;
        runs = runs_locked();
      }
      pump_locked();
    }
    for (const auto& run : runs) run->cancel(Status(ErrorCode::kCancelled, "the client went away"));
  }

  void OnCancel() override {
    std::vector<std::shared_ptr<inference::InferRun>> runs;
    {
      const std::lock_guard lock(mutex_);
      broken_ = true;
      // Nothing more goes out; a write under way keeps its message until OnWriteDone.
      writes_.drop_waiting();
      runs = runs_locked();
    }
    for (const auto& run : runs) run->cancel(cancelled_by_client(*context_));
    const std::lock_guard lock(mutex_);
    pump_locked();  // nothing in flight and no read pending: end it now
  }

  void OnDone() override {
    std::shared_ptr<InferStream> last;
    const std::lock_guard lock(mutex_);
    leave_awaiting_locked();
    grpc_done_ = true;
    writes_.stop_timer();
    runs_.clear();
    last = std::move(self_);
  }

 private:
  void handle(const ByteBuffer& bytes) {
    const uint64_t tag = next_tag_++;
    oip::ModelInferRequest message;
    std::string id;
    try {
      if (!parse_message(bytes, &message)) {
        throw invalid_argument("a request message (" + std::to_string(bytes.Length()) +
                               " bytes) does not parse as an inference.ModelInferRequest");
      }
      id = message.id();
      inference::InferRequest request = infer_request_of(message);
      message.Clear();
      CallContext call = call_of(*context_);
      call.outcome_counted_by_front_door = false;
      const std::weak_ptr<InferStream> weak = weak_from_this();
      inference::InferObserver observer;
      observer.progress = [weak, model = request.model_name, version = request.model_version, id](
                              size_t index, const v1::Progress& p) {
        if (const auto self = weak.lock()) self->on_progress(model, version, id, index, p);
      };
      observer.done = [weak, tag, id](inference::InferOutcome outcome) {
        if (const auto self = weak.lock()) self->on_run_done(tag, id, std::move(outcome));
      };
      {
        const std::lock_guard lock(mutex_);
        ++in_flight_;
      }
      std::shared_ptr<inference::InferRun> run;
      try {
        run = service_.endpoint().infer(std::move(request), std::move(call), std::move(observer));
      } catch (...) {
        const std::lock_guard lock(mutex_);
        --in_flight_;
        throw;
      }
      const std::lock_guard lock(mutex_);
      if (!run->finished()) runs_[tag] = run;
      if (broken_) {
        // Cancelled meanwhile: OnCancel did not see this one.
        runs_.erase(tag);
        run->cancel(Status(ErrorCode::kCancelled, "the client went away"));
      }
      read_locked();
    } catch (const Error& e) {
      service_.count(std::string(to_string(e.code())));
      oip::ModelStreamInferResponse response;
      response.set_error_message(std::string(to_string(e.code())) + ": " + e.what());
      response.mutable_infer_response()->set_id(id);
      const std::lock_guard lock(mutex_);
      enqueue_locked(response);
      read_locked();
    }
  }

  void on_progress(const std::string& model, const std::string& version, const std::string& id,
                   size_t index, const v1::Progress& event) {
    oip::ModelStreamInferResponse response;
    oip::ModelInferResponse* r = response.mutable_infer_response();
    r->set_model_name(model);
    r->set_model_version(version.empty() ? inference::kModelVersion : version);
    r->set_id(id);
    auto& params = *r->mutable_parameters();
    params["stage"].set_string_param(v1::Stage_Name(event.stage()));
    params["tokens_done"].set_int64_param(event.tokens_done());
    params["tokens_total"].set_int64_param(event.tokens_total());
    params["prompt"].set_int64_param(static_cast<int64_t>(index));
    if (event.points_planned() > 0) {
      params["points_done"].set_int64_param(static_cast<int64_t>(event.points_done()));
      params["points_planned"].set_int64_param(static_cast<int64_t>(event.points_planned()));
    }
    params["triton_final_response"].set_bool_param(false);
    const std::lock_guard lock(mutex_);
    enqueue_locked(response);
  }

  void on_run_done(uint64_t tag, const std::string& id, inference::InferOutcome outcome) {
    oip::ModelStreamInferResponse response;
    if (outcome.status.ok()) {
      fill_infer_response(outcome.answer, response.mutable_infer_response());
      if (outcome.progress) {
        (*response.mutable_infer_response()->mutable_parameters())["triton_final_response"]
            .set_bool_param(true);
      }
    } else {
      response.set_error_message(std::string(to_string(outcome.status.code())) + ": " +
                                 outcome.status.message());
      response.mutable_infer_response()->set_id(id);
    }
    const std::lock_guard lock(mutex_);
    runs_.erase(tag);
    --in_flight_;
    enqueue_locked(response);
    read_locked();  // a stream paused at its limit reads on
    pump_locked();
  }

  std::vector<std::shared_ptr<inference::InferRun>> runs_locked() const {
    std::vector<std::shared_ptr<inference::InferRun>> runs;
    for (const auto& [tag, run] : runs_) runs.push_back(run);
    return runs;
  }

  // Reads the next request, unless one is being read, the client is done sending, or the
  // stream is at its limit of requests in flight.
  void read_locked() {
    if (reading_ || half_closed_ || broken_ || finishing_ || in_flight_ >= kMaxStreamInferences) {
      return;
    }
    reading_ = true;
    StartRead(&read_bytes_);
  }

  void enqueue_locked(const oip::ModelStreamInferResponse& response) {
    if (broken_ || finishing_) return;
    writes_.push(serialized_message(response));
    pump_locked();
  }

  // Starts the next write, or ends the stream once the client is done sending (or gone) and
  // every answer is written (or dropped).
  void pump_locked() {
    if (finishing_ || writes_.writing()) return;
    if (writes_.empty()) {
      // A cancelled stream paused at its limit has no read pending that would say it is done.
      if ((half_closed_ || broken_) && in_flight_ == 0 && !reading_) {
        finishing_ = true;
        Finish(broken_ ? grpc::Status(grpc::StatusCode::CANCELLED, "the stream was cancelled")
                       : grpc::Status::OK);
      }
      return;
    }
    const std::weak_ptr<InferStream> weak = weak_from_this();
    const int64_t limit_ms = service_.options().write_timeout_ms;
    StartWrite(
        writes_.start(service_.timers(), std::chrono::milliseconds(limit_ms), [weak, limit_ms] {
          if (const auto self = weak.lock()) self->on_write_timeout(limit_ms);
        }));
  }

  void leave_awaiting_locked() {
    if (!awaiting_) return;
    awaiting_ = false;
    service_.awaiting().arrived(awaiting_place_);
  }

  void on_write_timeout(int64_t limit_ms) {
    const std::lock_guard lock(mutex_);
    if (!writes_.writing() || grpc_done_) return;
    spdlog::info(
        "grpc: a client took no stream response for {} ms (grpc.write_timeout_ms): "
        "cancelled",
        limit_ms);
    // The pending write then fails (OnWriteDone(false)), which cancels the stream's runs.
    context_->TryCancel();
  }

  InferenceServiceImpl& service_;
  grpc::CallbackServerContext* const context_;  // valid until OnDone

  std::mutex mutex_;
  std::shared_ptr<InferStream> self_;  // until OnDone
  ByteBuffer read_bytes_;
  bool reading_ = false;
  bool half_closed_ = false;
  int64_t in_flight_ = 0;
  uint64_t next_tag_ = 0;  // touched by the reading thread only (one read at a time)
  std::map<uint64_t, std::shared_ptr<inference::InferRun>> runs_;
  WriteQueue<ByteBuffer> writes_;
  bool broken_ = false;     // cancelled, or a write failed: nothing more goes out
  bool finishing_ = false;  // Finish was called
  bool grpc_done_ = false;
  bool first_read_ = false;  // a read has completed (a request, or the client's half-close)
  bool awaiting_ = false;    // on the service's list of calls awaiting their message
  uint64_t awaiting_place_ = 0;
};

}  // namespace

InferenceServiceImpl::InferenceServiceImpl(inference::InferenceEndpoint& endpoint,
                                           TimerQueue& timers, AwaitingCalls& awaiting,
                                           GrpcOptions options, Count count)
    : endpoint_(endpoint),
      timers_(timers),
      awaiting_(awaiting),
      options_(std::move(options)),
      count_(std::move(count)) {
  using nlohmann::json;
  int index = 0;
  add_answered<oip::ServerLiveRequest, oip::ServerLiveResponse>(
      *this, index++, kServerLive,
      [](const grpc::CallbackServerContext&, const auto&, auto& response) {
        response.set_live(true);
      });
  add_answered<oip::ServerReadyRequest, oip::ServerReadyResponse>(
      *this, index++, kServerReady,
      [this](const grpc::CallbackServerContext&, const auto&, auto& response) {
        response.set_ready(endpoint_.ready());
      });
  add_answered<oip::ModelReadyRequest, oip::ModelReadyResponse>(
      *this, index++, kModelReady,
      [this](const grpc::CallbackServerContext& context, const auto& request, auto& response) {
        const bool ready = endpoint_.model_ready(request.name(), request.version());
        // Ready, and not this model: NOT_FOUND naming the one it serves.
        if (!ready && endpoint_.ready()) {
          (void)endpoint_.describe_for(caller_authorization(context), request.name(),
                                       request.version());
        }
        response.set_ready(ready);
      });
  add_answered<oip::ServerMetadataRequest, oip::ServerMetadataResponse>(
      *this, index++, kServerMetadata,
      [this](const grpc::CallbackServerContext&, const auto&, auto& response) {
        from_json(inference::server_metadata_json(endpoint_.server_version(),
                                                  inference::InferenceEndpoint::extensions()),
                  &response);
      });
  add_answered<oip::ModelMetadataRequest, oip::ModelMetadataResponse>(
      *this, index++, kModelMetadata,
      [this](const grpc::CallbackServerContext& context, const auto& request, auto& response) {
        from_json(inference::model_metadata_json(endpoint_.describe_for(
                      caller_authorization(context), request.name(), request.version())),
                  &response);
      });
  AddMethod(new grpc::internal::RpcServiceMethod(  // NOLINT(*-owning-memory)
      kModelInfer, grpc::internal::RpcMethod::NORMAL_RPC, nullptr));
  MarkMethodCallback(
      index++,
      new grpc::internal::CallbackUnaryHandler<ByteBuffer, ByteBuffer>(  // NOLINT
          [this](grpc::CallbackServerContext* context, const ByteBuffer* bytes, ByteBuffer* out) {
            return InferCall::create(*this, context, bytes, out);
          }));
  AddMethod(new grpc::internal::RpcServiceMethod(  // NOLINT(*-owning-memory)
      kModelStreamInfer, grpc::internal::RpcMethod::BIDI_STREAMING, nullptr));
  MarkMethodCallback(index++,
                     new grpc::internal::CallbackBidiHandler<ByteBuffer, ByteBuffer>(  // NOLINT
                         [this](grpc::CallbackServerContext* context) {
                           return InferStream::create(*this, context);
                         }));
  add_answered<oip::ModelConfigRequest, oip::ModelConfigResponse>(
      *this, index++, kModelConfig,
      [this](const grpc::CallbackServerContext& context, const auto& request, auto& response) {
        from_json(inference::model_config_json(endpoint_.describe_for(
                      caller_authorization(context), request.name(), request.version())),
                  response.mutable_config());
      });
  add_answered<oip::ModelStatisticsRequest, oip::ModelStatisticsResponse>(
      *this, index++, kModelStatistics,
      [this](const grpc::CallbackServerContext& context, const auto& request, auto& response) {
        // An empty name: every model's (this server's one).
        const auto model = request.name().empty()
                               ? endpoint_.describe_for(caller_authorization(context))
                               : endpoint_.describe_for(caller_authorization(context),
                                                        request.name(), request.version());
        from_json(inference::model_statistics_json(model, endpoint_.statistics()), &response);
      });
  add_answered<oip::RepositoryIndexRequest, oip::RepositoryIndexResponse>(
      *this, index++, kRepositoryIndex,
      [this](const grpc::CallbackServerContext& context, const auto& request, auto& response) {
        const auto model = endpoint_.describe_for(caller_authorization(context));
        const bool ready = endpoint_.ready();
        if (request.ready() && !ready) return;
        from_json(json{{"models", inference::repository_index_json(model, ready)}}, &response);
      });
}

}  // namespace cube3d
