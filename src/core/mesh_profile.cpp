#include "cube3d/core/mesh_profile.h"

namespace cube3d {

MeshLimits mesh_limits(MeshProfile profile) {
  switch (profile) {
    case MeshProfile::kNone:
      return {};
    case MeshProfile::kRoblox:
      return {kRobloxMaxTriangles, kRobloxMaxVertices, kRobloxMaxFileBytes};
  }
  return {};
}

std::string_view to_string(MeshProfile profile) {
  switch (profile) {
    case MeshProfile::kNone:
      return "none";
    case MeshProfile::kRoblox:
      return "roblox";
  }
  return "unknown";
}

std::optional<MeshProfile> mesh_profile_from_name(std::string_view name) {
  if (name == "none") return MeshProfile::kNone;
  if (name == "roblox") return MeshProfile::kRoblox;
  return std::nullopt;
}

}  // namespace cube3d
