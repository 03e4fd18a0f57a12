// Fuzzes the Open Inference Protocol's REST inference body (http/infer_json.h: JSON, nested data,
// the binary tensor data extension's header length and sizes) and the model's reading of it
// (inference/infer_plan.h), from the bytes a client sends. The input's first byte says whether
// an Inference-Header-Content-Length comes with it (and, with the next two, its value); the
// rest is the body. What parses is planned against the demo model (no bounding box) and a v0.5
// one, and each planned request is validated as the service would.
//
// Anything may be refused with a cube3d::Error; what is accepted must hold together: as many
// requests as PROMPT has prompts, within max_batch_size, each prompt one of the body's, the
// outputs known and each once.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "cube3d/server/http/infer_json.h"
#include "cube3d/server/inference/infer_plan.h"
#include "cube3d/server/service/request_validation.h"
#include "cube3d/server/wire/request_codec.h"
#include "fuzz_support.h"

namespace {

cube3d::inference::ModelDescription model(bool bbox) {
  cube3d::RequestPolicy policy;
  policy.model_has_bbox = bbox;
  cube3d::ModelIdentity identity;
  identity.name = bbox ? "cube3d-v0.5" : "demo";
  return cube3d::inference::describe_model(identity, policy, 64, {});
}

void plan_and_check(const cube3d::http::InferBody& body, bool bbox) {
  const auto described = model(bbox);
  cube3d::inference::InferRequest request = body.request;
  request.model_name = described.name;
  cube3d::inference::DoorRules door;
  door.parameters = {"binary_data_output"};
  door.text_outputs = cube3d::http::text_outputs(body, {cube3d::inference::kMesh});
  const auto plan = cube3d::inference::plan_infer(request, described, door);
  CUBE3D_FUZZ_CHECK(!plan.requests.empty(), "a plan without a request");
  CUBE3D_FUZZ_CHECK(static_cast<int64_t>(plan.requests.size()) <= described.max_batch_size,
                    "more requests than max_batch_size");
  CUBE3D_FUZZ_CHECK(!plan.outputs.empty(), "a plan without an output");
  for (size_t i = 0; i < plan.outputs.size(); ++i) {
    CUBE3D_FUZZ_CHECK(cube3d::inference::find_output(described, plan.outputs[i]) != nullptr,
                      "an unknown output planned");
    for (size_t j = 0; j < i; ++j) {
      CUBE3D_FUZZ_CHECK(plan.outputs[i] != plan.outputs[j], "an output planned twice");
    }
  }
  for (const auto& r : plan.requests) {
    if (!bbox) CUBE3D_FUZZ_CHECK(!r.has_bounding_box(), "a bounding box for a model without");
    // The service checks the rest (ranges, UTF-8): refusing is fine, crashing is not.
    cube3d::fuzz::refusals_ok([&] {
      (void)cube3d::validate_request(cube3d::client_request_of(r), cube3d::RequestPolicy{});
    });
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  std::optional<std::string> header_length;
  if (data[0] & 1) {
    // A header length near the body's size, or anything at all.
    const unsigned value = data[1] | (data[2] << 8);
    header_length =
        (data[0] & 2) ? std::to_string(value) : std::string(1, static_cast<char>(data[1]));
  }
  const std::string_view body(reinterpret_cast<const char*>(data) + 3, size - 3);
  cube3d::http::InferBody parsed;
  if (!cube3d::fuzz::refusals_ok(
          [&] { parsed = cube3d::http::parse_infer_body(body, header_length); })) {
    return 0;
  }
  cube3d::fuzz::refusals_ok([&] { plan_and_check(parsed, false); });
  cube3d::fuzz::refusals_ok([&] { plan_and_check(parsed, true); });
  return 0;
}
