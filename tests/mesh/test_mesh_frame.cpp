#include "cube3d/mesh/mesh_frame.h"

#include <gtest/gtest.h>

namespace cube3d {
namespace test_mesh_frame {

TEST(MeshFrame, PivotNamesRoundTrip) {
  for (const MeshPivot p :
       {MeshPivot::kModelOrigin, MeshPivot::kCenter, MeshPivot::kBottomCenter}) {
    EXPECT_EQ(mesh_pivot_from_name(to_string(p)), p);
  }
  EXPECT_EQ(to_string(MeshPivot::kBottomCenter), "bottom_center");
  EXPECT_EQ(mesh_pivot_from_name("centre"), std::nullopt);
}

TEST(MeshFrame, PivotOffsetPutsThePivotOnTheOrigin) {
  const std::array<float, 3> lo{-0.5f, -0.25f, 0.0f}, hi{1.5f, 0.75f, 2.0f};
  EXPECT_EQ(pivot_offset(MeshPivot::kModelOrigin, lo, hi), (std::array<float, 3>{0, 0, 0}));
  EXPECT_EQ(pivot_offset(MeshPivot::kCenter, lo, hi), (std::array<float, 3>{-0.5f, -0.25f, -1.0f}));
  EXPECT_EQ(pivot_offset(MeshPivot::kBottomCenter, lo, hi),
            (std::array<float, 3>{-0.5f, 0.25f, -1.0f}));
}

}  // namespace test_mesh_frame
}  // namespace cube3d
