#include "cube3d/server/service/request_validation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <string_view>

#include "cube3d/core/constants.h"
#include "cube3d/core/error.h"
#include "cube3d/core/utf8.h"
#include "cube3d/server/service/api_numbers.h"

namespace cube3d {
namespace {

// The longest request_id accepted.
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

// The API's number `sent` in `field` as ours, or a refusal naming the field and the numbers it
// takes. 0, the field's unset value, is each caller's to read first where it means a default.
template <typename T>
T api_value(std::string_view field, int32_t sent, std::optional<T> (*ours)(int32_t),
            std::string_view numbers_taken) {
  if (const std::optional<T> value = ours(sent)) return *value;
  throw invalid_argument(std::string(field) + " " + std::to_string(sent) + " is not one of " +
                         std::string(numbers_taken));
}

MeshFormat format_of(int32_t sent) {
  return api_value("format", sent, api_numbers::mesh_format,
                   "UNSPECIFIED (0, the server default), RAW (1), OBJ (2), PLY (3), GLB (4), "
                   "COMPACT (5)");
}

MeshProfile profile_of(int32_t sent) {
  return api_value("mesh_profile", sent, api_numbers::mesh_profile,
                   "UNSPECIFIED (0, the server default), NONE (1), ROBLOX (2)");
}

MeshPivot pivot_of(int32_t sent) {
  if (sent == 0) return MeshPivot::kModelOrigin;
  return api_value("pivot", sent, api_numbers::pivot,
                   "UNSPECIFIED (0, the model's origin), MODEL_ORIGIN (1), CENTER (2), "
                   "BOTTOM_CENTER (3)");
}

CompactPositions positions_of(int32_t sent) {
  if (sent == 0) return CompactPositions::kFloat32;
  return api_value("compact.positions", sent, api_numbers::compact_positions,
                   "UNSPECIFIED (0, float32), FLOAT32 (1), QUANTIZED16 (2)");
}

TaskPriority priority_of(int32_t sent) {
  if (sent == 0) return TaskPriority::kInteractive;
  return api_value("priority", sent, api_numbers::priority,
                   "UNSPECIFIED (0, interactive), INTERACTIVE (1), BATCH (2)");
}

}  // namespace

std::string make_request_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return buf;
}

WorkRequest validate_request(const ClientRequest& r, const RequestPolicy& policy) {
  WorkRequest out;

  if (r.request_id.empty()) {
    out.request_id = make_request_id();
  } else {
    if (r.request_id.size() > kMaxRequestIdBytes ||
        !std::all_of(r.request_id.begin(), r.request_id.end(), request_id_char_ok)) {
      throw invalid_argument("request_id must be 1.." + std::to_string(kMaxRequestIdBytes) +
                             " characters of [A-Za-z0-9._:-]");
    }
    out.request_id = r.request_id;
  }

  const std::string& prompt = r.prompt;
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
  if (r.guidance_scale) {
    const double g = *r.guidance_scale;
    if (!std::isfinite(g) || g < 0 || g > policy.max_guidance_scale) {
      throw invalid_argument("guidance_scale must be a finite number in [0, " +
                             number(policy.max_guidance_scale) + "], got " + number(g));
    }
    out.guidance_scale = g;
  }

  out.top_p = policy.defaults.top_p;
  if (r.top_p) {
    const double p = *r.top_p;
    if (!std::isfinite(p) || p <= 0 || p > 1) {
      throw invalid_argument("top_p must be in (0, 1], got " + number(p));
    }
    out.top_p = p;
  }
  out.seed = r.seed.value_or(0);

  if (r.bounding_box) {
    if (!policy.model_has_bbox) {
      throw invalid_argument(
          "bounding_box: this model has no bounding-box input (use a v0.5 "
          "model or leave bounding_box unset)");
    }
    const std::array<float, 3>& sides = *r.bounding_box;
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
  if (r.resolution_base) {
    const int64_t res = *r.resolution_base;
    if (res < policy.limits.min_resolution_base || res > policy.limits.max_resolution_base) {
      throw invalid_argument("resolution_base " + std::to_string(res) + " is outside [" +
                             std::to_string(policy.limits.min_resolution_base) + ", " +
                             std::to_string(policy.limits.max_resolution_base) +
                             "]: memory and time grow eightfold per step");
    }
    out.resolution_base = res;
  }

  out.format = r.format && *r.format != 0 ? format_of(*r.format) : policy.defaults.format;

  const auto check_faces = [&](const std::string& field, int64_t faces) {
    if (faces < 4 || faces > policy.limits.max_target_face_count) {
      throw invalid_argument(field + " must be in [4, " +
                             std::to_string(policy.limits.max_target_face_count) + "], got " +
                             std::to_string(faces));
    }
  };
  if (r.target_face_count) {
    check_faces("target_face_count", *r.target_face_count);
    out.target_face_count = *r.target_face_count;
  }
  const std::vector<uint32_t>& lods = r.lod_face_counts;
  if (!lods.empty()) {
    if (r.target_face_count) {
      throw invalid_argument(
          "target_face_count and lod_face_counts are both set: lod_face_counts[0] is level 0's "
          "target; leave target_face_count unset");
    }
    if (static_cast<int64_t>(lods.size()) > policy.limits.max_lod_levels) {
      throw invalid_argument(
          "lod_face_counts has " + std::to_string(lods.size()) + " levels; the limit is " +
          std::to_string(policy.limits.max_lod_levels) + " (limits.max_lod_levels)");
    }
    for (size_t i = 0; i < lods.size(); ++i) {
      const int64_t faces = lods[i];
      const std::string field = "lod_face_counts[" + std::to_string(i) + "]";
      check_faces(field, faces);
      if (i > 0 && faces >= int64_t{lods[i - 1]}) {
        throw invalid_argument(field + " = " + std::to_string(faces) +
                               " is not below lod_face_counts[" + std::to_string(i - 1) +
                               "] = " + std::to_string(lods[i - 1]) +
                               ": levels go from the finest to the coarsest");
      }
      if (i == 0) {
        out.target_face_count = faces;
      } else {
        out.lod_face_counts.push_back(faces);
      }
    }
  }
  out.return_shape_tokens = r.return_shape_tokens;
  out.return_raw_mesh = r.return_raw_mesh;

  out.mesh_profile = policy.defaults.mesh_profile;
  if (r.mesh_profile && *r.mesh_profile != 0) out.mesh_profile = profile_of(*r.mesh_profile);
  out.bypass_cache = r.bypass_cache;
  out.pivot = pivot_of(r.pivot);
  if (r.compact) {
    out.compact.positions = positions_of(r.compact->positions);
    out.compact.normals = r.compact->normals;
    if (out.format != MeshFormat::kCompact && out.compact != CompactMeshOptions{}) {
      throw invalid_argument("compact: the options of MESH_FORMAT_COMPACT, and the format is " +
                             std::string(api_numbers::name(out.format)) +
                             " (ask for format MESH_FORMAT_COMPACT, or leave compact unset)");
    }
  }
  out.priority = priority_of(r.priority);
  return out;
}

}  // namespace cube3d
