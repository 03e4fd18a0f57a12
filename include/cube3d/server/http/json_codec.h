// The JSON mapping of the API's messages (protobuf's, as the HTTP API documents it): what the
// HTTP door reads a request body with and writes its answers' bodies with.
#pragma once

#include <google/protobuf/message.h>

#include <string>

#include "cube3d/v1/mesh_service.pb.h"

namespace cube3d::http {

inline constexpr const char* kJsonType = "application/json";

// Every field written, defaults included (HTTP clients have no generated defaults).
std::string to_json(const google::protobuf::Message& message);
// A GenerateMeshRequest in the JSON mapping; HttpError 400 naming what is wrong (unknown
// fields included).
v1::GenerateMeshRequest parse_request(const std::string& body);

}  // namespace cube3d::http
