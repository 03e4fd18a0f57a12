// Request validation: a valid GenerateMeshRequest (read by the doors' codec, as a door reads it)
// becomes the expected WorkRequest (with the policy's defaults for unset fields), and every kind
// of bad field is rejected with kInvalidArgument and a message that names the field.
#include "cube3d/server/service/request_validation.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>

#include "cube3d/core/error.h"
#include "cube3d/server/wire/proto_enums.h"
#include "cube3d/server/wire/request_codec.h"
#include "cube3d/v1/mesh_service.pb.h"

namespace cube3d {
namespace test_request_validation {

// What the service validates of a message: the ClientRequest its door reads from it.
WorkRequest validate_request(const v1::GenerateMeshRequest& request, const RequestPolicy& policy) {
  return cube3d::validate_request(client_request_of(request), policy);
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

v1::GenerateMeshRequest minimal_request(const std::string& prompt = "a wooden chair") {
  v1::GenerateMeshRequest request;
  request.set_prompt(prompt);
  return request;
}

RequestPolicy bbox_policy() {
  RequestPolicy policy;
  policy.model_has_bbox = true;
  return policy;
}

bool is_lower_hex(const std::string& s) {
  for (const char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// A minimal request asking for a bounding box of x by y by z.
v1::GenerateMeshRequest request_with_bbox(float x, float y, float z) {
  v1::GenerateMeshRequest request = minimal_request();
  request.mutable_bounding_box()->set_x(x);
  request.mutable_bounding_box()->set_y(y);
  request.mutable_bounding_box()->set_z(z);
  return request;
}

// Expects a minimal request with each of `values` put in by `set` to be accepted under `policy`,
// and the value kept (as `get` reads it from the validated request).
template <typename T, typename Set, typename Get>
void expect_each_kept(const RequestPolicy& policy, std::initializer_list<T> values, Set set,
                      Get get) {
  v1::GenerateMeshRequest request = minimal_request();
  for (const T value : values) {
    SCOPED_TRACE(::testing::Message() << "value " << value);
    set(request, value);
    EXPECT_EQ(get(validate_request(request, policy)), value);
  }
}

// Validates `request` expecting kInvalidArgument; checks that the message contains every one of
// `needles` (the field name first).
void expect_invalid(const v1::GenerateMeshRequest& request, const RequestPolicy& policy,
                    std::initializer_list<std::string> needles) {
  try {
    const WorkRequest job = validate_request(request, policy);
    ADD_FAILURE() << "expected kInvalidArgument, but the request was accepted (prompt \""
                  << job.prompt << "\")";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    const std::string message = e.what();
    for (const std::string& needle : needles) {
      EXPECT_NE(message.find(needle), std::string::npos)
          << "message \"" << message << "\" does not mention \"" << needle << "\"";
    }
  }
}

// expect_invalid() for a minimal request with one field changed by `change`, under the default
// policy.
void expect_change_invalid(const std::function<void(v1::GenerateMeshRequest&)>& change,
                           std::initializer_list<std::string> needles) {
  v1::GenerateMeshRequest request = minimal_request();
  change(request);
  expect_invalid(request, RequestPolicy{}, needles);
}

// --- valid requests ---------------------------------------------------------------------------

TEST(RequestValidationTest, MinimalRequestTakesDefaultPolicyDefaults) {
  const RequestPolicy policy;
  const WorkRequest job = validate_request(minimal_request(), policy);
  EXPECT_EQ(job.prompt, "a wooden chair");
  EXPECT_DOUBLE_EQ(job.guidance_scale, 3.0);
  EXPECT_FALSE(job.top_p.has_value());
  EXPECT_EQ(job.seed, 0u);
  EXPECT_FALSE(job.bounding_box.has_value());
  EXPECT_EQ(job.resolution_base, 8);
  EXPECT_EQ(job.format, MeshFormat::kGlb);
  EXPECT_FALSE(job.target_face_count.has_value());
  EXPECT_FALSE(job.return_shape_tokens);
}

TEST(RequestValidationTest, UnsetFieldsTakeThePolicysCustomDefaults) {
  RequestPolicy policy;
  policy.defaults.guidance_scale = 5.5;
  policy.defaults.top_p = 0.8;
  policy.defaults.resolution_base = 6;
  policy.defaults.format = MeshFormat::kObj;
  const WorkRequest job = validate_request(minimal_request(), policy);
  EXPECT_DOUBLE_EQ(job.guidance_scale, 5.5);
  ASSERT_TRUE(job.top_p.has_value());
  EXPECT_DOUBLE_EQ(*job.top_p, 0.8);
  EXPECT_EQ(job.resolution_base, 6);
  EXPECT_EQ(job.format, MeshFormat::kObj);
}

TEST(RequestValidationTest, SetFieldsOverrideThePolicyDefaults) {
  RequestPolicy policy;
  policy.defaults.top_p = 0.8;
  policy.defaults.format = MeshFormat::kObj;
  v1::GenerateMeshRequest request = minimal_request();
  request.set_guidance_scale(7.5f);
  request.set_top_p(0.5f);
  request.set_seed(1234567890123ULL);
  request.set_resolution_base(5);
  request.set_format(v1::MESH_FORMAT_PLY);
  request.set_target_face_count(5000);
  request.set_return_shape_tokens(true);
  request.set_request_id("client-42_a.b:c");
  const WorkRequest job = validate_request(request, policy);
  EXPECT_EQ(job.request_id, "client-42_a.b:c");
  EXPECT_DOUBLE_EQ(job.guidance_scale, 7.5);
  ASSERT_TRUE(job.top_p.has_value());
  EXPECT_DOUBLE_EQ(*job.top_p, 0.5);
  EXPECT_EQ(job.seed, 1234567890123ULL);
  EXPECT_EQ(job.resolution_base, 5);
  EXPECT_EQ(job.format, MeshFormat::kPly);
  ASSERT_TRUE(job.target_face_count.has_value());
  EXPECT_EQ(*job.target_face_count, 5000);
  EXPECT_TRUE(job.return_shape_tokens);
}

TEST(RequestValidationTest, EmptyRequestIdIsReplacedByA32CharacterHexId) {
  const WorkRequest a = validate_request(minimal_request(), RequestPolicy{});
  const WorkRequest b = validate_request(minimal_request(), RequestPolicy{});
  EXPECT_EQ(a.request_id.size(), 32u) << a.request_id;
  EXPECT_TRUE(is_lower_hex(a.request_id)) << a.request_id;
  EXPECT_NE(a.request_id, b.request_id);
}

TEST(RequestValidationTest, MakeRequestIdGivesDistinctHexIds) {
  const std::string a = make_request_id();
  const std::string b = make_request_id();
  EXPECT_EQ(a.size(), 32u);
  EXPECT_TRUE(is_lower_hex(a)) << a;
  EXPECT_NE(a, b);
}

TEST(RequestValidationTest, RequestIdOf128CharactersIsKept) {
  v1::GenerateMeshRequest request = minimal_request();
  request.set_request_id(std::string(128, 'x'));
  EXPECT_EQ(validate_request(request, RequestPolicy{}).request_id, std::string(128, 'x'));
}

TEST(RequestValidationTest, PromptExactlyAtTheByteLimitIsAccepted) {
  RequestPolicy policy;
  policy.limits.max_prompt_bytes = 16;
  const std::string prompt(16, 'a');
  EXPECT_EQ(validate_request(minimal_request(prompt), policy).prompt, prompt);
}

TEST(RequestValidationTest, MultibyteUtf8PromptIsAccepted) {
  const std::string prompt = "chaise \xc3\xa0 bascule \xe6\xa4\x85\xe5\xad\x90 \xf0\x9f\xaa\x91";
  EXPECT_EQ(validate_request(minimal_request(prompt), RequestPolicy{}).prompt, prompt);
}

TEST(RequestValidationTest, GuidanceScaleBoundsAreInclusive) {
  RequestPolicy policy;
  policy.max_guidance_scale = 10.0;
  expect_each_kept<float>(
      policy, {0.0f, 10.0f}, [](auto& r, float v) { r.set_guidance_scale(v); },
      [](const WorkRequest& job) { return job.guidance_scale; });
}

TEST(RequestValidationTest, TopPOfOneIsAccepted) {
  v1::GenerateMeshRequest request = minimal_request();
  request.set_top_p(1.0f);
  const WorkRequest job = validate_request(request, RequestPolicy{});
  ASSERT_TRUE(job.top_p.has_value());
  EXPECT_DOUBLE_EQ(*job.top_p, 1.0);
}

TEST(RequestValidationTest, ResolutionBaseBoundsAreInclusive) {
  const RequestPolicy policy;
  expect_each_kept<int64_t>(
      policy, {policy.limits.min_resolution_base, policy.limits.max_resolution_base},
      [](auto& r, int64_t v) { r.set_resolution_base(static_cast<int32_t>(v)); },
      [](const WorkRequest& job) { return job.resolution_base; });
}

TEST(RequestValidationTest, TargetFaceCountBoundsAreInclusive) {
  RequestPolicy policy;
  policy.limits.max_target_face_count = 1000;
  expect_each_kept<int64_t>(
      policy, {4, 1000},
      [](auto& r, int64_t v) { r.set_target_face_count(static_cast<uint32_t>(v)); },
      [](const WorkRequest& job) { return job.target_face_count; });
}

TEST(RequestValidationTest, BoundingBoxIsScaledSoThatItsLongestSideIs1925) {
  const v1::GenerateMeshRequest request = request_with_bbox(1.0f, 4.0f, 2.0f);
  const WorkRequest job = validate_request(request, bbox_policy());
  ASSERT_TRUE(job.bounding_box.has_value());
  const std::array<float, 3> box = *job.bounding_box;
  EXPECT_FLOAT_EQ(box[0], 1.925f / 4.0f);
  EXPECT_FLOAT_EQ(box[1], 1.925f);
  EXPECT_FLOAT_EQ(box[2], 1.925f / 2.0f);
  // Proportions are kept.
  EXPECT_FLOAT_EQ(box[1] / box[0], 4.0f);
  EXPECT_FLOAT_EQ(box[2] / box[0], 2.0f);
}

TEST(RequestValidationTest, SmallBoundingBoxIsScaledUp) {
  const v1::GenerateMeshRequest request = request_with_bbox(0.01f, 0.01f, 0.005f);
  const WorkRequest job = validate_request(request, bbox_policy());
  ASSERT_TRUE(job.bounding_box.has_value());
  EXPECT_FLOAT_EQ((*job.bounding_box)[0], 1.925f);
  EXPECT_FLOAT_EQ((*job.bounding_box)[1], 1.925f);
  EXPECT_FLOAT_EQ((*job.bounding_box)[2], 1.925f / 2.0f);
}

TEST(RequestValidationTest, UnsetBoundingBoxStaysUnsetOnABboxModel) {
  EXPECT_FALSE(validate_request(minimal_request(), bbox_policy()).bounding_box.has_value());
}

// --- invalid requests -------------------------------------------------------------------------

TEST(RequestValidationTest, EmptyPromptIsRejected) {
  expect_invalid(minimal_request(""), RequestPolicy{}, {"prompt"});
}

TEST(RequestValidationTest, PromptOverTheByteLimitIsRejected) {
  RequestPolicy policy;
  policy.limits.max_prompt_bytes = 16;
  expect_invalid(minimal_request(std::string(17, 'a')), policy, {"prompt", "17", "16"});
}

TEST(RequestValidationTest, PromptOverTheDefaultByteLimitIsRejected) {
  expect_invalid(minimal_request(std::string(1025, 'a')), RequestPolicy{}, {"prompt", "1024"});
}

TEST(RequestValidationTest, PromptWithLoneContinuationByteIsRejected) {
  expect_invalid(minimal_request("chair \x80 table"), RequestPolicy{}, {"prompt", "UTF-8", "6"});
}

TEST(RequestValidationTest, PromptWithTruncatedSequenceIsRejected) {
  // The first two bytes of the three-byte U+6905, then the end of the text.
  expect_invalid(minimal_request("chair \xe6\xa4"), RequestPolicy{}, {"prompt", "UTF-8"});
  // The same, followed by ASCII.
  expect_invalid(minimal_request("\xe6\xa4 chair"), RequestPolicy{}, {"prompt", "UTF-8"});
}

TEST(RequestValidationTest, GuidanceScaleNaNIsRejected) {
  expect_change_invalid([](auto& r) { r.set_guidance_scale(kNaN); }, {"guidance_scale"});
}

TEST(RequestValidationTest, GuidanceScaleInfinityIsRejected) {
  v1::GenerateMeshRequest request = minimal_request();
  request.set_guidance_scale(kInf);
  expect_invalid(request, RequestPolicy{}, {"guidance_scale"});
  request.set_guidance_scale(-kInf);
  expect_invalid(request, RequestPolicy{}, {"guidance_scale"});
}

TEST(RequestValidationTest, NegativeGuidanceScaleIsRejected) {
  expect_change_invalid([](auto& r) { r.set_guidance_scale(-0.5f); }, {"guidance_scale"});
}

TEST(RequestValidationTest, GuidanceScaleAboveTheMaximumIsRejected) {
  RequestPolicy policy;
  policy.max_guidance_scale = 10.0;
  v1::GenerateMeshRequest request = minimal_request();
  request.set_guidance_scale(10.5f);
  expect_invalid(request, policy, {"guidance_scale", "10"});
}

TEST(RequestValidationTest, TopPZeroIsRejected) {
  expect_change_invalid([](auto& r) { r.set_top_p(0.0f); }, {"top_p"});
}

TEST(RequestValidationTest, NegativeTopPIsRejected) {
  expect_change_invalid([](auto& r) { r.set_top_p(-0.25f); }, {"top_p"});
}

TEST(RequestValidationTest, TopPAboveOneIsRejected) {
  expect_change_invalid([](auto& r) { r.set_top_p(1.5f); }, {"top_p", "1.5"});
}

TEST(RequestValidationTest, TopPNaNIsRejected) {
  expect_change_invalid([](auto& r) { r.set_top_p(kNaN); }, {"top_p"});
}

TEST(RequestValidationTest, BoundingBoxOnAModelWithoutBboxIsRejected) {
  const v1::GenerateMeshRequest request = request_with_bbox(1.0f, 1.0f, 1.0f);
  RequestPolicy policy;
  policy.model_has_bbox = false;
  expect_invalid(request, policy, {"bounding_box"});
}

TEST(RequestValidationTest, BoundingBoxWithAZeroSideIsRejected) {
  const v1::GenerateMeshRequest request = request_with_bbox(1.0f, 0.0f, 1.0f);
  expect_invalid(request, bbox_policy(), {"bounding_box.y"});
}

TEST(RequestValidationTest, BoundingBoxPresentButAllZeroIsRejected) {
  // A set but empty BoundingBox message (every side 0) is present on the wire.
  v1::GenerateMeshRequest request = minimal_request();
  request.mutable_bounding_box();
  expect_invalid(request, bbox_policy(), {"bounding_box.x"});
}

TEST(RequestValidationTest, BoundingBoxWithANegativeSideIsRejected) {
  const v1::GenerateMeshRequest request = request_with_bbox(1.0f, 1.0f, -2.0f);
  expect_invalid(request, bbox_policy(), {"bounding_box.z"});
}

TEST(RequestValidationTest, BoundingBoxWithANaNSideIsRejected) {
  const v1::GenerateMeshRequest request = request_with_bbox(kNaN, 1.0f, 1.0f);
  expect_invalid(request, bbox_policy(), {"bounding_box.x"});
}

TEST(RequestValidationTest, BoundingBoxWithAnInfiniteSideIsRejected) {
  const v1::GenerateMeshRequest request = request_with_bbox(1.0f, kInf, 1.0f);
  expect_invalid(request, bbox_policy(), {"bounding_box.y"});
}

TEST(RequestValidationTest, ResolutionBaseBelowTheMinimumIsRejectedNamingTheRange) {
  const RequestPolicy policy;  // [4, 9]
  v1::GenerateMeshRequest request = minimal_request();
  request.set_resolution_base(3);
  expect_invalid(request, policy, {"resolution_base", "[4, 9]"});
  request.set_resolution_base(-1);
  expect_invalid(request, policy, {"resolution_base", "[4, 9]"});
}

TEST(RequestValidationTest, ResolutionBaseAboveTheMaximumIsRejectedNamingTheRange) {
  RequestPolicy policy;
  policy.limits.min_resolution_base = 5;
  policy.limits.max_resolution_base = 7;
  v1::GenerateMeshRequest request = minimal_request();
  request.set_resolution_base(8);
  expect_invalid(request, policy, {"resolution_base", "[5, 7]"});
}

TEST(RequestValidationTest, UnknownFormatValueIsRejected) {
  expect_change_invalid([](auto& r) { r.set_format(static_cast<v1::MeshFormat>(9)); },
                        {"format", "9"});
}

TEST(RequestValidationTest, UnknownFormatValueFromTheWireIsRejected) {
  // proto3 enums are open: field 7 (varint) = 9 parses and reaches validation unchanged.
  const std::string wire = minimal_request().SerializeAsString() + std::string("\x38\x09", 2);
  v1::GenerateMeshRequest request;
  ASSERT_TRUE(request.ParseFromString(wire));
  ASSERT_TRUE(request.has_format());
  expect_invalid(request, RequestPolicy{}, {"format", "9"});
}

TEST(RequestValidationTest, TargetFaceCountZeroIsRejected) {
  expect_change_invalid([](auto& r) { r.set_target_face_count(0); }, {"target_face_count"});
}

TEST(RequestValidationTest, TargetFaceCountThreeIsRejected) {
  expect_change_invalid([](auto& r) { r.set_target_face_count(3); }, {"target_face_count"});
}

TEST(RequestValidationTest, TargetFaceCountAboveTheMaximumIsRejected) {
  RequestPolicy policy;
  policy.limits.max_target_face_count = 1000;
  v1::GenerateMeshRequest request = minimal_request();
  request.set_target_face_count(1001);
  expect_invalid(request, policy, {"target_face_count", "1000"});
  // The largest uint32, over the default maximum too.
  request.set_target_face_count(std::numeric_limits<uint32_t>::max());
  expect_invalid(request, RequestPolicy{}, {"target_face_count"});
}

TEST(RequestValidationTest, RequestIdWithASpaceIsRejected) {
  expect_change_invalid([](auto& r) { r.set_request_id("my request"); }, {"request_id"});
}

TEST(RequestValidationTest, RequestIdWithNonAsciiOrControlBytesIsRejected) {
  v1::GenerateMeshRequest request = minimal_request();
  request.set_request_id("caf\xc3\xa9");
  expect_invalid(request, RequestPolicy{}, {"request_id"});
  request.set_request_id(std::string("id\n1"));
  expect_invalid(request, RequestPolicy{}, {"request_id"});
}

TEST(RequestValidationTest, RequestIdOf129CharactersIsRejected) {
  expect_change_invalid([](auto& r) { r.set_request_id(std::string(129, 'x')); },
                        {"request_id", "128"});
}

// --- formats -------------------------------------------------------------------------------

// Each of the API's five formats becomes ours (the pairs themselves: wire/test_proto_enums.cpp).
TEST(RequestValidationTest, EachProtoFormatIsPassedThroughValidation) {
  for (const MeshFormat ours : {MeshFormat::kRaw, MeshFormat::kObj, MeshFormat::kPly,
                                MeshFormat::kGlb, MeshFormat::kCompact}) {
    SCOPED_TRACE(v1::MeshFormat_Name(to_proto(ours)));
    v1::GenerateMeshRequest request = minimal_request();
    request.set_format(to_proto(ours));
    EXPECT_EQ(validate_request(request, RequestPolicy{}).format, ours);
  }
}

TEST(RequestValidationTest, UnspecifiedFormatMeansTheServersDefault) {
  RequestPolicy policy;
  policy.defaults.format = MeshFormat::kObj;
  v1::GenerateMeshRequest request = minimal_request();
  request.set_format(v1::MESH_FORMAT_UNSPECIFIED);
  EXPECT_EQ(validate_request(request, policy).format, MeshFormat::kObj);
  request.clear_format();
  EXPECT_EQ(validate_request(request, policy).format, MeshFormat::kObj);
}

// Invalid UTF-8 that a client's runtime would never build (the gRPC door hands the prompt over
// as bytes, generate_request_bytes.h) is named here.
TEST(RequestValidationTest, InvalidUtf8PromptIsNamedWithItsOffset) {
  v1::GenerateMeshRequest request;
  request.set_prompt(
      std::string("ab\xff"
                  "cd"));
  try {
    validate_request(request, RequestPolicy{});
    ADD_FAILURE() << "invalid UTF-8 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("prompt is not valid UTF-8 (byte offset 2)"),
              std::string::npos)
        << e.what();
  }
}

// --- the compact encoding, the pivot, levels of detail -----------------------------------------

TEST(RequestValidationTest, CompactOptionsArePassedThrough) {
  v1::GenerateMeshRequest request = minimal_request();
  request.set_format(v1::MESH_FORMAT_COMPACT);
  WorkRequest job = validate_request(request, RequestPolicy{});
  EXPECT_EQ(job.compact, CompactMeshOptions{});  // float32, no normals
  request.mutable_compact()->set_positions(v1::COMPACT_POSITIONS_QUANTIZED16);
  request.mutable_compact()->set_normals(true);
  job = validate_request(request, RequestPolicy{});
  EXPECT_EQ(job.compact.positions, CompactPositions::kQuantized16);
  EXPECT_TRUE(job.compact.normals);
  // The server's default format counts too.
  RequestPolicy compact_default;
  compact_default.defaults.format = MeshFormat::kCompact;
  request.clear_format();
  EXPECT_TRUE(validate_request(request, compact_default).compact.normals);
}

TEST(RequestValidationTest, CompactOptionsWithAnotherFormatAreRejected) {
  v1::GenerateMeshRequest request = minimal_request();
  request.set_format(v1::MESH_FORMAT_GLB);
  request.mutable_compact()->set_normals(true);
  expect_invalid(request, RequestPolicy{}, {"compact", "MESH_FORMAT_GLB", "MESH_FORMAT_COMPACT"});
  request.mutable_compact()->set_normals(false);
  request.mutable_compact()->set_positions(static_cast<v1::CompactPositions>(7));
  expect_invalid(request, RequestPolicy{}, {"compact.positions 7"});
  // Set to the defaults, the message is harmless.
  request.mutable_compact()->set_positions(v1::COMPACT_POSITIONS_FLOAT32);
  EXPECT_NO_THROW(validate_request(request, RequestPolicy{}));
}

TEST(RequestValidationTest, PivotIsPassedThroughAndUnknownOnesRejected) {
  v1::GenerateMeshRequest request = minimal_request();
  EXPECT_EQ(validate_request(request, RequestPolicy{}).pivot, MeshPivot::kModelOrigin);
  request.set_pivot(v1::PIVOT_BOTTOM_CENTER);
  EXPECT_EQ(validate_request(request, RequestPolicy{}).pivot, MeshPivot::kBottomCenter);
  request.set_pivot(v1::PIVOT_CENTER);
  EXPECT_EQ(validate_request(request, RequestPolicy{}).pivot, MeshPivot::kCenter);
  request.set_pivot(static_cast<v1::Pivot>(4));
  expect_invalid(request, RequestPolicy{}, {"pivot 4", "BOTTOM_CENTER"});
}

TEST(RequestValidationTest, LodFaceCountsBecomeLevelZeroAndFurtherLevels) {
  v1::GenerateMeshRequest request = minimal_request();
  for (const uint32_t faces : {20000u, 5000u, 1000u}) request.add_lod_face_counts(faces);
  const WorkRequest job = validate_request(request, RequestPolicy{});
  EXPECT_EQ(job.target_face_count, 20000);
  EXPECT_EQ(job.lod_face_counts, (std::vector<int64_t>{5000, 1000}));
  // One level is a plain target_face_count.
  v1::GenerateMeshRequest one = minimal_request();
  one.add_lod_face_counts(800);
  EXPECT_EQ(validate_request(one, RequestPolicy{}).target_face_count, 800);
  EXPECT_TRUE(validate_request(one, RequestPolicy{}).lod_face_counts.empty());
}

TEST(RequestValidationTest, BadLodFaceCountsAreRejectedNamingTheLevel) {
  v1::GenerateMeshRequest request = minimal_request();
  request.add_lod_face_counts(5000);
  request.add_lod_face_counts(5000);
  expect_invalid(request, RequestPolicy{},
                 {"lod_face_counts[1] = 5000 is not below lod_face_counts[0] = 5000"});
  request.set_lod_face_counts(1, 3);
  expect_invalid(request, RequestPolicy{}, {"lod_face_counts[1] must be in [4, ", "got 3"});
  request.set_lod_face_counts(1, 1000);
  request.set_target_face_count(5000);
  expect_invalid(request, RequestPolicy{}, {"target_face_count and lod_face_counts"});
  request.clear_target_face_count();
  RequestPolicy two_levels;
  two_levels.limits.max_lod_levels = 2;
  EXPECT_NO_THROW(validate_request(request, two_levels));
  request.add_lod_face_counts(100);
  expect_invalid(request, two_levels, {"lod_face_counts has 3 levels", "limits.max_lod_levels"});
}

}  // namespace test_request_validation
}  // namespace cube3d
