// Reads a GenerateMeshRequest from the bytes of a gRPC message, the one place where the gRPC door
// looks at bytes. A proto3 `string` with invalid UTF-8 fails protobuf's parser (which gRPC would
// answer INTERNAL, naming only the message type); here the prompt is read as bytes instead and
// handed on as sent, so that the service's validation answers INVALID_ARGUMENT naming `prompt`
// and the byte offset, as it does for the HTTP door.
#pragma once

#include <string_view>

#include "cube3d/v1/mesh_service.pb.h"

namespace cube3d {

// False when `bytes` are no GenerateMeshRequest (malformed, or invalid UTF-8 in a string field
// other than the prompt). Field 1 (prompt) is taken as bytes: the last one sent wins, as
// protobuf's own parser has it.
bool parse_generate_request(std::string_view bytes, v1::GenerateMeshRequest& request);

}  // namespace cube3d
