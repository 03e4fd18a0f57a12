#include "cube3d/mesh/mesh_pipeline.h"

#include "cube3d/core/clock.h"

namespace cube3d {

Mesh grid_to_mesh(const GridView& grid, const MeshPipelineOptions& options,
                  MeshPipelineReport* report) {
  MeshPipelineReport local;
  const auto start = SteadyClock::now();
  Mesh mesh = marching_cubes(grid, options.marching_cubes);
  local.marching_cubes_faces = mesh.face_count();
  const auto marching_cubes_done = SteadyClock::now();
  local.marching_cubes_ms = ms_between(start, marching_cubes_done);
  if (options.postprocess) {
    local.cleanup = cleanup_mesh(mesh, options.cleanup);
    if (options.simplify) {
      local.simplification = simplify_mesh(mesh, options.simplification);
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
