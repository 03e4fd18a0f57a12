// The gRPC front door of MeshService: cube3d.v1.MeshService/GenerateMesh and
// GenerateMeshStream over the one service core (mesh_service_core.h).
//
// The methods are registered by hand rather than through the generated MeshService::Service so
// that the server reads the request as its wire twin (prompt as bytes,
// proto/cube3d/v1/wire/request_wire.proto): invalid UTF-8 then gets INVALID_ARGUMENT naming
// `prompt` instead of protobuf's parse failure. The method paths, and the descriptors that
// reflection serves (found by the service's name), are those of the public
// cube3d/v1/mesh_service.proto.
#pragma once

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/impl/service_type.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/sync_stream.h>

#include "cube3d/server/mesh_service_core.h"
#include "cube3d/v1/mesh_service.pb.h"
#include "cube3d/v1/wire/request_wire.pb.h"

namespace cube3d {

// The full name clients and health checks use.
inline constexpr const char* kMeshServiceName = "cube3d.v1.MeshService";

class MeshServiceImpl final : public grpc::Service {
 public:
  explicit MeshServiceImpl(MeshServiceCore& core);

  grpc::Status GenerateMesh(grpc::ServerContext* context,
                            const v1::wire::GenerateMeshRequest* request,
                            v1::GenerateMeshResponse* response);
  grpc::Status GenerateMeshStream(grpc::ServerContext* context,
                                  const v1::wire::GenerateMeshRequest* request,
                                  grpc::ServerWriter<v1::GenerateMeshEvent>* writer);

 private:
  MeshServiceCore& core_;
};

}  // namespace cube3d
