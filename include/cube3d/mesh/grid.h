// The occupancy grid contract (docs/architecture.md): 2^r + 1 points per axis over [-1.05, 1.05]^3,
// x-major order, and the map from grid index coordinates to world coordinates.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "cube3d/core/constants.h"
#include "cube3d/mesh/mesh.h"

namespace cube3d {

// A read-only view of a dense float grid [nx][ny][nz], x-major:
// value(i, j, k) = values[(i * ny + j) * nz + k].
struct GridView {
  std::span<const float> values;
  std::array<int64_t, 3> dims{0, 0, 0};

  float at(int64_t i, int64_t j, int64_t k) const {
    return values[static_cast<std::size_t>((i * dims[1] + j) * dims[2] + k)];
  }
};

// Throws invalid_argument unless dims are all >= 2 and values holds exactly their product.
void validate_grid(const GridView& grid);

// Throws invalid_argument unless 1 <= r <= max: memory and time grow eightfold per step. The
// default is the server's default limit; callers with a configured limit pass it (at most
// kMaxResolutionBase).
void validate_resolution_base(int64_t resolution_base, int64_t max = kDefaultMaxResolutionBase);

// 2^r + 1: points per axis of the grid for resolution base r.
int64_t grid_points_per_axis(int64_t resolution_base);

// Maps vertices from grid index units to world coordinates, per axis:
// world = bound_min + index * (bound_max - bound_min) / (dims[axis] - 1).
// (The official Python divides by N instead of N - 1, which shrinks the shape; we do not.)
void index_to_world(Mesh& mesh, const std::array<int64_t, 3>& dims,
                    float bound_min = static_cast<float>(kGridBoundMin),
                    float bound_max = static_cast<float>(kGridBoundMax));

}  // namespace cube3d
