#include "cube3d/mesh/mesh_profile.h"

#include <gtest/gtest.h>

namespace cube3d {
namespace test_mesh_profile {

TEST(MeshProfile, NamesRoundTrip) {
  for (const MeshProfile p : {MeshProfile::kNone, MeshProfile::kRoblox}) {
    EXPECT_EQ(mesh_profile_from_name(to_string(p)), p);
  }
  EXPECT_EQ(to_string(MeshProfile::kNone), "none");
  EXPECT_EQ(to_string(MeshProfile::kRoblox), "roblox");
  EXPECT_EQ(mesh_profile_from_name("Roblox"), std::nullopt);  // names are lower-case
  EXPECT_EQ(mesh_profile_from_name(""), std::nullopt);
  EXPECT_EQ(mesh_profile_from_name("bogus"), std::nullopt);
  EXPECT_EQ(to_string(static_cast<MeshProfile>(99)), "unknown");
}

TEST(MeshProfile, LimitsOfEachProfile) {
  const MeshLimits none = mesh_limits(MeshProfile::kNone);
  EXPECT_EQ(none, MeshLimits{});
  EXPECT_FALSE(none.max_faces);
  EXPECT_FALSE(none.max_vertices);
  EXPECT_FALSE(none.max_file_bytes);

  // EditableMesh: 20,000 triangles and 60,000 vertices; Open Cloud: a 20 MB file.
  const MeshLimits roblox = mesh_limits(MeshProfile::kRoblox);
  EXPECT_EQ(roblox.max_faces, 20'000);
  EXPECT_EQ(roblox.max_vertices, 60'000);
  EXPECT_EQ(roblox.max_file_bytes, 20'000'000);
  EXPECT_NE(roblox, none);
  EXPECT_EQ(mesh_limits(static_cast<MeshProfile>(99)), MeshLimits{});
}

}  // namespace test_mesh_profile
}  // namespace cube3d
