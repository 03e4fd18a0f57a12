#include "cube3d/mesh/mesh_format.h"

#include <gtest/gtest.h>

namespace cube3d {
namespace test_mesh_format {

TEST(MeshFormat, NamesRoundTrip) {
  for (const MeshFormat f : {MeshFormat::kRaw, MeshFormat::kObj, MeshFormat::kPly, MeshFormat::kGlb,
                             MeshFormat::kCompact}) {
    EXPECT_EQ(mesh_format_from_name(to_string(f)), f);
  }
  EXPECT_EQ(to_string(MeshFormat::kGlb), "glb");
  EXPECT_EQ(to_string(MeshFormat::kCompact), "compact");
  EXPECT_EQ(mesh_format_from_name("GLB"), std::nullopt);  // names are lower-case
  EXPECT_EQ(mesh_format_from_name(""), std::nullopt);
  EXPECT_EQ(to_string(static_cast<MeshFormat>(99)), "unknown");
}

}  // namespace test_mesh_format
}  // namespace cube3d
