// Clean-up of a marching-cubes mesh, the steps of the official post-processing (PyMeshLab:
// remove duplicate vertices, null and duplicate faces, unreferenced vertices, then connected
// components whose bounding-box diagonal is under 15% of the mesh's). Each step can be switched.
//
// Where the official steps break a closed surface, the defaults differ (docs/architecture.md, where
// we differ from the official code): marching cubes gives one vertex per grid edge, welded by
// construction, and two vertices share a position only when float rounding put both on the same
// grid point, on two sheets of the surface that nearly touch there; merging them pinches the
// surface (edges of four faces), and removing a zero-area face of three distinct vertices opens a
// sliver hole. So by default neither is done, and the surface stays closed wherever marching
// cubes made it closed; the zero-area faces are collapsed by the simplification anyway.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cube3d/mesh/mesh.h"

namespace cube3d {

struct CleanupOptions {
  bool merge_duplicate_vertices = false;  // the official clean-up's: see above
  bool remove_degenerate_faces = true;    // faces with a repeated vertex index
  bool remove_zero_area_faces = false;    // also those of three distinct vertices (official)
  bool remove_duplicate_faces = true;
  bool remove_unreferenced_vertices = true;
  bool remove_floaters = true;
  double floater_diagonal_ratio = 0.15;
  bool operator==(const CleanupOptions&) const = default;
};

struct CleanupReport {
  std::size_t merged_vertices = 0;
  std::size_t degenerate_faces = 0;
  std::size_t duplicate_faces = 0;
  std::size_t unreferenced_vertices = 0;
  std::size_t floater_faces = 0;
};

// Runs the enabled steps: merge duplicate vertices, degenerate faces, duplicate faces, floaters,
// and last the unreferenced vertices (one pass drops the orphans of every earlier step).
CleanupReport cleanup_mesh(Mesh& mesh, const CleanupOptions& options = {});

// Vertices at exactly the same position become one (the first in vertex order); marching cubes
// makes such copies only where a grid value equals the level. Returns how many were merged; the
// orphans stay until remove_unreferenced_vertices.
std::size_t merge_duplicate_vertices(Mesh& mesh);

// Faces with a repeated vertex index, and (zero_area) those of zero area (computed in double).
// Note that removing a zero-area face with three distinct vertices opens a sliver hole, as in
// PyMeshLab.
std::size_t remove_degenerate_faces(Mesh& mesh, bool zero_area = true);

// Faces over the same vertex set as an earlier face, in any order or orientation.
std::size_t remove_duplicate_faces(Mesh& mesh);

// Faces over the same vertex set with opposite windings cancel in pairs (the first faces of the
// majority winding stay). Such a pair is a zero-volume fold, as edge collapses sometimes leave,
// and it glues four faces to each of its edges; dropping both restores a manifold surface.
std::size_t cancel_opposite_faces(Mesh& mesh);

// Gives each fan of a pinched vertex (one whose faces form several fans, as mesh_stats.h's
// non_manifold_vertices defines them) a vertex of its own at the same position, for the vertices
// listed (sorted; the others are left), so that the surface becomes manifold there without
// moving anything: two sheets glued at a point, or along an edge, become two sheets that touch.
// The new vertices are appended in the order of the listed vertices. Returns how many it added.
std::size_t split_pinched_vertices(Mesh& mesh, const std::vector<uint32_t>& vertices);

// Drops vertices no face references; the others keep their order.
std::size_t remove_unreferenced_vertices(Mesh& mesh);

// Drops the faces of each connected component (through shared vertices) whose bounding-box
// diagonal is below ratio times the diagonal of the whole mesh's bounding box. Returns the
// number of faces removed; vertices stay (see remove_unreferenced_vertices).
std::size_t remove_floaters(Mesh& mesh, double ratio = 0.15);

}  // namespace cube3d
