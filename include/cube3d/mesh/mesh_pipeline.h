// Grid to finished mesh: marching cubes, then (optionally) the official post-processing
// (clean-up, floater removal, simplification to max(10000, 10% of faces)), then world
// coordinates. What the engine and the command-line tools call.
#pragma once

#include <cstddef>
#include <optional>

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
  // A hard face limit (a mesh profile's): the simplification target becomes min(target,
  // max_faces), where target is simplification.target_faces or the default; a mesh over it is
  // decimated even when postprocess or simplify is off (to max_faces, without clean-up); and
  // when meshopt_simplify stops above it, a second pass with the sloppy simplifier and no error
  // bound takes the mesh under it. Unset: no limit. At least 1.
  std::optional<std::size_t> max_faces;
  float bound_min = static_cast<float>(kGridBoundMin);
  float bound_max = static_cast<float>(kGridBoundMax);
};

struct MeshPipelineReport {
  std::size_t marching_cubes_faces = 0;
  CleanupReport cleanup;
  SimplifyReport simplification;  // target_faces: the target used, after max_faces
  // max_faces lowered the target below the options' (or decimated a mesh whose simplification
  // was off): the mesh has fewer faces than without the limit.
  bool capped = false;
  // The target before max_faces: simplification.target_faces or the default; 0 when
  // simplification was off.
  std::size_t uncapped_target_faces = 0;
  // meshopt_simplify stopped at this many faces, over max_faces, so the sloppy pass ran (0: it
  // did not).
  std::size_t faces_before_sloppy_pass = 0;
  double marching_cubes_ms = 0;
  double postprocess_ms = 0;  // clean-up, simplification and world coordinates
};

// An empty mesh when the field does not cross the level (see has_level_crossing).
Mesh grid_to_mesh(const GridView& grid, const MeshPipelineOptions& options = {},
                  MeshPipelineReport* report = nullptr);

}  // namespace cube3d
