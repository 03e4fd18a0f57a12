#include "cube3d/mesh/mesh_simplify.h"

#include <meshoptimizer.h>

#include <algorithm>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/mesh/mesh_cleanup.h"
#include "cube3d/mesh/mesh_stats.h"

namespace cube3d {
namespace {

// Rounds of protect-and-retry before the last result is taken as it is.
constexpr int kMaxRepairRounds = 8;

}  // namespace

std::size_t default_target_faces(std::size_t faces) {
  return std::max<std::size_t>(10000, faces / 10);
}

SimplifyReport simplify_mesh(Mesh& mesh, const SimplifyOptions& options) {
  if (!(options.max_error >= 0.0f) || !(options.tolerance >= 0.0)) {
    throw invalid_argument("simplify_mesh: max_error and tolerance must be >= 0");
  }
  SimplifyReport report;
  report.faces_before = mesh.face_count();
  report.target_faces =
      options.target_faces > 0 ? options.target_faces : default_target_faces(report.faces_before);
  report.faces_after = report.faces_before;
  if (report.faces_before <= report.target_faces) {
    return report;
  }

  // meshoptimizer's collapses do not check the link condition: now and then two parts of the
  // surface get glued along an edge or at a vertex. When the input was manifold, such spots are
  // protected and the simplification redone: the faces around them (two rings in the input) are
  // taken out and put back untouched afterwards, and locking the border of the hole they leave
  // keeps the seam closed. meshoptimizer keeps input vertex numbers, so the bad vertices it
  // reports name places in the input.
  const std::vector<uint32_t> input = mesh.indices;
  const bool repair = options.lock_border && non_manifold_vertices(mesh).empty();
  const unsigned flags = options.lock_border ? unsigned{meshopt_SimplifyLockBorder} : 0u;
  std::vector<uint8_t> protect(mesh.vertex_count(), 0);
  std::vector<uint32_t> rest, patch, simplified;
  for (int round = 0;; ++round) {
    rest.clear();
    patch.clear();
    for (std::size_t f = 0; f < input.size(); f += 3) {
      const bool kept = protect[input[f]] | protect[input[f + 1]] | protect[input[f + 2]];
      (kept ? patch : rest)
          .insert((kept ? patch : rest).end(), input.begin() + f, input.begin() + f + 3);
    }
    const std::size_t target_indices =
        report.target_faces * 3 > patch.size() ? report.target_faces * 3 - patch.size() : 0;
    simplified.assign(rest.size(), 0);
    std::size_t count = meshopt_simplify(
        simplified.data(), rest.data(), rest.size(), mesh.vertices.data(), mesh.vertex_count(),
        sizeof(float) * 3, target_indices, options.max_error, flags, &report.error);
    if (static_cast<double>(count + patch.size()) >
            static_cast<double>(report.target_faces * 3) * (1.0 + options.tolerance) &&
        options.allow_sloppy) {
      count = meshopt_simplifySloppy(simplified.data(), rest.data(), rest.size(),
                                     mesh.vertices.data(), mesh.vertex_count(), sizeof(float) * 3,
                                     target_indices, options.max_error, &report.error);
      report.sloppy = true;
    }
    simplified.resize(count);
    simplified.insert(simplified.end(), patch.begin(), patch.end());
    mesh.indices = simplified;
    // Folds onto the same three vertices with opposite windings are the most common glue; they
    // cancel without harm.
    report.cancelled_faces = cancel_opposite_faces(mesh);
    if (!repair || report.sloppy) {
      break;
    }
    const std::vector<uint32_t> bad = non_manifold_vertices(mesh);
    report.non_manifold_vertices = bad.size();
    if (bad.empty() || round == kMaxRepairRounds) {
      break;
    }
    ++report.repair_rounds;
    // Protect the bad vertices and their neighbours in the input.
    std::vector<uint8_t> is_bad(mesh.vertex_count(), 0);
    for (const uint32_t v : bad) {
      is_bad[v] = 1;
    }
    for (std::size_t f = 0; f < input.size(); f += 3) {
      if (is_bad[input[f]] | is_bad[input[f + 1]] | is_bad[input[f + 2]]) {
        protect[input[f]] = protect[input[f + 1]] = protect[input[f + 2]] = 1;
      }
    }
  }
  remove_unreferenced_vertices(mesh);
  report.faces_after = mesh.face_count();
  return report;
}

}  // namespace cube3d
