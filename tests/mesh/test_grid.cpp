#include <gtest/gtest.h>

#include "cube3d/core/error.h"
#include "cube3d/mesh/grid.h"

namespace cube3d {
namespace test_grid {

TEST(MeshGrid, ResolutionBaseRange) {
  EXPECT_NO_THROW(validate_resolution_base(1));
  EXPECT_NO_THROW(validate_resolution_base(9));
  EXPECT_NO_THROW(validate_resolution_base(10, 10));
  for (const int64_t bad : {int64_t{0}, int64_t{-3}, int64_t{10}, int64_t{12}}) {
    try {
      validate_resolution_base(bad);
      FAIL() << "resolution_base " << bad << " was accepted";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(error.what()).find("[1, 9]"), std::string::npos) << error.what();
    }
  }
  try {
    validate_resolution_base(12);
  } catch (const Error& error) {
    EXPECT_STREQ(error.what(),
                 "resolution_base 12 is outside [1, 9]: memory and time grow eightfold per step");
  }
}

TEST(MeshGrid, PointsPerAxis) {
  EXPECT_EQ(grid_points_per_axis(4), 17);
  EXPECT_EQ(grid_points_per_axis(8), 257);
}

TEST(MeshGrid, IndexToWorldUsesNMinusOne) {
  Mesh mesh;
  mesh.vertices = {0, 0, 0, 16, 8, 4, 8, 16, 2};
  index_to_world(mesh, {17, 17, 5});
  EXPECT_FLOAT_EQ(mesh.vertices[0], -1.05f);
  EXPECT_FLOAT_EQ(mesh.vertices[3], 1.05f);  // the last grid point is the upper bound
  EXPECT_NEAR(mesh.vertices[4], 0.0f, 1e-6f);
  EXPECT_FLOAT_EQ(mesh.vertices[5], 1.05f);  // per-axis N
  EXPECT_NEAR(mesh.vertices[8], 0.0f, 1e-6f);
}

TEST(MeshGrid, ValidateGrid) {
  const std::vector<float> values(24, 0.0f);
  EXPECT_NO_THROW(validate_grid(GridView{values, {2, 3, 4}}));
  EXPECT_THROW(validate_grid(GridView{values, {2, 3, 5}}), Error);
  EXPECT_THROW(validate_grid(GridView{values, {1, 4, 6}}), Error);
}

}  // namespace test_grid
}  // namespace cube3d
