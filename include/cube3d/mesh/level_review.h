// What became of a request's mesh targets after the profile's face limit and the simplifier, for
// the warnings of the answer: a level of detail is never a silent copy of the one before it, and a
// target that was not met is said, with what the level got.
//
// Levels: level 0 is the mesh itself (its target: target_face_count, or lod_face_counts[0] when
// levels were asked for), level i its i-th further level (lod_face_counts[i]). A further level
// that came out with no fewer faces than the level kept before it (its target clamped to the
// same value by the face limit, or below what the simplifier can reach on this surface, which
// stops where going further would open it) is dropped from the answer, with a warning: the
// answer's lods then has fewer entries than were asked for, each still naming its target. A level
// kept with more faces than its target, beyond the simplifier's tolerance (5 %), is kept with a
// warning. A target over the face limit is said to be clamped.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace cube3d {

struct LevelTargets {
  // Level 0's target as asked (nullopt: none, the server's default) and its face count.
  std::optional<std::size_t> finest_target;
  std::size_t finest_faces = 0;
  // The further levels' targets as asked (lod_face_counts[1..]) and their face counts, in order.
  std::vector<std::size_t> asked;
  std::vector<std::size_t> faces;
  // The face limit the targets were clamped to (a profile's), and who set it ("mesh_profile
  // MESH_PROFILE_ROBLOX allows"); nullopt: none.
  std::optional<std::size_t> max_faces;
  std::string limit_owner;
  // Whether the server simplifies at all (mesh.postprocess and mesh.simplify): without it a target
  // is not applied, which the warning says instead.
  bool simplified = true;
  double tolerance = 0.05;  // SimplifyOptions::tolerance
};

struct LevelReview {
  std::vector<std::size_t> kept;  // indices into LevelTargets::asked of the levels answered
  std::vector<std::string> warnings;
};

LevelReview review_levels(const LevelTargets& levels);

}  // namespace cube3d
