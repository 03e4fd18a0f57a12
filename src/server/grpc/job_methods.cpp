// SubmitMeshJob, GetMeshJob and CancelMeshJob: unary calls over the job service
// (jobs/job_service.h). Their requests are read as bytes and parsed here, as GenerateMesh's
// are, so that bytes that are no message get INVALID_ARGUMENT (SubmitMeshJob's prompt is read
// as bytes, generate_request_bytes.h: invalid UTF-8 is the service's INVALID_ARGUMENT naming
// `prompt`). No call holds a thread: an answer comes from the thread that ends the job, the
// timer's or the job store's (a Redis store answers every call from its client's threads).
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/impl/rpc_service_method.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/server_callback.h>

#include <chrono>
#include <string>

#include "cube3d/api/grpc_status.h"
#include "cube3d/server/grpc/generate_request_bytes.h"
#include "cube3d/server/grpc/mesh_service.h"
#include "cube3d/server/grpc/message_bytes.h"

namespace cube3d {
namespace {

// gRPC keeps the method name's pointer: string literals, which live as long as the program.
constexpr const char* kSubmitMethod = "/cube3d.v1.MeshService/SubmitMeshJob";
constexpr const char* kGetMethod = "/cube3d.v1.MeshService/GetMeshJob";
constexpr const char* kCancelMethod = "/cube3d.v1.MeshService/CancelMeshJob";

bool parse(const grpc::ByteBuffer* bytes, v1::GenerateMeshRequest* message) {
  return parse_generate_request(flat_bytes(*bytes), *message);
}
template <typename Message>
bool parse(const grpc::ByteBuffer* bytes, Message* message) {
  return parse_message(*bytes, message);
}

void answer(grpc::CallbackServerContext* context, grpc::ServerUnaryReactor* reactor,
            v1::MeshJob* response, JobAnswer result) {
  for (const auto& [key, value] : result.trailers) context->AddTrailingMetadata(key, value);
  if (result.status.ok()) *response = std::move(result.job);
  reactor->Finish(to_grpc_status(result.status));  // the door's one map
}

std::string authorization_of(const grpc::CallbackServerContext& context) {
  return call_of(context).authorization;
}

using Handler = grpc::internal::CallbackUnaryHandler<grpc::ByteBuffer, v1::MeshJob>;

// One unary job method: its request parsed from bytes (INVALID_ARGUMENT naming the type when it
// is none), then `serve(context, request, answer)`, which answers once, now or later (the
// reactor and response live until Finish).
template <typename Request, typename Serve>
void add_unary(MeshServiceImpl& service, int index, const char* type_name, Serve serve) {
  service.MarkMethodCallback(
      index, new Handler(  // NOLINT(cppcoreguidelines-owning-memory): grpc::Service owns it
                 [type_name, serve](grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* bytes, v1::MeshJob* response) {
                   grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
                   Request request;
                   if (!parse(bytes, &request)) {
                     reactor->Finish(unparsable_message(*bytes, type_name));
                     return reactor;
                   }
                   serve(context, request, [context, reactor, response](JobAnswer result) {
                     answer(context, reactor, response, std::move(result));
                   });
                   return reactor;
                 }));
}

}  // namespace

void add_job_methods(MeshServiceImpl& service, JobService& jobs) {
  // grpc::Service takes ownership of the method objects (its API takes raw pointers); indices
  // follow GenerateMesh (0) and GenerateMeshStream (1).
  for (const char* method : {kSubmitMethod, kGetMethod, kCancelMethod}) {
    service.AddMethod(new grpc::internal::RpcServiceMethod(  // NOLINT(*-owning-memory)
        method, grpc::internal::RpcMethod::NORMAL_RPC, nullptr));
  }
  add_unary<v1::GenerateMeshRequest>(
      service, 2, "cube3d.v1.GenerateMeshRequest",
      [&jobs](grpc::CallbackServerContext* context, const auto& request, const auto& done) {
        jobs.submit(request, call_of(*context), done);
      });
  add_unary<v1::GetMeshJobRequest>(
      service, 3, "cube3d.v1.GetMeshJobRequest",
      [&jobs](grpc::CallbackServerContext* context, const auto& request, const auto& done) {
        jobs.get(request.id(), authorization_of(*context),
                 std::chrono::milliseconds(request.wait_ms()), done);
      });
  add_unary<v1::CancelMeshJobRequest>(
      service, 4, "cube3d.v1.CancelMeshJobRequest",
      [&jobs](grpc::CallbackServerContext* context, const auto& request, const auto& done) {
        jobs.cancel(request.id(), authorization_of(*context), done);
      });
}

}  // namespace cube3d
