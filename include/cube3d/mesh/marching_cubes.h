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

#include <cstddef>

#include "cube3d/mesh/grid.h"
#include "cube3d/mesh/mesh.h"

namespace cube3d {

struct MarchingCubesOptions {
  float level = 0.0f;
  // Threads of the mesh layer's shared pool; 0: the caller's (all cores unless the caller runs
  // inside a smaller arena, as grid_to_mesh with MeshPipelineOptions::threads does).
  int threads = 0;
  // A face budget (0: none): the work stops as soon as the surface has more faces, which costs
  // about the share of the grid done by then.
  std::size_t max_faces = 0;
  bool operator==(const MarchingCubesOptions&) const = default;
};

// Throws invalid_argument for a malformed grid or a NaN value. Infinite values are allowed.
// Over options.max_faces: an empty mesh with *over_limit = true, or resource_exhausted naming
// the limit when over_limit is null (then only the part of the grid seen before the stop was
// checked for NaN).
Mesh marching_cubes(const GridView& grid, const MarchingCubesOptions& options = {},
                    bool* over_limit = nullptr);

// Whether the surface at `level` exists: some value is above the level and some is not. When it
// does not (a model that predicts all-outside at 0), the caller picks another level or reports
// an empty shape.
bool has_level_crossing(const GridView& grid, float level);

}  // namespace cube3d
