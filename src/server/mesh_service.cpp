#include "cube3d/server/mesh_service.h"

#include <grpcpp/impl/rpc_service_method.h>
#include <grpcpp/support/method_handler.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "cube3d/core/printable.h"
#include "cube3d/server/grpc_call_counter.h"

namespace cube3d {
namespace {

// gRPC keeps the method name's pointer: string literals, which live as long as the program.
constexpr const char* kGenerateMeshMethod = "/cube3d.v1.MeshService/GenerateMesh";
constexpr const char* kGenerateMeshStreamMethod = "/cube3d.v1.MeshService/GenerateMeshStream";

SteadyClock::time_point steady_deadline(const grpc::ServerContext& context) {
  const auto now_system = std::chrono::system_clock::now();
  const auto client = context.deadline();
  // gRPC reports "no deadline" as a time point far in the future.
  if (client >= now_system + std::chrono::hours(24 * 365)) return SteadyClock::time_point::max();
  return SteadyClock::now() +
         std::chrono::duration_cast<SteadyClock::duration>(client - now_system);
}

CallContext call_of(grpc::ServerContext* context) {
  CallContext call;
  call.deadline = steady_deadline(*context);
  call.transport = "grpc";
  call.outcome_counted_by_front_door = true;
  const auto& metadata = context->client_metadata();
  if (const auto it = metadata.find("authorization"); it != metadata.end()) {
    call.authorization.assign(it->second.data(), it->second.size());
  }
  if (const auto it = metadata.find("traceparent"); it != metadata.end()) {
    call.traceparent.assign(it->second.data(), it->second.size());
  }
  call.add_trailer = [context](const std::string& key, const std::string& value) {
    context->AddTrailingMetadata(key, value);
  };
  call.gone = [context]() -> std::optional<grpc::Status> {
    if (!context->IsCancelled()) return std::nullopt;
    // gRPC cancels a call whose deadline passed too, and its client sees DEADLINE_EXCEEDED:
    // answer (and count) what the client sees.
    if (GrpcCallCounter::deadline_reached(context->deadline())) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "the client's deadline passed");
    }
    return grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the call");
  };
  return call;
}

// Reads the one request message of a call (the methods are registered as streaming at the
// C++ level, see the constructor) and parses it as the wire twin.
template <typename Stream>
grpc::Status read_request(grpc::ServerContext* context, Stream* stream, Watchdog& watchdog,
                          v1::wire::GenerateMeshRequest* request) {
  grpc::ByteBuffer raw;
  // A stalled sender is cancelled after the limit (the client sees CANCELLED).
  Watchdog::Watch watch = watchdog.watch([context] { context->TryCancel(); });
  const bool read = stream->Read(&raw);
  if (watch.close()) {
    return grpc::Status(grpc::StatusCode::CANCELLED,
                        "no request message within limits.request_read_timeout_ms (" +
                            std::to_string(watchdog.limit().count()) + " ms)");
  }
  if (!read) {
    // The transport refused the message (over the receive limit: it fails the call and the
    // client sees RESOURCE_EXHAUSTED), or the call carried none. The failed call's
    // cancellation lands a moment after the failed read: wait for it (briefly), so that the
    // request counter, which reads IsCancelled(), tells the two apart.
    GrpcCallCounter::note_request_message_missing();
    const auto until = SteadyClock::now() + std::chrono::milliseconds(250);
    while (!context->IsCancelled() && SteadyClock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the call carried no GenerateMeshRequest message");
  }
  const size_t bytes = raw.Length();
  if (!grpc::SerializationTraits<v1::wire::GenerateMeshRequest>::Deserialize(&raw, request).ok()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the request message (" + std::to_string(bytes) +
                            " bytes) does not parse as a cube3d.v1.GenerateMeshRequest");
  }
  return grpc::Status::OK;
}

}  // namespace

MeshServiceImpl::MeshServiceImpl(MeshServiceCore& core)
    : core_(core),
      request_read_watchdog_(
          std::chrono::milliseconds(core.options().policy.limits.request_read_timeout_ms)) {
  // Both methods are registered as bidirectional streams at the C++ level (on the wire a unary
  // call and a stream look the same; reflection serves the public proto's descriptors): gRPC
  // then hands the call to the handler before reading its message, so that a message the
  // transport refuses (over the receive limit) still reaches a handler, which the request
  // counter needs, and the handler reads and parses the bytes itself.
  // grpc::Service takes ownership of the method objects (its API takes raw pointers).
  AddMethod(new grpc::internal::RpcServiceMethod(
      kGenerateMeshMethod, grpc::internal::RpcMethod::BIDI_STREAMING,
      new grpc::internal::BidiStreamingHandler<MeshServiceImpl, grpc::ByteBuffer,
                                               v1::GenerateMeshResponse>(
          [](MeshServiceImpl* service, grpc::ServerContext* context, UnaryStream* stream) {
            return service->GenerateMesh(context, stream);
          },
          this)));
  AddMethod(new grpc::internal::RpcServiceMethod(
      kGenerateMeshStreamMethod, grpc::internal::RpcMethod::BIDI_STREAMING,
      new grpc::internal::BidiStreamingHandler<MeshServiceImpl, grpc::ByteBuffer,
                                               v1::GenerateMeshEvent>(
          [](MeshServiceImpl* service, grpc::ServerContext* context, EventStream* stream) {
            return service->GenerateMeshStream(context, stream);
          },
          this)));
}

grpc::Status MeshServiceImpl::GenerateMesh(grpc::ServerContext* context, UnaryStream* stream) {
  v1::wire::GenerateMeshRequest request;
  if (grpc::Status status = read_request(context, stream, request_read_watchdog_, &request);
      !status.ok())
    return status;
  v1::GenerateMeshResponse response;
  const grpc::Status status = core_.generate(request, call_of(context), &response, nullptr);
  if (status.ok()) stream->Write(response);  // a failed write: the client left
  return status;
}

grpc::Status MeshServiceImpl::GenerateMeshStream(grpc::ServerContext* context,
                                                 EventStream* stream) {
  v1::wire::GenerateMeshRequest request;
  if (grpc::Status status = read_request(context, stream, request_read_watchdog_, &request);
      !status.ok())
    return status;
  v1::GenerateMeshEvent result_event;
  const int64_t tokens = core_.options().tokens_per_shape;
  const grpc::Status status = core_.generate(
      request, call_of(context), result_event.mutable_result(), [&](const JobProgress& p) {
        v1::GenerateMeshEvent event;
        *event.mutable_progress() = to_progress_event(p, tokens);
        stream->Write(event);  // a failed write means the client left; cancellation follows
      });
  if (status.ok()) stream->Write(result_event);
  return status;
}

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
                              ": this server has /cube3d.v1.MeshService/GenerateMesh and "
                              "/cube3d.v1.MeshService/GenerateMeshStream (and grpc.health.v1, "
                              "server reflection)"));
    }
    void OnCancel() override { cancelled_ = true; }
    void OnDone() override {
      const bool deadline_passed = GrpcCallCounter::deadline_reached(context_->deadline());
      if (owner_.count_) {
        owner_.count_(GrpcCallCounter::code_seen_by_client("UNIMPLEMENTED", cancelled_,
                                                           deadline_passed, false));
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
