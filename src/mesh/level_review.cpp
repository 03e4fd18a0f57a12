#include "cube3d/mesh/level_review.h"

#include <algorithm>

namespace cube3d {
namespace {

std::string str(std::size_t n) { return std::to_string(n); }

}  // namespace

LevelReview review_levels(const LevelTargets& levels) {
  LevelReview review;
  const bool has_levels = !levels.asked.empty();
  const auto used = [&](std::size_t asked) {
    return levels.max_faces ? std::min(asked, *levels.max_faces) : asked;
  };
  const auto limit = [&] {
    return "(" + levels.limit_owner + " at most " + str(levels.max_faces.value_or(0)) +
           " triangles)";
  };
  const auto over_target = [&](std::size_t faces, std::size_t target) {
    return static_cast<double>(faces) > static_cast<double>(target) * (1.0 + levels.tolerance);
  };
  const std::string why_over =
      levels.simplified
          ? "more than its target: the simplifier stops where going further would open the "
            "surface"
          : "more than its target: simplification is off on this server (mesh.simplify)";

  // Level 0 (its clamp is said by the face limit's own warning).
  if (levels.finest_target && over_target(levels.finest_faces, used(*levels.finest_target))) {
    const std::string name = has_levels ? "level 0 (lod_face_counts[0] " : "(target_face_count ";
    review.warnings.push_back((has_levels ? name : std::string("the mesh ") + name) +
                              str(*levels.finest_target) + "): " + str(levels.finest_faces) +
                              " faces, " + why_over);
  }
  std::size_t previous_faces = levels.finest_faces;
  std::size_t previous_level = 0;
  for (std::size_t i = 0; i < levels.asked.size(); ++i) {
    const std::size_t level = i + 1;
    const std::size_t asked = levels.asked[i];
    const std::size_t target = used(asked);
    const std::size_t faces = levels.faces.at(i);
    const std::string name =
        "level " + str(level) + " (lod_face_counts[" + str(level) + "] " + str(asked) + ")";
    if (target < asked) {
      review.warnings.push_back("lod_face_counts[" + str(level) + "] " + str(asked) +
                                " clamped to " + str(target) + " " + limit());
    }
    if (faces >= previous_faces) {
      review.warnings.push_back(
          name + ": " + str(faces) + " faces, no fewer than level " + str(previous_level) + "'s " +
          str(previous_faces) + ": dropped, not sent as a copy (" +
          (target >= previous_faces ? "its target is no lower than that level's faces"
                                    : "the simplifier can go no lower on this surface") +
          ")");
      continue;
    }
    if (over_target(faces, target)) {
      review.warnings.push_back(name + ": " + str(faces) + " faces, " + why_over);
    }
    review.kept.push_back(i);
    previous_faces = faces;
    previous_level = level;
  }
  return review;
}

}  // namespace cube3d
