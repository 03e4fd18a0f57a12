// The frame a mesh is answered in: +y up (the model's own frame, glTF's and Roblox's), and an
// origin a request chooses (its pivot), so that a caller can place and scale a mesh exactly from
// the answer's bounds (docs/mesh-encoding.md, "The frame"). One enum for the scheduler's request,
// the mesh stage and the batch tool's output names (the wire enum, v1::Pivot, is mapped to it once,
// at the service boundary).
#pragma once

#include <array>
#include <optional>
#include <string_view>

namespace cube3d {

enum class MeshPivot {
  kModelOrigin,   // the model's coordinates as they are
  kCenter,        // the bounding box's centre at the origin
  kBottomCenter,  // the centre of the box's bottom face (min y) at the origin
};

// "model_origin", "center", "bottom_center".
std::string_view to_string(MeshPivot pivot);
std::optional<MeshPivot> mesh_pivot_from_name(std::string_view name);

// What to add to every position so that `pivot` of the box [min, max] lands on the origin
// (zeros for kModelOrigin).
std::array<float, 3> pivot_offset(MeshPivot pivot, const std::array<float, 3>& min,
                                  const std::array<float, 3>& max);

}  // namespace cube3d
