// The answer as the API's message (wire/answer_codec.h): the cache's encoding reads back to the
// same body, field for field (an entry served later is the answer computed now); the size the
// service checks against limits.max_message_bytes is exactly the message's the gRPC door sends;
// the call's own fields are the call's; and bytes that are no answer of ours are refused.
#include "cube3d/server/wire/answer_codec.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace cube3d {
namespace {

WorkLevel level(int64_t faces, MeshFormat format) {
  WorkLevel l;
  l.target_face_count = faces;
  if (format == MeshFormat::kRaw) {
    l.vertices = {0, 0, 0, 1, 0, 0, 0, 1, 0};
    l.indices = {0, 1, 2};
  } else {
    l.encoded = "level of " + std::to_string(faces);
  }
  l.vertex_count = 3;
  l.face_count = 1;
  l.bounds = {.min = {0, 0, 0}, .max = {1, 1, 0}};
  return l;
}

// A body with every field set, in `format`.
MeshBody full_body(MeshFormat format) {
  MeshBody b;
  b.format = format;
  b.has_raw = true;
  b.vertices = {-1, -0.5f, 0.25f, 1, 2, 3, 4, 5, 6};
  b.indices = {0, 1, 2, 2, 1, 0, 70000, 1, 2};
  if (format != MeshFormat::kRaw) b.encoded = std::string("glTF\0\x02", 6) + "binary";
  b.vertex_count = 3;
  b.face_count = 3;
  b.shape_tokens = {1, 16383, 0};
  b.warnings = {"the prompt was truncated to CLIP's 77 tokens"};
  b.occupancy_points = 5'000'000'000;
  b.bounds = WorkMeshBounds{.min = {-1, -0.5f, 0.25f}, .max = {4, 5, 6}};
  b.lods = {level(500, format), level(100, format)};
  EffectiveParameters& e = b.effective;
  e.guidance_scale = 3.5f;
  e.top_p = 0.9f;
  e.seed = 42;
  e.bounding_box = std::array<float, 3>{1.925f, 1, 0.5f};
  e.resolution_base = 8;
  e.format = format;
  e.target_face_count = 1000;
  e.lod_face_counts = {1000, 500, 100};
  e.mesh_profile = MeshProfile::kRoblox;
  e.pivot = MeshPivot::kBottomCenter;
  if (format == MeshFormat::kCompact) {
    e.compact = CompactMeshOptions{.positions = CompactPositions::kQuantized16, .normals = true};
  }
  e.model = "demo";
  e.weights_digest = "ab12";
  e.server_version = "1.0 (abc)";
  e.computed_by_request_id = "first";
  return b;
}

MeshAnswer answer_of(MeshBody body) {
  MeshAnswer a;
  a.body = std::make_shared<const MeshBody>(std::move(body));
  a.request_id = "call-7";
  a.cache_status = CacheStatus::kCoalesced;
  a.timings = {.queue_ms = 1.5,
               .text_encoding_ms = 2,
               .prefill_ms = 3,
               .decode_ms = 400,
               .tpot_ms = 0.4,
               .mesh_ms = 50,
               .occupancy_ms = 30,
               .total_ms = 460};
  a.batch_bucket = 4;
  return a;
}

TEST(AnswerCodecTest, TheCachesEncodingReadsBackToTheSameBody) {
  const ProtoAnswerCodec codec;
  for (const MeshFormat format :
       {MeshFormat::kRaw, MeshFormat::kGlb, MeshFormat::kObj, MeshFormat::kCompact}) {
    SCOPED_TRACE(static_cast<int>(format));
    const MeshBody body = full_body(format);
    const std::optional<MeshBody> back = codec.decode(codec.encode(body));
    ASSERT_TRUE(back.has_value());
    MeshBody expected = body;
    // A level carries its arrays for RAW and its file otherwise, as the message does.
    for (WorkLevel& l : expected.lods) {
      if (format != MeshFormat::kRaw) l.vertices.clear(), l.indices.clear();
    }
    EXPECT_EQ(*back, expected);
  }
  // Unset stays unset: no bounds, no top_p, no pivot, no arrays.
  MeshBody plain;
  plain.format = MeshFormat::kGlb;
  plain.encoded = "glb";
  plain.effective.format = MeshFormat::kGlb;
  const std::optional<MeshBody> back = codec.decode(codec.encode(plain));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, plain);
}

