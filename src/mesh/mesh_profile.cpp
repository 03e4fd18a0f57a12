#include "cube3d/mesh/mesh_profile.h"

#include "cube3d/core/enum_table.h"

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

namespace {

constexpr EnumTable<MeshProfile, std::string_view, 2> kMeshProfileNames = {
    {{MeshProfile::kNone, "none"}, {MeshProfile::kRoblox, "roblox"}}};

}  // namespace

std::string_view to_string(MeshProfile profile) {
  return lookup(kMeshProfileNames, profile).value_or("unknown");
}

std::optional<MeshProfile> mesh_profile_from_name(std::string_view name) {
  return reverse_lookup(kMeshProfileNames, name);
}

}  // namespace cube3d
