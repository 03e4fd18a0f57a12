// The gRPC front door of MeshService: cube3d.v1.MeshService/GenerateMesh and
// GenerateMeshStream over the one service core (mesh_service_core.h).
//
// The methods are registered by hand rather than through the generated MeshService::Service so
// that the server reads the request itself, as its wire twin (prompt as bytes,
// proto/cube3d/v1/wire/request_wire.proto): invalid UTF-8 then gets INVALID_ARGUMENT naming
// `prompt`, and bytes that are no request at all INVALID_ARGUMENT too, instead of protobuf's
// parse failure (INTERNAL). The method paths, and the descriptors that
// reflection serves (found by the service's name), are those of the public
// cube3d/v1/mesh_service.proto.
#pragma once

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/impl/service_type.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/sync_stream.h>

#include <functional>
#include <string>

#include "cube3d/server/mesh_service_core.h"
#include "cube3d/server/watchdog.h"
#include "cube3d/v1/mesh_service.pb.h"
#include "cube3d/v1/wire/request_wire.pb.h"

namespace cube3d {

// The full name clients and health checks use.
inline constexpr const char* kMeshServiceName = "cube3d.v1.MeshService";

class MeshServiceImpl final : public grpc::Service {
 public:
  using UnaryStream = grpc::ServerReaderWriter<v1::GenerateMeshResponse, grpc::ByteBuffer>;
  using EventStream = grpc::ServerReaderWriter<v1::GenerateMeshEvent, grpc::ByteBuffer>;

  explicit MeshServiceImpl(MeshServiceCore& core);

  // Each reads its one request as bytes and parses it: a message that does not parse gets
  // INVALID_ARGUMENT (gRPC's own parse failure answers INTERNAL, a server fault).
  grpc::Status GenerateMesh(grpc::ServerContext* context, UnaryStream* stream);
  grpc::Status GenerateMeshStream(grpc::ServerContext* context, EventStream* stream);

 private:
  MeshServiceCore& core_;
  // Bounds the wait for each call's request message (limits.request_read_timeout_ms).
  Watchdog request_read_watchdog_;
};

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
