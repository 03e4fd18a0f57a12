// Fuzzes the gRPC door's reading of a request (generate_request_bytes.h: the prompt read as
// bytes, the rest by protobuf) and request validation, from the bytes a client sends: when the
// input reads as a request, it is validated against the default policy, with and without a
// bounding-box model. Whatever protobuf's own parser accepts, the door's reading accepts too,
// with the same fields.
//
// Validation may refuse anything with a cube3d::Error; what it accepts must be within the
// policy, since the executor and the engine trust a WorkRequest without checking again.
#include <google/protobuf/stubs/logging.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "cube3d/core/constants.h"
#include "cube3d/core/utf8.h"
#include "cube3d/server/grpc/generate_request_bytes.h"
#include "cube3d/server/service/request_validation.h"
#include "cube3d/server/wire/proto_enums.h"
#include "cube3d/server/wire/request_codec.h"
#include "fuzz_support.h"

namespace {

void check_accepted(const cube3d::WorkRequest& job, const cube3d::RequestPolicy& policy) {
  const cube3d::LimitsConfig& limits = policy.limits;
  CUBE3D_FUZZ_CHECK(!job.request_id.empty() && job.request_id.size() <= 128, "request_id size");
  CUBE3D_FUZZ_CHECK(!job.prompt.empty(), "empty prompt accepted");
  CUBE3D_FUZZ_CHECK(static_cast<int64_t>(job.prompt.size()) <= limits.max_prompt_bytes,
                    "prompt over limits.max_prompt_bytes accepted");
  CUBE3D_FUZZ_CHECK(!cube3d::find_invalid_utf8(job.prompt), "invalid UTF-8 prompt accepted");
  CUBE3D_FUZZ_CHECK(std::isfinite(job.guidance_scale) && job.guidance_scale >= 0 &&
                        job.guidance_scale <= policy.max_guidance_scale,
                    "guidance_scale out of range accepted");
  if (job.top_p) {
    CUBE3D_FUZZ_CHECK(std::isfinite(*job.top_p) && *job.top_p > 0 && *job.top_p <= 1,
                      "top_p out of range accepted");
  }
  CUBE3D_FUZZ_CHECK(job.resolution_base >= limits.min_resolution_base &&
                        job.resolution_base <= limits.max_resolution_base,
                    "resolution_base out of range accepted");
  if (job.bounding_box) {
    CUBE3D_FUZZ_CHECK(policy.model_has_bbox, "bounding_box accepted for a model without one");
    for (const float side : *job.bounding_box) {
      // Normalised so the longest side is kBoundingBoxLongestSide (rounding aside).
      CUBE3D_FUZZ_CHECK(
          std::isfinite(side) && side >= 0 && side <= cube3d::kBoundingBoxLongestSide * 1.0001f,
          "bounding_box side not normalised");
    }
  }
  if (job.target_face_count) {
    CUBE3D_FUZZ_CHECK(
        *job.target_face_count >= 4 && *job.target_face_count <= limits.max_target_face_count,
        "target_face_count out of range accepted");
  }
  // The format maps back to the wire enum and again to the same format.
  CUBE3D_FUZZ_CHECK(cube3d::from_proto(cube3d::to_proto(job.format)) == job.format,
                    "format does not map back");
}

cube3d::RequestPolicy policy_with_bbox(bool bbox) {
  cube3d::RequestPolicy policy;
  policy.model_has_bbox = bbox;
  return policy;
}

const cube3d::RequestPolicy kPolicies[] = {policy_with_bbox(false), policy_with_bbox(true)};

void validate(const cube3d::v1::GenerateMeshRequest& request) {
  for (const cube3d::RequestPolicy& policy : kPolicies) {
    cube3d::fuzz::refusals_ok([&] {
      check_accepted(cube3d::validate_request(cube3d::client_request_of(request), policy), policy);
    });
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // A request with a non-UTF-8 string fails to parse, and protobuf logs each one.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  cube3d::v1::GenerateMeshRequest read;
  const bool door_read = cube3d::parse_generate_request(bytes, read);
  if (door_read) validate(read);

  cube3d::v1::GenerateMeshRequest request;
  if (request.ParseFromArray(data, static_cast<int>(size))) {
    // The door reads every message protobuf reads, as protobuf reads it.
    CUBE3D_FUZZ_CHECK(door_read, "a request protobuf reads was refused by the door");
    CUBE3D_FUZZ_CHECK(read.SerializeAsString() == request.SerializeAsString(),
                      "the door read a request differently from protobuf");
  }
  return 0;
}
