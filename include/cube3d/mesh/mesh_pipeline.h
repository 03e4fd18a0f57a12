// Grid to finished mesh: marching cubes, then (optionally) the official post-processing
// (clean-up, floater removal, simplification to max(10000, 10% of faces)), then world
// coordinates. What the engine and the command-line tools call.
#pragma once

#include "cube3d/mesh/grid.h"
#include "cube3d/mesh/marching_cubes.h"
#include "cube3d/mesh/mesh.h"
#include "cube3d/mesh/mesh_cleanup.h"
#include "cube3d/mesh/mesh_simplify.h"

namespace cube3d {

struct MeshPipelineOptions {
  MarchingCubesOptions marching_cubes;
  bool postprocess = true;  // clean-up and simplification, as the official default
  CleanupOptions cleanup;
  bool simplify = true;  // only when postprocess is on
  SimplifyOptions simplification;
  bool world_coordinates = true;  // false keeps grid index units
  float bound_min = static_cast<float>(kGridBoundMin);
  float bound_max = static_cast<float>(kGridBoundMax);
};

struct MeshPipelineReport {
  std::size_t marching_cubes_faces = 0;
  CleanupReport cleanup;
  SimplifyReport simplification;
  double marching_cubes_ms = 0;
  double postprocess_ms = 0;  // clean-up, simplification and world coordinates
};

// An empty mesh when the field does not cross the level (see has_level_crossing).
Mesh grid_to_mesh(const GridView& grid, const MeshPipelineOptions& options = {},
                  MeshPipelineReport* report = nullptr);

}  // namespace cube3d
