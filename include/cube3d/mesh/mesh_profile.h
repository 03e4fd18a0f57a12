// The engine a mesh is made for, and that engine's limits: one enum for the server config, the
// scheduler's request and the mesh stage (the wire enum, v1::MeshProfile, is mapped to it once,
// at the service boundary).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace cube3d {

enum class MeshProfile {
  kNone,    // no limits beyond the request's own
  kRoblox,  // Roblox EditableMesh and Open Cloud
};

// What a profile allows; nullopt: no limit.
struct MeshLimits {
  std::optional<int64_t> max_faces;
  std::optional<int64_t> max_vertices;
  std::optional<int64_t> max_file_bytes;
  bool operator==(const MeshLimits&) const = default;
};

// EditableMesh takes at most 60,000 vertices and 20,000 triangles; Open Cloud takes a GLB of at
// most 20 MB.
inline constexpr int64_t kRobloxMaxTriangles = 20'000;
inline constexpr int64_t kRobloxMaxVertices = 60'000;
inline constexpr int64_t kRobloxMaxFileBytes = 20'000'000;

// Roblox has no size for a model unit: a caller scales the mesh to studs by the answer's bounds
// (scale = wanted studs / bounds.size on the axis it cares about; docs/mesh-encoding.md). This is
// the recommended default when a caller names no size (the Roblox kit's, clients/roblox/): a
// shape that fills the model's box (1.925 units on its longest side) is about 7.7 studs long,
// the size of a table or a car's length, well inside a MeshPart's 2048-stud limit.
inline constexpr double kRobloxStudsPerModelUnit = 4.0;

MeshLimits mesh_limits(MeshProfile profile);

// "none", "roblox" (the config's spelling).
std::string_view to_string(MeshProfile profile);
std::optional<MeshProfile> mesh_profile_from_name(std::string_view name);

}  // namespace cube3d
