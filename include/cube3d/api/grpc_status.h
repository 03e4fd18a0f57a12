// The one place where our errors become gRPC statuses (the service boundary).
#pragma once

#include <grpcpp/support/status.h>

#include "cube3d/core/error.h"

namespace cube3d {

grpc::StatusCode to_grpc_code(ErrorCode code);
grpc::Status to_grpc_status(const Error& error);
// "OK", "INVALID_ARGUMENT", ...: the status names clients and metrics use.
const char* grpc_code_name(grpc::StatusCode code);

}  // namespace cube3d
