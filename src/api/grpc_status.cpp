#include "cube3d/api/grpc_status.h"

namespace cube3d {

grpc::StatusCode to_grpc_code(ErrorCode code) {
  // gRPC's codes are google.rpc.Code's numbers.
  return static_cast<grpc::StatusCode>(canonical_code(code));
}

// google.rpc.Code's names are literals, so a name's data() is a C string.
const char* grpc_code_name(grpc::StatusCode code) {
  return canonical_code_name(static_cast<int>(code)).data();
}

grpc::Status to_grpc_status(const Error& error) {
  return grpc::Status(to_grpc_code(error.code()), error.what());
}

grpc::Status to_grpc_status(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(to_grpc_code(status.code()), status.message());
}

}  // namespace cube3d
