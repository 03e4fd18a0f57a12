#include "cube3d/mesh/mesh_frame.h"

#include <utility>

namespace cube3d {
namespace {

constexpr std::pair<std::string_view, MeshPivot> kPivotNames[] = {
    {"model_origin", MeshPivot::kModelOrigin},
    {"center", MeshPivot::kCenter},
    {"bottom_center", MeshPivot::kBottomCenter},
};

// The middle of [lo, hi], in double so that it is exact to the float it rounds to.
float middle(float lo, float hi) {
  return static_cast<float>((static_cast<double>(lo) + static_cast<double>(hi)) / 2);
}

}  // namespace

std::string_view to_string(MeshPivot pivot) {
  for (const auto& [name, value] : kPivotNames) {
    if (value == pivot) return name;
  }
  return "unknown";
}

std::optional<MeshPivot> mesh_pivot_from_name(std::string_view name) {
  for (const auto& [text, value] : kPivotNames) {
    if (text == name) return value;
  }
  return std::nullopt;
}

std::array<float, 3> pivot_offset(MeshPivot pivot, const std::array<float, 3>& min,
                                  const std::array<float, 3>& max) {
  switch (pivot) {
    case MeshPivot::kModelOrigin:
      break;
    case MeshPivot::kCenter:
      return {-middle(min[0], max[0]), -middle(min[1], max[1]), -middle(min[2], max[2])};
    case MeshPivot::kBottomCenter:
      return {-middle(min[0], max[0]), -min[1], -middle(min[2], max[2])};
  }
  return {0, 0, 0};
}

}  // namespace cube3d
