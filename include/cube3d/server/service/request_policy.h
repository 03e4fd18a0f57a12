// What the server allows a request and what it fills in for fields the request leaves unset:
// the `limits:` and `defaults:` sections of the server config, used as they are by request
// validation and the service (no copies). Every default comes from core/constants.h.
#pragma once

#include <cstdint>
#include <optional>

#include "cube3d/core/constants.h"
#include "cube3d/mesh/mesh_format.h"
#include "cube3d/mesh/mesh_profile.h"

namespace cube3d {

struct LimitsConfig {
  int64_t max_prompt_bytes = kDefaultMaxPromptBytes;
  int64_t max_resolution_base = kDefaultMaxResolutionBase;  // at most kMaxResolutionBase
  int64_t min_resolution_base = kDefaultMinResolutionBase;
  int64_t max_message_bytes = kDefaultMaxMessageBytes;  // gRPC send and receive limit
  int64_t max_target_face_count = kDefaultMaxTargetFaceCount;
  int64_t default_deadline_ms = kDefaultDeadlineMs;  // for requests without a deadline; 0: none
  // A gRPC call whose request message has not arrived this long after it opened is cancelled
  // (it would hold a handler thread): slow or stalled senders.
  int64_t request_read_timeout_ms = kDefaultRequestReadTimeoutMs;
  int64_t max_lod_levels = kDefaultMaxLodLevels;  // lod_face_counts' length, at most kMaxLodLevels
  bool operator==(const LimitsConfig&) const = default;
};

// What a request gets for the fields it leaves unset.
struct RequestDefaults {
  double guidance_scale = kDefaultGuidanceScale;
  std::optional<double> top_p;  // unset: greedy
  int64_t resolution_base = kDefaultResolutionBase;
  MeshFormat format = MeshFormat::kGlb;
  MeshProfile mesh_profile = MeshProfile::kNone;
  bool operator==(const RequestDefaults&) const = default;
};

struct RequestPolicy {
  LimitsConfig limits;
  RequestDefaults defaults;
  double max_guidance_scale = kMaxGuidanceScale;
  bool model_has_bbox = false;  // whether bounding_box is meaningful (v0.5 models)
};

}  // namespace cube3d
