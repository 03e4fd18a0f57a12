// The one place where the service's outcomes (cube3d::Status, cube3d::Error) become gRPC statuses,
// and back: the gRPC door's map, also what the clients use to name a gRPC code.
#pragma once

#include <grpcpp/support/status.h>

#include "cube3d/core/error.h"
#include "cube3d/core/status.h"

namespace cube3d {

grpc::StatusCode to_grpc_code(ErrorCode code);
grpc::Status to_grpc_status(const Error& error);
grpc::Status to_grpc_status(const Status& status);
// "OK", "INVALID_ARGUMENT", ...: the status names clients and metrics use.
const char* grpc_code_name(grpc::StatusCode code);

}  // namespace cube3d
