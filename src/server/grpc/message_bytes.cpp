#include "cube3d/server/grpc/message_bytes.h"

namespace cube3d {

grpc::Status unparsable_message(const grpc::ByteBuffer& bytes, const std::string& type) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                      "the request message (" + std::to_string(bytes.Length()) +
                          " bytes) does not parse as a " + type);
}

grpc::ByteBuffer serialized_message(const google::protobuf::Message& message) {
  const std::string bytes = message.SerializeAsString();
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

}  // namespace cube3d
