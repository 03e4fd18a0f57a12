// review_levels: levels of detail the face limit or the simplifier made identical are dropped with
// a warning naming the level, its target and what it got, never sent as copies (issue 58: Roblox's
// [50000, 30000, 20000] came back as three identical levels, [8000, 2000, 500, 100] as two equal
// 510-face ones, and a target of 4 gave 506 faces without a word).
#include "cube3d/mesh/level_review.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace cube3d {
namespace test_level_review {

bool any_has(const std::vector<std::string>& warnings, const std::string& needle) {
  for (const std::string& w : warnings) {
    if (w.find(needle) != std::string::npos) return true;
  }
  return false;
}

TEST(LevelReview, LevelsClampedToTheSameAreDropped) {
  // The Roblox profile's 20,000-face limit, a surface of 10,668 faces.
  LevelTargets t;
  t.finest_target = 50'000;
  t.finest_faces = 10'668;
  t.asked = {30'000, 20'000};
  t.faces = {10'668, 10'668};
  t.max_faces = 20'000;
  t.limit_owner = "mesh_profile MESH_PROFILE_ROBLOX allows";
  const LevelReview r = review_levels(t);
  EXPECT_TRUE(r.kept.empty());
  EXPECT_TRUE(any_has(r.warnings,
                      "lod_face_counts[1] 30000 clamped to 20000 (mesh_profile "
                      "MESH_PROFILE_ROBLOX allows at most 20000 triangles)"));
  EXPECT_TRUE(any_has(r.warnings,
                      "level 1 (lod_face_counts[1] 30000): 10668 faces, no fewer "
                      "than level 0's 10668: dropped"));
  EXPECT_TRUE(any_has(r.warnings,
                      "level 2 (lod_face_counts[2] 20000): 10668 faces, no fewer "
                      "than level 0's 10668: dropped"));
}

TEST(LevelReview, ATargetTheSimplifierCannotReachIsDroppedNotCopied) {
  LevelTargets t;
  t.finest_target = 8'000;
  t.finest_faces = 7'990;
  t.asked = {2'000, 500, 100};
  t.faces = {1'996, 510, 510};
  const LevelReview r = review_levels(t);
  EXPECT_EQ(r.kept, (std::vector<size_t>{0, 1}));  // 510 is within 5 % of 500: no warning
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_TRUE(any_has(r.warnings,
                      "level 3 (lod_face_counts[3] 100): 510 faces, no fewer than "
                      "level 2's 510: dropped, not sent as a copy (the simplifier "
                      "can go no lower on this surface)"));
}

TEST(LevelReview, ATargetNotMetIsSaid) {
  LevelTargets t;
  t.finest_target = 4;
  t.finest_faces = 506;
  EXPECT_TRUE(any_has(review_levels(t).warnings,
                      "the mesh (target_face_count 4): 506 faces, more than its target: the "
                      "simplifier stops where going further would open the surface"));
  // A further level kept above its target, and level 0 named as lod_face_counts[0].
  t.finest_target = 300;
  t.asked = {100};
  t.faces = {200};
  const LevelReview r = review_levels(t);
  EXPECT_EQ(r.kept, (std::vector<size_t>{0}));
  EXPECT_TRUE(any_has(r.warnings, "level 0 (lod_face_counts[0] 300): 506 faces, more than"));
  EXPECT_TRUE(any_has(r.warnings, "level 1 (lod_face_counts[1] 100): 200 faces, more than"));
  // Without simplification on the server, that is the reason given.
  t.simplified = false;
  EXPECT_TRUE(any_has(review_levels(t).warnings, "simplification is off on this server"));
}

TEST(LevelReview, LevelsThatMeetTheirTargetsSayNothing) {
  LevelTargets t;
  t.finest_target = 20'000;
  t.finest_faces = 19'990;
  t.asked = {5'000, 1'000};
  t.faces = {4'998, 1'000};
  const LevelReview r = review_levels(t);
  EXPECT_EQ(r.kept, (std::vector<size_t>{0, 1}));
  EXPECT_TRUE(r.warnings.empty());
  // No target at all (the server's default): nothing to meet.
  LevelTargets none;
  none.finest_faces = 50'000;
  EXPECT_TRUE(review_levels(none).warnings.empty());
}

}  // namespace test_level_review
}  // namespace cube3d
