// GET /v1/model: what this server serves and what a request may ask of it, for a client that
// builds its form from the server (the playground) rather than from a copy of the config:
//
//   {"model": "cube3d-v0.5", "tokensPerShape": 1024, "boundingBox": true,
//    "weightsDigest": "<hex>", "serverVersion": "0.1.0 (abc1234)",
//    "defaults": {"guidanceScale": 3.0, "topP": 0.9 (absent: greedy), "resolutionBase": 8,
//                 "format": "MESH_FORMAT_GLB", "meshProfile": "MESH_PROFILE_NONE"},
//    "limits": {"minResolutionBase": 4, "maxResolutionBase": 9, "maxPromptBytes": 1024,
//               "maxGuidanceScale": 100, "maxTargetFaceCount": 200000}}
//
// lowerCamelCase and the enums' names as in the API's JSON mapping. With API keys, only for a
// known key (401 otherwise, as every call); 503 while the model loads.
#pragma once

#include <memory>

#include "cube3d/server/httpd/http_server.h"
#include "cube3d/server/service/service.h"

namespace cube3d::http {

inline constexpr const char* kModelPath = "/v1/model";

void serve_model(const Service& service, const std::shared_ptr<Exchange>& ex);

}  // namespace cube3d::http
