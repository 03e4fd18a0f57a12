#include "cube3d/mesh/mesh_pipeline.h"

namespace cube3d {

Mesh grid_to_mesh(const GridView& grid, const MeshPipelineOptions& options,
                  MeshPipelineReport* report) {
  MeshPipelineReport local;
  Mesh mesh = marching_cubes(grid, options.marching_cubes);
  local.marching_cubes_faces = mesh.face_count();
  if (options.postprocess) {
    local.cleanup = cleanup_mesh(mesh, options.cleanup);
    if (options.simplify) {
      local.simplification = simplify_mesh(mesh, options.simplification);
    }
  }
  if (options.world_coordinates) {
    index_to_world(mesh, grid.dims, options.bound_min, options.bound_max);
  }
  if (report != nullptr) {
    *report = local;
  }
  return mesh;
}

}  // namespace cube3d
