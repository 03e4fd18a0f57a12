// Quadric-error simplification to a face budget (meshoptimizer), standing in for PyMeshLab's
// quadric edge collapse of the official post-processing.
#pragma once

#include <cstddef>

#include "cube3d/mesh/mesh.h"

namespace cube3d {

struct SimplifyOptions {
  // Faces to keep; 0 means default_target_faces(face count).
  std::size_t target_faces = 0;
  // Largest error allowed, relative to the mesh extent. PyMeshLab always reaches its target, so
  // the default puts no real bound (1 = the whole extent): collapses still go cheapest first, so
  // the error only grows as far as the budget needs.
  float max_error = 1.0f;
  // Keep the vertices on open borders (a surface cut by the grid boundary) in place, so that a
  // border does not shrink.
  bool lock_border = true;
  // meshopt_simplify only collapses edges that keep the topology, so it can stop above the
  // target (many border or non-manifold vertices). Within `tolerance` of the target is good
  // enough; beyond it, allow_sloppy retries with meshopt_simplifySloppy, which always reaches the
  // budget but clusters vertices and does not keep the mesh closed. Off by default: a closed
  // mesh a little over budget beats a leaky one on budget.
  double tolerance = 0.05;
  bool allow_sloppy = false;
  // Large meshes in parallel blocks first (simplify_mesh); false: one pass on one thread, for
  // comparisons (cube3d-mesh-bench --one-pass).
  bool blocks = true;
  // Rounds of protect-and-redo of the joined pass for what it glued, before the rest is split
  // (simplify_mesh); 0 splits at once: the budget's cheaper path (mesh_pipeline.h), where a noisy
  // surface would otherwise take round after round.
  int repair_rounds = 1;
  bool operator==(const SimplifyOptions&) const = default;
};

struct SimplifyReport {
  std::size_t faces_before = 0;
  std::size_t faces_after = 0;
  std::size_t target_faces = 0;
  float error = 0.0f;  // relative to the mesh extent, as meshoptimizer reports it
  bool sloppy = false;
  std::size_t cancelled_faces = 0;        // folded face pairs removed after the collapses
  int repair_rounds = 0;                  // reruns with glued spots protected
  std::size_t split_vertices = 0;         // vertices added where glue was split instead
  std::size_t non_manifold_vertices = 0;  // left after the last round (0 unless it gave up)
  // A large mesh is simplified in spatial blocks first (simplify_mesh): how many, and the faces
  // of their join (0 and 0 when it was one pass).
  std::size_t blocks = 0;
  std::size_t block_faces = 0;
};

// max(10000, faces / 10), the official pipeline's budget.
std::size_t default_target_faces(std::size_t faces);

// Simplifies in place when the mesh has more faces than the target (otherwise leaves it as it
// is), then drops the vertices no face uses. Deterministic, and the same for any number of
// threads.
//
// Parallel: a large mesh (tens of thousands of faces, with much to remove) is cut into spatial
// blocks simplified at once on the mesh layer's threads, each to a little more than its share of
// the target, the faces on its border with other blocks kept as they are (so that the blocks still
// fit together); one pass over the joined mesh then takes it to the target. Only that last pass,
// on a mesh little larger than the target, runs on one thread.
//
// Manifold stays manifold (with lock_border and repair on and no sloppy fallback): meshoptimizer
// sometimes glues two parts of the surface along an edge or at a vertex; folded face pairs are
// cancelled (cancel_opposite_faces), and any other vertex that a pass made non-manifold is
// protected (the input faces within two rings of it are kept as they are) and the joined pass
// redone once (a round costs a pass; most passes need none).
// What is still glued then is split (split_pinched_vertices): the two sheets keep touching at
// the spot, each with a vertex of its own. Non-manifold spots the input already had are left.
SimplifyReport simplify_mesh(Mesh& mesh, const SimplifyOptions& options = {});

}  // namespace cube3d
