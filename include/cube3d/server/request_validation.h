// Turns a client's GenerateMeshRequest into a validated JobRequest, or throws
// invalid_argument naming the offending field. Nothing a client sends gets past here unchecked.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cube3d/scheduler/job.h"
#include "cube3d/v1/mesh_service.pb.h"

namespace cube3d {

struct RequestPolicy {
  int64_t max_prompt_bytes = 1024;
  int64_t min_resolution_base = 4;
  int64_t max_resolution_base = 9;
  int64_t max_target_face_count = 2'000'000;
  double max_guidance_scale = 100.0;
  // Defaults for fields the client leaves unset.
  double default_guidance_scale = 3.0;
  std::optional<double> default_top_p;
  int64_t default_resolution_base = 8;
  MeshFormat default_format = MeshFormat::kGlb;
  bool model_has_bbox = false;
};

// Throws cube3d::Error (kInvalidArgument) naming the field.
JobRequest validate_request(const v1::GenerateMeshRequest& request, const RequestPolicy& policy);

// A fresh request id (random hex) for requests that bring none.
std::string make_request_id();

MeshFormat from_proto(v1::MeshFormat format);
v1::MeshFormat to_proto(MeshFormat format);

}  // namespace cube3d
