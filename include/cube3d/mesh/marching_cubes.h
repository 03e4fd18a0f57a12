// Marching cubes on the CPU: a float grid (positive = inside) to a shared-vertex triangle mesh in
// grid index units, with normals pointing out of the solid.
//
// Guarantees
// - Every grid edge whose end points lie on different sides of the level ("inside" means
//   value > level) gives exactly one vertex, at t = (level - v0) / (v1 - v0) from its lower end;
//   these vertices come first, in grid order. A few cell configurations (saddles, where a surface
//   loop cannot be triangulated from edge vertices alone without gluing neighbouring cells) add
//   one vertex at the mean of the loop's vertices; those follow the edge vertices.
// - The ambiguous faces of a cell are decided by the asymptotic decider on the face's four
//   values only, so the two cells that share a face agree and the surface is watertight: every
//   edge is shared by exactly two faces with opposite directions, except on the grid border.
// - The output does not depend on the number of threads (byte-identical arrays).
#pragma once

#include "cube3d/mesh/grid.h"
#include "cube3d/mesh/mesh.h"

namespace cube3d {

struct MarchingCubesOptions {
  float level = 0.0f;
  int threads = 0;  // 0: std::thread::hardware_concurrency()
};

// Throws invalid_argument for a malformed grid or a NaN value. Infinite values are allowed.
Mesh marching_cubes(const GridView& grid, const MarchingCubesOptions& options = {});

// Whether the surface at `level` exists: some value is above the level and some is not. When it
// does not (a model that predicts all-outside at 0), the caller picks another level or reports
// an empty shape.
bool has_level_crossing(const GridView& grid, float level);

}  // namespace cube3d
