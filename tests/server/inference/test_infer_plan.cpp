// An Open Inference Protocol request read against the model's tensors (inference/infer_plan.h):
// what becomes of each input and parameter, a batch fanned out into one request a prompt, and
// every refusal the protocol's side makes, each naming the tensor or parameter at fault.
#include "cube3d/server/inference/infer_plan.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "expect_error.h"
#include "server/inference/infer_builders.h"

namespace cube3d::inference {
namespace {

using testing::bytes_tensor;
using testing::demo_model;
using testing::expect_error;
using testing::infer_request;
using testing::numbers_tensor;

InferRequest one_prompt(const std::string& text = "a chair") {
  return infer_request({bytes_tensor(kPrompt, {text})});
}

void expect_refused(const InferRequest& request, std::initializer_list<std::string> needles,
                    const ModelDescription& model = demo_model(), const DoorRules& door = {}) {
  expect_error([&] { plan_infer(request, model, door); }, ErrorCode::kInvalidArgument, needles);
}

TEST(InferPlanTest, OnePromptWithDefaultsIsOneRequestForMeshInTheServersFormat) {
  const InferPlan plan = plan_infer(one_prompt(), demo_model());
  ASSERT_EQ(plan.requests.size(), 1u);
  const v1::GenerateMeshRequest& r = plan.requests[0];
  EXPECT_EQ(r.prompt(), "a chair");
  EXPECT_FALSE(r.has_seed());
  EXPECT_FALSE(r.has_guidance_scale());
  EXPECT_FALSE(r.has_top_p());
  EXPECT_FALSE(r.has_resolution_base());
  EXPECT_EQ(r.format(), v1::MESH_FORMAT_GLB);
  EXPECT_FALSE(r.return_raw_mesh());
  EXPECT_EQ(plan.outputs, std::vector<std::string>{kMesh});
  EXPECT_FALSE(plan.batch_dimension);
  EXPECT_FALSE(plan.timeout);
  EXPECT_FALSE(plan.progress);
}

TEST(InferPlanTest, EveryInputReachesItsRequestField) {
  ModelDescription model = demo_model(/*bbox=*/true);
  InferRequest request =
      infer_request({bytes_tensor(kPrompt, {"a lamp"}, {1, 1}),
                     numbers_tensor<int64_t>(kSeed, DataType::kInt64, {42}, {1, 1}),
                     numbers_tensor<float>(kGuidanceScale, DataType::kFp32, {2.5f}),
                     numbers_tensor<float>(kTopP, DataType::kFp32, {0.75f}),
                     numbers_tensor<int32_t>(kResolutionBase, DataType::kInt32, {5}),
                     numbers_tensor<float>(kBoundingBox, DataType::kFp32, {1, 2, 1}, {1, 3}),
                     bytes_tensor(kFormat, {"OBJ"})},
                    model.name);
  const InferPlan plan = plan_infer(request, model);
  ASSERT_EQ(plan.requests.size(), 1u);
  const auto& r = plan.requests[0];
  EXPECT_EQ(r.seed(), 42u);
  EXPECT_FLOAT_EQ(r.guidance_scale(), 2.5f);
  EXPECT_FLOAT_EQ(r.top_p(), 0.75f);
  EXPECT_EQ(r.resolution_base(), 5);
  EXPECT_FLOAT_EQ(r.bounding_box().y(), 2.f);
  EXPECT_EQ(r.format(), v1::MESH_FORMAT_OBJ);
  EXPECT_TRUE(plan.batch_dimension);
}

TEST(InferPlanTest, ABatchFansOutWithValuesForAllOrForEach) {
  InferRequest request =
      infer_request({bytes_tensor(kPrompt, {"a", "b", "c"}, {3, 1}),
                     numbers_tensor<int64_t>(kSeed, DataType::kInt64, {7, 8, 9}, {3, 1}),
                     numbers_tensor<int32_t>(kResolutionBase, DataType::kInt32, {4}, {1, 1}),
                     bytes_tensor(kFormat, {"ply", "glb", "compact"})});
  const InferPlan plan = plan_infer(request, demo_model());
  ASSERT_EQ(plan.requests.size(), 3u);
  EXPECT_EQ(plan.requests[1].prompt(), "b");
  EXPECT_EQ(plan.requests[2].seed(), 9u);
  for (const auto& r : plan.requests) EXPECT_EQ(r.resolution_base(), 4);
  EXPECT_EQ(plan.requests[0].format(), v1::MESH_FORMAT_PLY);
  EXPECT_EQ(plan.requests[2].format(), v1::MESH_FORMAT_COMPACT);
}

TEST(InferPlanTest, ValuesAsParametersAndTheCallsOwnParameters) {
  InferRequest request = one_prompt();
  request.parameters = {{"seed", int64_t{5}},
                        {"guidance_scale", 1.5},
                        {"top_p", int64_t{1}},
                        {"resolution_base", int64_t{6}},
                        {"format", std::string("obj")},
                        {"target_face_count", int64_t{500}},
                        {"mesh_profile", std::string("Roblox")},
                        {"priority", int64_t{2}},
                        {"timeout", int64_t{2'500'000}},
                        {"progress", true},
                        {"sequence_id", int64_t{0}}};
  const InferPlan plan = plan_infer(request, demo_model());
  const auto& r = plan.requests.at(0);
  EXPECT_EQ(r.seed(), 5u);
  EXPECT_FLOAT_EQ(r.guidance_scale(), 1.5f);
  EXPECT_FLOAT_EQ(r.top_p(), 1.f);
  EXPECT_EQ(r.resolution_base(), 6);
  EXPECT_EQ(r.format(), v1::MESH_FORMAT_OBJ);
  EXPECT_EQ(r.target_face_count(), 500u);
  EXPECT_EQ(r.mesh_profile(), v1::MESH_PROFILE_ROBLOX);
  EXPECT_EQ(r.priority(), v1::PRIORITY_BATCH);
  EXPECT_EQ(plan.timeout, std::chrono::microseconds(2'500'000));
  EXPECT_TRUE(plan.progress);

  InferRequest with_bbox = infer_request({bytes_tensor(kPrompt, {"x"})}, "cube3d-v0.5");
  with_bbox.parameters = {{"bbox", std::string("1, 2,3")}};
  const auto box = plan_infer(with_bbox, demo_model(true)).requests.at(0).bounding_box();
  EXPECT_FLOAT_EQ(box.z(), 3.f);
}

TEST(InferPlanTest, OutputsAskedForAndTheArraysBesideAFile) {
  InferRequest request = one_prompt();
  request.outputs = {kFaces, kMesh, kVertices};
  InferPlan plan = plan_infer(request, demo_model());
  EXPECT_EQ(plan.outputs, (std::vector<std::string>{kFaces, kMesh, kVertices}));
  EXPECT_EQ(plan.requests[0].format(), v1::MESH_FORMAT_GLB);
  EXPECT_TRUE(plan.requests[0].return_raw_mesh());
  // The arrays alone: no file is made.
  request.outputs = {kVertices};
  plan = plan_infer(request, demo_model());
  EXPECT_EQ(plan.requests[0].format(), v1::MESH_FORMAT_RAW);
  // MESH without FORMAT: the server's default format, and GLB where that is raw (no file).
  RequestPolicy policy;
  policy.defaults.format = MeshFormat::kPly;
  ModelIdentity identity;
  identity.name = "demo";
  EXPECT_EQ(plan_infer(one_prompt(), describe_model(identity, policy, 64, {})).requests[0].format(),
            v1::MESH_FORMAT_PLY);
  policy.defaults.format = MeshFormat::kRaw;
  EXPECT_EQ(plan_infer(one_prompt(), describe_model(identity, policy, 64, {})).requests[0].format(),
            v1::MESH_FORMAT_GLB);
}

TEST(InferPlanTest, EveryProtocolFaultIsRefusedNamingWhatIsWrong) {
  // Missing PROMPT, unknown input, a BBOX on a model without one.
  expect_refused(infer_request({numbers_tensor<int64_t>(kSeed, DataType::kInt64, {1})}),
                 {"input PROMPT is missing", "PROMPT, SEED, GUIDANCE_SCALE"});
  expect_refused(infer_request({bytes_tensor(kPrompt, {"a"}), bytes_tensor("COLOR", {"red"})}),
                 {"unknown input 'COLOR'", "takes PROMPT"});
  expect_refused(infer_request({bytes_tensor(kPrompt, {"a"}),
                                numbers_tensor<float>(kBoundingBox, DataType::kFp32, {1, 1, 1})}),
                 {"input BBOX", "no bounding-box input"});
  // Wrong datatype, repeated input, data that does not match the shape.
  expect_refused(infer_request({bytes_tensor(kPrompt, {"a"}),
                                numbers_tensor<float>(kSeed, DataType::kFp32, {1.f})}),
                 {"input SEED", "datatype FP32", "takes INT64"});
  expect_refused(infer_request({bytes_tensor(kPrompt, {"a"}), bytes_tensor(kPrompt, {"b"})}),
                 {"input PROMPT is given twice"});
  expect_refused(infer_request({bytes_tensor(kPrompt, {"a"}),
                                numbers_tensor<int64_t>(kSeed, DataType::kInt64, {1, 2}, {1})}),
                 {"input SEED", "holds 1 INT64 elements (8 bytes)", "16 bytes"});
  expect_refused(infer_request({bytes_tensor(kPrompt, {"a", "b"}, {3})}),
                 {"input PROMPT", "ends in element 2 of 3"});
  // Shapes: PROMPT [B] or [B, 1] within max_batch_size; others one value or one a prompt.
  expect_refused(infer_request({bytes_tensor(kPrompt, {"a", "b"}, {1, 2})}),
                 {"input PROMPT: shape [1, 2]", "[B] or [B, 1]"});
  expect_refused(infer_request({bytes_tensor(kPrompt, std::vector<std::string>(9, "a"))}),
                 {"input PROMPT: shape [9]", "max_batch_size 8"});
  expect_refused(infer_request({bytes_tensor(kPrompt, {}, {0})}), {"input PROMPT: shape [0]"});
  expect_refused(infer_request({bytes_tensor(kPrompt, {"a", "b"}),
                                numbers_tensor<int64_t>(kSeed, DataType::kInt64, {1, 2, 3})}),
                 {"input SEED: shape [3]", "PROMPT holds 2"});
  expect_refused(infer_request({bytes_tensor(kPrompt, {"a"}), bytes_tensor(kFormat, {"stl"})}),
                 {"input FORMAT", "'stl' is not one of glb, obj, ply, compact"});
  expect_refused(infer_request({bytes_tensor(kPrompt, {"a"}), bytes_tensor(kFormat, {"raw"})}),
                 {"input FORMAT", "VERTICES and FACES"});
  expect_refused(infer_request({bytes_tensor(kPrompt, {"a"}),
                                numbers_tensor<int64_t>(kSeed, DataType::kInt64, {-1})}),
                 {"input SEED: -1 is negative"});
  // Outputs.
  InferRequest request = one_prompt();
  request.outputs = {"NORMALS"};
  expect_refused(request, {"unknown output 'NORMALS'", "MESH, VERTICES, FACES"});
  request.outputs = {kMesh, kMesh};
  expect_refused(request, {"output MESH is asked for twice"});
}

TEST(InferPlanTest, ParametersAreCheckedByNameAndKind) {
  const auto with = [](Parameters parameters) {
    InferRequest r = one_prompt();
    r.parameters = std::move(parameters);
    return r;
  };
  expect_refused(with({{"sead", int64_t{1}}}),
                 {"unknown parameter 'sead'", "seed, guidance_scale"});
  expect_refused(with({{"seed", std::string("1")}}), {"parameter seed: a whole number"});
  expect_refused(with({{"resolution_base", 4.5}}), {"parameter resolution_base: a whole number"});
  expect_refused(with({{"timeout", int64_t{0}}}), {"parameter timeout: 0 is outside"});
  expect_refused(with({{"priority", int64_t{3}}}), {"parameter priority: 3 is outside [0, 2]"});
  expect_refused(with({{"progress", int64_t{1}}}), {"parameter progress: true or false"});
  expect_refused(with({{"mesh_profile", std::string("unity")}}),
                 {"parameter mesh_profile", "none, roblox"});
  expect_refused(with({{"sequence_id", int64_t{7}}}), {"parameter sequence_id", "no sequences"});
  expect_refused(with({{"bbox", std::string("1,2,3")}}), {"parameter bbox", "no bounding-box"});
  // The same value as an input and as a parameter is ambiguous.
  InferRequest both = infer_request(
      {bytes_tensor(kPrompt, {"a"}), numbers_tensor<int64_t>(kSeed, DataType::kInt64, {1})});
  both.parameters = {{"seed", int64_t{2}}};
  expect_refused(both, {"input SEED and parameter seed both set it"});
  // What the door reads itself is passed over.
  InferRequest door_param = with({{"binary_data_output", true}});
  EXPECT_NO_THROW(plan_infer(door_param, demo_model(), DoorRules{{"binary_data_output"}, {}, ""}));
  expect_refused(door_param, {"unknown parameter 'binary_data_output'"});
}

TEST(InferPlanTest, ABinaryFileIsRefusedWhereTheDoorAnswersItAsText) {
  const DoorRules json_door{{}, {kMesh}, "ask for binary data"};
  expect_refused(one_prompt(), {"output MESH: a glb file is binary", "ask for binary data"},
                 demo_model(), json_door);
  InferRequest obj = infer_request({bytes_tensor(kPrompt, {"a"}), bytes_tensor(kFormat, {"obj"})});
  EXPECT_NO_THROW(plan_infer(obj, demo_model(), json_door));
  // Only MESH is a file: the arrays go as text anywhere.
  InferRequest arrays = one_prompt();
  arrays.outputs = {kVertices, kFaces};
  EXPECT_NO_THROW(plan_infer(arrays, demo_model(), DoorRules{{}, {kVertices, kFaces}, ""}));
}

TEST(InferPlanTest, ServiceMessagesAreSaidInTheProtocolsTerms) {
  EXPECT_EQ(in_protocol_terms("guidance_scale must be a finite number in [0, 100], got 200", 0, 1),
            "input GUIDANCE_SCALE: guidance_scale must be a finite number in [0, 100], got 200");
  EXPECT_EQ(in_protocol_terms("bounding_box.x must be positive", 0, 1),
            "input BBOX: bounding_box.x must be positive");
  EXPECT_EQ(in_protocol_terms("prompt is empty", 2, 3), "PROMPT[2]: input PROMPT: prompt is empty");
  EXPECT_EQ(in_protocol_terms("target_face_count must be in [4, 100]", 0, 1),
            "parameter target_face_count: target_face_count must be in [4, 100]");
  // Not a field's message: as it was.
  EXPECT_EQ(in_protocol_terms("the queue is full", 0, 1), "the queue is full");
  EXPECT_EQ(in_protocol_terms("prompts are", 0, 1), "prompts are");
}

}  // namespace
}  // namespace cube3d::inference
