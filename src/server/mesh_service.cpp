#include "cube3d/server/mesh_service.h"

#include <grpcpp/impl/rpc_service_method.h>
#include <grpcpp/support/method_handler.h>

#include <chrono>
#include <string>

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
  const auto& metadata = context->client_metadata();
  if (const auto it = metadata.find("authorization"); it != metadata.end()) {
    call.authorization.assign(it->second.data(), it->second.size());
  }
  call.add_trailer = [context](const std::string& key, const std::string& value) {
    context->AddTrailingMetadata(key, value);
  };
  call.gone = [context]() -> std::optional<grpc::Status> {
    if (!context->IsCancelled()) return std::nullopt;
    // gRPC cancels a call whose deadline passed too, and its client sees DEADLINE_EXCEEDED:
    // answer (and count) what the client sees.
    if (std::chrono::system_clock::now() >= context->deadline()) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "the client's deadline passed");
    }
    return grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the call");
  };
  return call;
}

}  // namespace

MeshServiceImpl::MeshServiceImpl(MeshServiceCore& core) : core_(core) {
  // What the generated MeshService::Service does, with the wire twin as the request type.
  // grpc::Service takes ownership of the method objects (its API takes raw pointers).
  AddMethod(new grpc::internal::RpcServiceMethod(
      kGenerateMeshMethod, grpc::internal::RpcMethod::NORMAL_RPC,
      new grpc::internal::RpcMethodHandler<MeshServiceImpl, v1::wire::GenerateMeshRequest,
                                           v1::GenerateMeshResponse, grpc::protobuf::MessageLite,
                                           grpc::protobuf::MessageLite>(
          [](MeshServiceImpl* service, grpc::ServerContext* context,
             const v1::wire::GenerateMeshRequest* request, v1::GenerateMeshResponse* response) {
            return service->GenerateMesh(context, request, response);
          },
          this)));
  AddMethod(new grpc::internal::RpcServiceMethod(
      kGenerateMeshStreamMethod, grpc::internal::RpcMethod::SERVER_STREAMING,
      new grpc::internal::ServerStreamingHandler<MeshServiceImpl, v1::wire::GenerateMeshRequest,
                                                 v1::GenerateMeshEvent>(
          [](MeshServiceImpl* service, grpc::ServerContext* context,
             const v1::wire::GenerateMeshRequest* request,
             grpc::ServerWriter<v1::GenerateMeshEvent>* writer) {
            return service->GenerateMeshStream(context, request, writer);
          },
          this)));
}

grpc::Status MeshServiceImpl::GenerateMesh(grpc::ServerContext* context,
                                           const v1::wire::GenerateMeshRequest* request,
                                           v1::GenerateMeshResponse* response) {
  return core_.generate(*request, call_of(context), response, nullptr);
}

grpc::Status MeshServiceImpl::GenerateMeshStream(
    grpc::ServerContext* context, const v1::wire::GenerateMeshRequest* request,
    grpc::ServerWriter<v1::GenerateMeshEvent>* writer) {
  v1::GenerateMeshEvent result_event;
  const int64_t tokens = core_.options().tokens_per_shape;
  const grpc::Status status = core_.generate(
      *request, call_of(context), result_event.mutable_result(), [&](const JobProgress& p) {
        v1::GenerateMeshEvent event;
        *event.mutable_progress() = to_progress_event(p, tokens);
        writer->Write(event);  // a failed write means the client left; cancellation follows
      });
  if (status.ok()) writer->Write(result_event);
  return status;
}

}  // namespace cube3d
