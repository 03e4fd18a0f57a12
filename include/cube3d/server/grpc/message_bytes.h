// A gRPC message as the door's hand-registered methods read and write it: bytes (a ByteBuffer),
// parsed by the door itself, so that bytes that are no message of the method's type are
// INVALID_ARGUMENT naming the type (gRPC's own parse failure would be INTERNAL).
#pragma once

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/status.h>

#include <google/protobuf/message.h>

#include <string>

namespace cube3d {

template <typename Message>
bool parse_message(const grpc::ByteBuffer& bytes, Message* message) {
  grpc::ByteBuffer copy(bytes);  // Deserialize consumes its buffer
  return grpc::SerializationTraits<Message>::Deserialize(&copy, message).ok();
}

// INVALID_ARGUMENT: "the request message (N bytes) does not parse as a <type>".
grpc::Status unparsable_message(const grpc::ByteBuffer& bytes, const std::string& type);

grpc::ByteBuffer serialized_message(const google::protobuf::Message& message);

}  // namespace cube3d
