// Grid to finished mesh: marching cubes, then (optionally) the official post-processing
// (clean-up, floater removal, simplification to max(10000, 10% of faces)), then world
// coordinates. What the engine and the command-line tools call.
//
// Every step runs in parallel on the mesh layer's one pool of threads (src/mesh/parallel.h),
// shared by the meshes in progress, and the result is byte-identical for any thread count.
//
// A budget bounds the work: a surface of more than max_marching_cubes_faces marching-cubes faces
// (a noisy field, such as a random-weight model's, has millions; the shapes Cube 3D makes have
// 50k-200k at resolution_base 8) is extracted again from the grid one level coarser (every other
// point), as often as it takes to fit, and the report says so (budget_warning). A grid that
// cannot be halved (not 2^r + 1 points a side) is decimated by the sloppy simplifier to the
// budget first instead.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cube3d/mesh/grid.h"
#include "cube3d/mesh/marching_cubes.h"
#include "cube3d/mesh/mesh.h"
#include "cube3d/mesh/mesh_cleanup.h"
#include "cube3d/mesh/mesh_simplify.h"

namespace cube3d {

struct MeshPipelineOptions {
  MarchingCubesOptions marching_cubes;
  // Threads of the mesh layer's pool for this mesh, the caller's included; 0: all cores, shared
  // with every other mesh in progress (the server's way).
  int threads = 0;
  // The budget (see above; core/constants.h says how its default was chosen); 0: none.
  std::size_t max_marching_cubes_faces = static_cast<std::size_t>(kDefaultMaxMarchingCubesFaces);
  // A grid of at least this many points is first meshed halved (an eighth of the work), which
  // predicts its surface's faces (about 4 times the half's): one far over the budget is then
  // seen at once instead of most of the way through the grid. The default takes resolution_base
  // 9 and above this way.
  std::size_t budget_prediction_points = std::size_t{1} << 26;
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
  bool operator==(const MeshPipelineOptions&) const = default;
};

struct MeshPipelineReport {
  std::size_t marching_cubes_faces = 0;  // of the surface used (the coarser one over budget)
  // The surface had more faces than max_marching_cubes_faces: it was extracted `coarsened`
  // levels coarser (0 when the grid could not be halved and the sloppy pass took it to the
  // budget instead: sloppy_budget_pass).
  bool over_budget = false;
  int coarsened = 0;
  bool sloppy_budget_pass = false;
  std::size_t budget_faces = 0;                    // the budget that applied (when over_budget)
  std::array<int64_t, 3> extracted_dims{0, 0, 0};  // of the grid the surface came from
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
  std::size_t cleanup_faces = 0;  // after the clean-up (marching_cubes_faces without one)
  double marching_cubes_ms = 0;
  double postprocess_ms = 0;  // clean-up, simplification and world coordinates
  double cleanup_ms = 0;      // of postprocess_ms
  double simplify_ms = 0;     // of postprocess_ms: every decimation pass
};

// An empty mesh when the field does not cross the level (see has_level_crossing).
Mesh grid_to_mesh(const GridView& grid, const MeshPipelineOptions& options = {},
                  MeshPipelineReport* report = nullptr);

// Levels of detail of a finished mesh, for a request's lod_face_counts: level i + 1 is level i
// simplified to targets[i] (`finest` is level 0), so every level comes from the same surface and
// each has at most the faces of the one before (a target at or above the faces a level has leaves
// it as it is). `options` are the simplification's (target_faces is replaced by each target);
// `threads` as MeshPipelineOptions::threads. reports (when given) gets one SimplifyReport a level.
std::vector<Mesh> levels_of_detail(const Mesh& finest, const std::vector<std::size_t>& targets,
                                   const SimplifyOptions& options = {}, int threads = 0,
                                   std::vector<SimplifyReport>* reports = nullptr);

// What the budget did, for a warning in the answer (empty when the surface was within it):
// "the surface had more than 600000 marching-cubes faces (max_marching_cubes_faces 600000):
// extracted at resolution_base 6 instead of 8 (200435 faces)".
std::string budget_warning(const MeshPipelineReport& report, const std::array<int64_t, 3>& dims);

}  // namespace cube3d
