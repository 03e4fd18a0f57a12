#include "cube3d/server/core/request_validation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>

#include "cube3d/core/constants.h"
#include "cube3d/core/error.h"
#include "cube3d/core/utf8.h"

namespace cube3d {
namespace {

// The official CLI scales the box so that its longest side is this long.
constexpr size_t kMaxRequestIdBytes = 128;

std::string number(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

bool request_id_char_ok(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.' || c == ':';
}

}  // namespace

MeshFormat from_proto(v1::MeshFormat format) {
  switch (format) {
    case v1::MESH_FORMAT_RAW:
      return MeshFormat::kRaw;
    case v1::MESH_FORMAT_OBJ:
      return MeshFormat::kObj;
    case v1::MESH_FORMAT_PLY:
      return MeshFormat::kPly;
    case v1::MESH_FORMAT_GLB:
      return MeshFormat::kGlb;
    default:
      break;
  }
  throw invalid_argument("format " + std::to_string(static_cast<int>(format)) +
                         " is not one of UNSPECIFIED (0, the server default), RAW (1), OBJ (2), "
                         "PLY (3), GLB (4)");
}

MeshProfile from_proto(v1::MeshProfile profile) {
  switch (profile) {
    case v1::MESH_PROFILE_NONE:
      return MeshProfile::kNone;
    case v1::MESH_PROFILE_ROBLOX:
      return MeshProfile::kRoblox;
    default:
      break;
  }
  throw invalid_argument("mesh_profile " + std::to_string(static_cast<int>(profile)) +
                         " is not one of UNSPECIFIED (0, the server default), NONE (1), "
                         "ROBLOX (2)");
}

v1::MeshProfile to_proto(MeshProfile profile) {
  switch (profile) {
    case MeshProfile::kNone:
      return v1::MESH_PROFILE_NONE;
    case MeshProfile::kRoblox:
      return v1::MESH_PROFILE_ROBLOX;
  }
  return v1::MESH_PROFILE_NONE;
}

v1::MeshFormat to_proto(MeshFormat format) {
  switch (format) {
    case MeshFormat::kRaw:
      return v1::MESH_FORMAT_RAW;
    case MeshFormat::kObj:
      return v1::MESH_FORMAT_OBJ;
    case MeshFormat::kPly:
      return v1::MESH_FORMAT_PLY;
    case MeshFormat::kGlb:
      return v1::MESH_FORMAT_GLB;
  }
  return v1::MESH_FORMAT_RAW;
}

std::string make_request_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return buf;
}

JobRequest validate_request(const v1::GenerateMeshRequest& request, const RequestPolicy& policy) {
  v1::wire::GenerateMeshRequest wire;
  if (!wire.ParseFromString(request.SerializeAsString())) {
    throw internal_error("GenerateMeshRequest does not read as its wire twin");
  }
  return validate_request(wire, policy);
}

JobRequest validate_request(const v1::wire::GenerateMeshRequest& r, const RequestPolicy& policy) {
  JobRequest out;

  if (r.request_id().empty()) {
    out.request_id = make_request_id();
  } else {
    if (r.request_id().size() > kMaxRequestIdBytes ||
        !std::all_of(r.request_id().begin(), r.request_id().end(), request_id_char_ok)) {
      throw invalid_argument("request_id must be 1.." + std::to_string(kMaxRequestIdBytes) +
                             " characters of [A-Za-z0-9._:-]");
    }
    out.request_id = r.request_id();
  }

  const std::string& prompt = r.prompt();
  if (prompt.empty()) throw invalid_argument("prompt is empty");
  if (static_cast<int64_t>(prompt.size()) > policy.limits.max_prompt_bytes) {
    throw invalid_argument("prompt is " + std::to_string(prompt.size()) + " bytes; the limit is " +
                           std::to_string(policy.limits.max_prompt_bytes));
  }
  if (const auto bad = find_invalid_utf8(prompt)) {
    throw invalid_argument("prompt is not valid UTF-8 (byte offset " + std::to_string(*bad) + ")");
  }
  out.prompt = prompt;

  out.guidance_scale = policy.defaults.guidance_scale;
  if (r.has_guidance_scale()) {
    const double g = r.guidance_scale();
    if (!std::isfinite(g) || g < 0 || g > policy.max_guidance_scale) {
      throw invalid_argument("guidance_scale must be a finite number in [0, " +
                             number(policy.max_guidance_scale) + "], got " + number(g));
    }
    out.guidance_scale = g;
  }

  out.top_p = policy.defaults.top_p;
  if (r.has_top_p()) {
    const double p = r.top_p();
    if (!std::isfinite(p) || p <= 0 || p > 1) {
      throw invalid_argument("top_p must be in (0, 1], got " + number(p));
    }
    out.top_p = p;
  }
  out.seed = r.has_seed() ? r.seed() : 0;

  if (r.has_bounding_box()) {
    if (!policy.model_has_bbox) {
      throw invalid_argument(
          "bounding_box: this model has no bounding-box input (use a v0.5 "
          "model or leave bounding_box unset)");
    }
    const std::array<float, 3> sides = {r.bounding_box().x(), r.bounding_box().y(),
                                        r.bounding_box().z()};
    const char* names[] = {"bounding_box.x", "bounding_box.y", "bounding_box.z"};
    for (int i = 0; i < 3; ++i) {
      if (!std::isfinite(sides[i]) || sides[i] <= 0) {
        throw invalid_argument(std::string(names[i]) + " must be a positive finite number, got " +
                               number(sides[i]));
      }
    }
    const float longest = std::max({sides[0], sides[1], sides[2]});
    out.bounding_box = std::array<float, 3>{sides[0] / longest * kBoundingBoxLongestSide,
                                            sides[1] / longest * kBoundingBoxLongestSide,
                                            sides[2] / longest * kBoundingBoxLongestSide};
  }

  out.resolution_base = policy.defaults.resolution_base;
  if (r.has_resolution_base()) {
    const int64_t res = r.resolution_base();
    if (res < policy.limits.min_resolution_base || res > policy.limits.max_resolution_base) {
      throw invalid_argument("resolution_base " + std::to_string(res) + " is outside [" +
                             std::to_string(policy.limits.min_resolution_base) + ", " +
                             std::to_string(policy.limits.max_resolution_base) +
                             "]: memory and time grow eightfold per step");
    }
    out.resolution_base = res;
  }

  out.format = r.has_format() && r.format() != v1::MESH_FORMAT_UNSPECIFIED ? from_proto(r.format())
                                                                           : policy.defaults.format;

  if (r.has_target_face_count()) {
    const int64_t faces = r.target_face_count();
    if (faces < 4 || faces > policy.limits.max_target_face_count) {
      throw invalid_argument("target_face_count must be in [4, " +
                             std::to_string(policy.limits.max_target_face_count) + "], got " +
                             std::to_string(faces));
    }
    out.target_face_count = faces;
  }
  out.return_shape_tokens = r.return_shape_tokens();

  out.mesh_profile = policy.defaults.mesh_profile;
  if (r.has_mesh_profile() && r.mesh_profile() != v1::MESH_PROFILE_UNSPECIFIED) {
    out.mesh_profile = from_proto(r.mesh_profile());
  }
  out.bypass_cache = r.bypass_cache();
  switch (r.priority()) {
    case v1::PRIORITY_UNSPECIFIED:
    case v1::PRIORITY_INTERACTIVE:
      out.priority = JobPriority::kInteractive;
      break;
    case v1::PRIORITY_BATCH:
      out.priority = JobPriority::kBatch;
      break;
    default:
      throw invalid_argument("priority " + std::to_string(static_cast<int>(r.priority())) +
                             " is not one of UNSPECIFIED (0, interactive), INTERACTIVE (1), "
                             "BATCH (2)");
  }
  return out;
}

}  // namespace cube3d
