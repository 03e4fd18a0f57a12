#include "cube3d/mesh/mesh_pipeline.h"

#include <algorithm>

#include "cube3d/core/clock.h"
#include "cube3d/core/error.h"

namespace cube3d {

Mesh grid_to_mesh(const GridView& grid, const MeshPipelineOptions& options,
                  MeshPipelineReport* report) {
  if (options.max_faces && *options.max_faces < 1) {
    throw invalid_argument("mesh max_faces must be at least 1");
  }
  MeshPipelineReport local;
  const auto start = SteadyClock::now();
  Mesh mesh = marching_cubes(grid, options.marching_cubes);
  local.marching_cubes_faces = mesh.face_count();
  const auto marching_cubes_done = SteadyClock::now();
  local.marching_cubes_ms = ms_between(start, marching_cubes_done);
  if (options.postprocess) {
    local.cleanup = cleanup_mesh(mesh, options.cleanup);
  }
  const bool simplify = options.postprocess && options.simplify;
  if (!options.max_faces) {
    if (simplify) local.simplification = simplify_mesh(mesh, options.simplification);
  } else {
    const std::size_t max_faces = *options.max_faces;
    const std::size_t faces = mesh.face_count();
    SimplifyOptions simplification = options.simplification;
    if (simplify) {
      local.uncapped_target_faces = simplification.target_faces > 0 ? simplification.target_faces
                                                                    : default_target_faces(faces);
      simplification.target_faces = std::min(local.uncapped_target_faces, max_faces);
      local.capped = local.uncapped_target_faces > max_faces && faces > max_faces;
    } else {
      simplification.target_faces = max_faces;
      local.capped = faces > max_faces;
    }
    if (simplify || local.capped) local.simplification = simplify_mesh(mesh, simplification);
    if (mesh.face_count() > max_faces) {
      // meshopt_simplify keeps the topology, so it can stop above its target (and the config's
      // tolerance may accept that): the limit is hard, so the sloppy simplifier, which always
      // reaches its budget, finishes the job, with no error bound.
      local.faces_before_sloppy_pass = mesh.face_count();
      SimplifyOptions sloppy = simplification;
      sloppy.tolerance = 0;
      sloppy.allow_sloppy = true;
      sloppy.max_error = 1.0f;
      const SimplifyReport second = simplify_mesh(mesh, sloppy);
      SimplifyReport& first = local.simplification;
      first.faces_after = second.faces_after;
      first.error = std::max(first.error, second.error);
      first.sloppy = first.sloppy || second.sloppy;
      first.cancelled_faces += second.cancelled_faces;
      first.repair_rounds += second.repair_rounds;
      first.non_manifold_vertices = second.non_manifold_vertices;
    }
  }
  if (options.world_coordinates) {
    index_to_world(mesh, grid.dims, options.bound_min, options.bound_max);
  }
  local.postprocess_ms = ms_since(marching_cubes_done);
  if (report != nullptr) {
    *report = local;
  }
  return mesh;
}

}  // namespace cube3d