TEST(AnswerCodecTest, MessageBytesAreTheMessagesOwn) {
  const ProtoAnswerCodec codec;
  for (const MeshFormat format : {MeshFormat::kRaw, MeshFormat::kGlb}) {
    MeshAnswer answer = answer_of(full_body(format));
    const int64_t body_bytes = static_cast<int64_t>(codec.encode(*answer.body).size());
    EXPECT_EQ(codec.body_bytes(*answer.body), body_bytes);
    EXPECT_EQ(codec.message_bytes(answer, body_bytes),
              static_cast<int64_t>(response_message(answer).ByteSizeLong()));
    // A cache hit's own fields: its id, HIT and its total time alone.
    answer.cache_status = CacheStatus::kHit;
    answer.timings = {.total_ms = 0.25};
    answer.batch_bucket = 0;
    answer.request_id = std::string(128, 'x');
    EXPECT_EQ(codec.message_bytes(answer, body_bytes),
              static_cast<int64_t>(response_message(answer).ByteSizeLong()));
  }
}

TEST(AnswerCodecTest, TheCallsOwnFieldsAreStampedOnTheSharedBody) {
  const MeshAnswer answer = answer_of(full_body(MeshFormat::kGlb));
  const v1::GenerateMeshResponse m = response_message(answer);
  EXPECT_EQ(m.request_id(), "call-7");
  EXPECT_EQ(m.cache_status(), v1::CACHE_STATUS_COALESCED);
  EXPECT_EQ(m.batch_bucket(), 4u);
  EXPECT_DOUBLE_EQ(m.timings().tpot_ms(), 0.4);
  EXPECT_DOUBLE_EQ(m.timings().total_ms(), 460);
  EXPECT_EQ(m.effective().computed_by_request_id(), "first");
  EXPECT_EQ(m.format(), v1::MESH_FORMAT_GLB);
  EXPECT_EQ(m.up_axis(), v1::UP_AXIS_Y);
  EXPECT_FLOAT_EQ(m.bounds().size().x(), 5);
  ASSERT_EQ(m.lods_size(), 2);
  EXPECT_EQ(m.lods(1).encoded(), "level of 100");
  EXPECT_FALSE(m.lods(1).has_raw());
  EXPECT_EQ(m.raw().indices_size(), 9);  // return_raw_mesh: the arrays beside the file
  EXPECT_EQ(cache_status_of(m.cache_status()), CacheStatus::kCoalesced);
  EXPECT_FALSE(cache_status_of(v1::CACHE_STATUS_UNSPECIFIED));
}

TEST(AnswerCodecTest, BytesThatAreNoAnswerAreRefused) {
  const ProtoAnswerCodec codec;
  EXPECT_FALSE(codec.decode("\xff\xff\xff").has_value());  // not a message
  v1::GenerateMeshResponse unknown_format;
  unknown_format.set_format(static_cast<v1::MeshFormat>(9));
  unknown_format.mutable_effective()->set_format(v1::MESH_FORMAT_GLB);
  unknown_format.mutable_effective()->set_mesh_profile(v1::MESH_PROFILE_NONE);
  EXPECT_FALSE(codec.decode(unknown_format.SerializeAsString()).has_value());
  v1::GenerateMeshResponse no_effective;  // a format, but no effective profile
  no_effective.set_format(v1::MESH_FORMAT_GLB);
  EXPECT_FALSE(codec.decode(no_effective.SerializeAsString()).has_value());
}

TEST(MeshAnswerTest, MeshBytesCountTheFileOrTheArraysOfEveryLevel) {
  const MeshBody raw = full_body(MeshFormat::kRaw);
  EXPECT_EQ(mesh_bytes(raw), (9 * 4 + 9 * 4) + 2 * (9 * 4 + 3 * 4));
  MeshBody glb = full_body(MeshFormat::kGlb);
  EXPECT_EQ(mesh_bytes(glb), static_cast<int64_t>(glb.encoded.size() + 12 + 12));
  EXPECT_STREQ(cache_status_name(CacheStatus::kHit), "hit");
  EXPECT_STREQ(cache_status_name(CacheStatus::kMiss), "miss");
  EXPECT_STREQ(cache_status_name(CacheStatus::kCoalesced), "coalesced");
  EXPECT_STREQ(cache_status_name(CacheStatus::kBypass), "bypass");
}

}  // namespace
}  // namespace cube3d
