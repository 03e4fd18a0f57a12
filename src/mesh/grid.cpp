#include "cube3d/mesh/grid.h"

#include <string>

#include "cube3d/core/error.h"

namespace cube3d {

void validate_grid(const GridView& grid) {
  int64_t points = 1;
  for (int axis = 0; axis < 3; ++axis) {
    if (grid.dims[axis] < 2) {
      throw invalid_argument("grid: dimension " + std::to_string(axis) + " has " +
                             std::to_string(grid.dims[axis]) +
                             " points; marching cubes needs at least 2 per axis");
    }
    if (points > (int64_t{1} << 40) / grid.dims[axis]) {
      throw invalid_argument("grid: too many points");
    }
    points *= grid.dims[axis];
  }
  if (static_cast<int64_t>(grid.values.size()) != points) {
    throw invalid_argument("grid: " + std::to_string(grid.values.size()) +
                           " values for dimensions " + std::to_string(grid.dims[0]) + " x " +
                           std::to_string(grid.dims[1]) + " x " + std::to_string(grid.dims[2]));
  }
}

void validate_resolution_base(int64_t resolution_base, int64_t max) {
  if (resolution_base < 1 || resolution_base > max) {
    throw invalid_argument("resolution_base " + std::to_string(resolution_base) +
                           " is outside [1, " + std::to_string(max) +
                           "]: memory and time grow eightfold per step");
  }
}

int64_t grid_points_per_axis(int64_t resolution_base) {
  validate_resolution_base(resolution_base, kMaxResolutionBase);
  return grid_points_per_axis_unchecked(resolution_base);
}

void index_to_world(Mesh& mesh, const std::array<int64_t, 3>& dims, float bound_min,
                    float bound_max) {
  double scale[3];
  for (int axis = 0; axis < 3; ++axis) {
    if (dims[axis] < 2) {
      throw invalid_argument("index_to_world: dimension " + std::to_string(axis) + " has " +
                             std::to_string(dims[axis]) + " points; need at least 2");
    }
    scale[axis] =
        (static_cast<double>(bound_max) - bound_min) / static_cast<double>(dims[axis] - 1);
  }
  for (std::size_t n = 0; n < mesh.vertices.size(); ++n) {
    mesh.vertices[n] = static_cast<float>(bound_min + mesh.vertices[n] * scale[n % 3]);
  }
}

}  // namespace cube3d
