// The result cache's key: SHA-256 of a canonical encoding of the effective request (after the
// server's defaults: prompt bytes, guidance, top-p, seed, bounding box, resolution, format, face
// target, profile, shape tokens asked or not), the model's identity and the cache's scope (the
// API key's name unless cache.shared_across_keys). Each field is tagged and length-prefixed, so
// no two different requests encode alike (a prompt cannot forge the fields after it).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "cube3d/scheduler/task.h"
#include "cube3d/server/service/model_identity.h"
#include "cube3d/server/work/work_request.h"

namespace cube3d {

using ResultKey = std::array<uint8_t, 32>;

// The canonical bytes (for tests and debugging) and their digest.
std::string result_key_material(const WorkRequest& request, const ModelIdentity& model,
                                std::string_view scope);
ResultKey result_key(const WorkRequest& request, const ModelIdentity& model,
                     std::string_view scope);

}  // namespace cube3d
