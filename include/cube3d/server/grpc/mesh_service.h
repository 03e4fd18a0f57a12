// The gRPC front door of MeshService: cube3d.v1.MeshService/GenerateMesh and
// GenerateMeshStream over the one service (service/service.h), on gRPC's callback
// API: a call is a reactor that reads its request, starts it on the service and writes what the
// service delivers; no thread waits for a call, whatever the client does (grpc_server_options.h
// says what bounds the calls themselves).
//
// The methods are registered by hand rather than through the generated MeshService::Service so
// that the server reads the request's bytes itself (generate_request_bytes.h): invalid UTF-8 in
// the prompt then gets INVALID_ARGUMENT naming `prompt`, and bytes that are no request at all
// INVALID_ARGUMENT too, instead of protobuf's parse failure (INTERNAL). Both are bidirectional
// streams at the C++ level (on the wire a unary call and a stream look the same), so that a message
// the transport refuses (over the receive limit) still reaches our reactor, which counts it. The
// method paths, and the descriptors that reflection serves (found by the service's name), are those
// of the public cube3d/v1/mesh_service.proto.
//
// Every call is counted once, when gRPC is done with it, with the code its client saw
// (call_outcome.h). The service's outcomes (cube3d::Status) become gRPC statuses in one function
// (api/grpc_status.h).
#pragma once

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/impl/service_type.h>
#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "cube3d/server/grpc/awaiting_calls.h"
#include "cube3d/server/grpc/grpc_options.h"
#include "cube3d/server/jobs/job_service.h"
#include "cube3d/server/service/service.h"

namespace cube3d {

// The full name clients and health checks use.
inline constexpr const char* kMeshServiceName = "cube3d.v1.MeshService";

class MeshServiceImpl final : public grpc::Service {
 public:
  using Count = std::function<void(const std::string& code)>;

  // `service` and `awaiting` (and `jobs`, when given: SubmitMeshJob, GetMeshJob, CancelMeshJob)
  // must outlive the service; `count` gets each mesh call's code (cube3d_requests_total; a job's
  // outcome is counted by the service, its polls not at all).
  MeshServiceImpl(cube3d::Service& service, AwaitingCalls& awaiting, GrpcOptions options,
                  Count count, JobService* jobs = nullptr);
  ~MeshServiceImpl() override;

  // The calls waiting for their request message, under grpc.max_calls_awaiting_message (shared
  // with the inference service's streams).
  AwaitingCalls& awaiting() { return awaiting_; }

  // (Qualified: inside a grpc::Service, `Service` names the base class.)
  cube3d::Service& service() { return service_; }
  // grpc::Service's registration, for the job methods (grpc/job_methods.cpp).
  using grpc::Service::AddMethod;
  using grpc::Service::MarkMethodCallback;
  const GrpcOptions& options() const { return options_; }
  void count(const std::string& code) const {
    if (count_) count_(code);
  }

 private:
  cube3d::Service& service_;
  const GrpcOptions options_;
  const Count count_;
  JobService* const jobs_;
  AwaitingCalls& awaiting_;
};

// A message's bytes in one piece (gRPC hands them over as slices).
std::string flat_bytes(const grpc::ByteBuffer& buffer);

// The call's context as the service takes it (deadline, authorization, traceparent).
CallContext call_of(const grpc::CallbackServerContext& context);

// Registers SubmitMeshJob, GetMeshJob and CancelMeshJob (grpc/job_methods.cpp).
void add_job_methods(MeshServiceImpl& service, JobService& jobs);

// Calls to methods the server does not have: UNIMPLEMENTED naming the method and what the
// server has, counted with the code the client saw (gRPC's core would refuse them without
// telling the application). For ServerBuilder::RegisterCallbackGenericService.
class UnknownMethods final : public grpc::CallbackGenericService {
 public:
  explicit UnknownMethods(std::function<void(const std::string& code)> count);
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override;

 private:
  const std::function<void(const std::string& code)> count_;
};

}  // namespace cube3d
