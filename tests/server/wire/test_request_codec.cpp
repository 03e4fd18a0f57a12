// The doors' codec (wire/request_codec.h): every field of a GenerateMeshRequest reaches the
// ClientRequest as sent: an unset optional stays unset (so that validation applies the server's
// defaults), a set one keeps its value even when it is zero, and an enum keeps its number, one
// the API does not define included (validation names it).
#include "cube3d/server/wire/request_codec.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <vector>

namespace cube3d {
namespace {

TEST(RequestCodecTest, AnEmptyMessageLeavesEveryOptionalUnset) {
  const ClientRequest r = client_request_of(v1::GenerateMeshRequest());
  EXPECT_EQ(r, ClientRequest{});
  EXPECT_FALSE(r.guidance_scale || r.top_p || r.seed || r.bounding_box || r.resolution_base ||
               r.format || r.target_face_count || r.mesh_profile || r.compact);
}

TEST(RequestCodecTest, EveryFieldIsCopiedAsSent) {
  v1::GenerateMeshRequest m;
  m.set_request_id("job-1");
  m.set_prompt("a wooden chair");
  m.set_guidance_scale(4.5f);
  m.set_top_p(0.25f);
  m.set_seed(uint64_t{1} << 40);
  m.mutable_bounding_box()->set_x(1);
  m.mutable_bounding_box()->set_y(2);
  m.mutable_bounding_box()->set_z(3);
  m.set_resolution_base(6);
  m.set_format(v1::MESH_FORMAT_COMPACT);
  m.add_lod_face_counts(500);
  m.add_lod_face_counts(100);
  m.set_return_shape_tokens(true);
  m.set_return_raw_mesh(true);
  m.set_mesh_profile(v1::MESH_PROFILE_ROBLOX);
  m.set_bypass_cache(true);
  m.set_priority(v1::PRIORITY_BATCH);
  m.mutable_compact()->set_positions(v1::COMPACT_POSITIONS_QUANTIZED16);
  m.mutable_compact()->set_normals(true);
  m.set_pivot(v1::PIVOT_BOTTOM_CENTER);

  const ClientRequest r = client_request_of(m);
  EXPECT_EQ(r.request_id, "job-1");
  EXPECT_EQ(r.prompt, "a wooden chair");
  EXPECT_EQ(r.guidance_scale, 4.5f);
  EXPECT_EQ(r.top_p, 0.25f);
  EXPECT_EQ(r.seed, uint64_t{1} << 40);
  EXPECT_EQ(r.bounding_box, (std::array<float, 3>{1, 2, 3}));
  EXPECT_EQ(r.resolution_base, 6);
  EXPECT_EQ(r.format, v1::MESH_FORMAT_COMPACT);
  EXPECT_FALSE(r.target_face_count);
  EXPECT_EQ(r.lod_face_counts, (std::vector<uint32_t>{500, 100}));
  EXPECT_TRUE(r.return_shape_tokens);
  EXPECT_TRUE(r.return_raw_mesh);
  EXPECT_EQ(r.mesh_profile, v1::MESH_PROFILE_ROBLOX);
  EXPECT_TRUE(r.bypass_cache);
  EXPECT_EQ(r.priority, v1::PRIORITY_BATCH);
  ASSERT_TRUE(r.compact);
  EXPECT_EQ(r.compact->positions, v1::COMPACT_POSITIONS_QUANTIZED16);
  EXPECT_TRUE(r.compact->normals);
  EXPECT_EQ(r.pivot, v1::PIVOT_BOTTOM_CENTER);

  m.clear_lod_face_counts();
  m.set_target_face_count(800);
  EXPECT_EQ(client_request_of(m).target_face_count, 800u);
}

// Zero is a value a client may set (a guidance of 0 turns guidance off): set stays set.
TEST(RequestCodecTest, ASetZeroIsNotUnset) {
  v1::GenerateMeshRequest m;
  m.set_guidance_scale(0);
  m.set_seed(0);
  m.set_resolution_base(0);
  m.set_format(v1::MESH_FORMAT_UNSPECIFIED);
  m.set_target_face_count(0);
  m.set_mesh_profile(v1::MESH_PROFILE_UNSPECIFIED);
  m.mutable_compact();
  m.mutable_bounding_box();
  const ClientRequest r = client_request_of(m);
  EXPECT_EQ(r.guidance_scale, 0.0f);
  EXPECT_EQ(r.seed, 0u);
  EXPECT_EQ(r.resolution_base, 0);
  EXPECT_EQ(r.format, 0);
  EXPECT_EQ(r.target_face_count, 0u);
  EXPECT_EQ(r.mesh_profile, 0);
  EXPECT_EQ(r.compact, ClientRequest::Compact{});
  EXPECT_EQ(r.bounding_box, (std::array<float, 3>{0, 0, 0}));
}

// A message read off the wire may hold numbers its enums do not define; they reach validation.
TEST(RequestCodecTest, UnknownEnumNumbersAreKept) {
  v1::GenerateMeshRequest m;
  m.set_format(static_cast<v1::MeshFormat>(42));
  m.set_mesh_profile(static_cast<v1::MeshProfile>(-3));
  m.set_priority(static_cast<v1::Priority>(7));
  m.set_pivot(static_cast<v1::Pivot>(9));
  m.mutable_compact()->set_positions(static_cast<v1::CompactPositions>(5));
  const ClientRequest r = client_request_of(m);
  EXPECT_EQ(r.format, 42);
  EXPECT_EQ(r.mesh_profile, -3);
  EXPECT_EQ(r.priority, 7);
  EXPECT_EQ(r.pivot, 9);
  EXPECT_EQ(r.compact->positions, 5);
}

}  // namespace
}  // namespace cube3d
