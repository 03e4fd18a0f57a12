#include "cube3d/mesh/mesh_simplify.h"

#include <meshoptimizer.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/mesh/mesh_cleanup.h"
#include "cube3d/mesh/mesh_stats.h"
#include "parallel.h"

namespace cube3d {
namespace {

// Rounds of protect-and-redo of each block's pass before what is still glued is split
// (repaired_pass); the joined pass's are SimplifyOptions::repair_rounds (1 by default).
// Measured (cube3d-mesh-bench): a round costs a whole pass, and a shape with thin parts (the
// chair at resolution_base 9) glued in most blocks, so blocks split at once and only the joined
// pass, where a redo is cheapest, gets a round.
constexpr int kBlockRepairRounds = 0;

// What one repaired pass reports (SimplifyReport's fields of it).
struct PassReport {
  float error = 0.0f;
  bool sloppy = false;
  std::size_t cancelled_faces = 0;
  int repair_rounds = 0;
  std::size_t split_vertices = 0;
  std::size_t non_manifold_vertices = 0;
};

// The input faces that touch a protected vertex, kept as they are, and the rest.
void split_protected(const std::vector<uint32_t>& input, const std::vector<uint8_t>& protect,
                     std::vector<uint32_t>& rest, std::vector<uint32_t>& patch) {
  rest.clear();
  patch.clear();
  for (std::size_t f = 0; f < input.size(); f += 3) {
    const bool kept = protect[input[f]] | protect[input[f + 1]] | protect[input[f + 2]];
    std::vector<uint32_t>& to = kept ? patch : rest;
    to.insert(to.end(), input.begin() + static_cast<std::ptrdiff_t>(f),
              input.begin() + static_cast<std::ptrdiff_t>(f + 3));
  }
}

// Marks the input faces around `bad` vertices (and so their vertices) for protection: the faces
// within two rings of a glued spot are then kept as they are.
void protect_around(const std::vector<uint32_t>& input, const std::vector<uint32_t>& bad,
                    std::vector<uint8_t>& protect) {
  std::vector<uint8_t> is_bad(protect.size(), 0);
  for (const uint32_t v : bad) is_bad[v] = 1;
  for (std::size_t f = 0; f < input.size(); f += 3) {
    if (is_bad[input[f]] | is_bad[input[f + 1]] | is_bad[input[f + 2]]) {
      protect[input[f]] = protect[input[f + 1]] = protect[input[f + 2]] = 1;
    }
  }
}

// The vertices of `bad` that `before` does not hold (both sorted).
std::vector<uint32_t> new_bad_vertices(const std::vector<uint32_t>& bad,
                                       const std::vector<uint32_t>& before) {
  std::vector<uint32_t> fresh;
  std::set_difference(bad.begin(), bad.end(), before.begin(), before.end(),
                      std::back_inserter(fresh));
  return fresh;
}

// One meshoptimizer pass over the faces not protected, to `target_faces` in all, the protected
// ones put back untouched. Returns the faces; `report` gets the error and whether the sloppy
// simplifier finished.
std::vector<uint32_t> meshopt_pass(const Mesh& mesh, const std::vector<uint32_t>& input,
                                   const std::vector<uint8_t>& protect, std::size_t target_faces,
                                   const SimplifyOptions& options, PassReport& report) {
  std::vector<uint32_t> rest, patch;
  split_protected(input, protect, rest, patch);
  const std::size_t target_indices =
      target_faces * 3 > patch.size() ? target_faces * 3 - patch.size() : 0;
  const unsigned flags = options.lock_border ? unsigned{meshopt_SimplifyLockBorder} : 0u;
  std::vector<uint32_t> simplified(rest.size(), 0);
  std::size_t count = meshopt_simplify(simplified.data(), rest.data(), rest.size(),
                                       mesh.vertices.data(), mesh.vertex_count(), sizeof(float) * 3,
                                       target_indices, options.max_error, flags, &report.error);
  if (options.allow_sloppy &&
      static_cast<double>(count + patch.size()) >
          static_cast<double>(target_faces * 3) * (1.0 + options.tolerance)) {
    count = meshopt_simplifySloppy(simplified.data(), rest.data(), rest.size(),
                                   mesh.vertices.data(), mesh.vertex_count(), sizeof(float) * 3,
                                   target_indices, options.max_error, &report.error);
    report.sloppy = true;
  }
  simplified.resize(count);
  simplified.insert(simplified.end(), patch.begin(), patch.end());
  return simplified;
}

// Simplifies mesh.indices to `target_faces`, the faces around `protect`ed vertices kept.
//
// meshoptimizer's collapses do not check the link condition: now and then they glue two parts of
// the surface together along an edge or at a vertex. Folds onto the same three vertices with
// opposite windings, the most common glue, cancel without harm (cancel_opposite_faces). Any other
// vertex that is non-manifold after the pass and was not before (with lock_border and repair on)
// is repaired: the input faces within two rings of it are protected and the pass redone, up to
// `rounds` times (a round costs a pass; most passes need none or one); what is still glued after
// that is split when `split` (split_pinched_vertices: the sheets keep touching at the spot, each
// with a vertex of its own), else left to the caller.
PassReport repaired_pass(Mesh& mesh, std::size_t target_faces, std::vector<uint8_t> protect,
                         const SimplifyOptions& options, int rounds, bool split) {
  PassReport report;
  const std::vector<uint32_t> input = mesh.indices;
  // The input's own non-manifold vertices, needed only when a pass leaves some (rarely).
  std::vector<uint32_t> before;
  bool before_known = false;
  for (int round = 0;; ++round) {
    mesh.indices = meshopt_pass(mesh, input, protect, target_faces, options, report);
    report.cancelled_faces = cancel_opposite_faces(mesh);
    report.non_manifold_vertices = 0;
    if (!options.lock_border || report.sloppy) break;
    const std::vector<uint32_t> bad = non_manifold_vertices(mesh);
    if (bad.empty()) break;
    if (!before_known) {
      before = non_manifold_vertices(input, mesh.vertex_count());
      before_known = true;
    }
    const std::vector<uint32_t> glued = new_bad_vertices(bad, before);
    if (glued.empty()) break;
    if (round == rounds) {
      if (split) {
        report.split_vertices += split_pinched_vertices(mesh, glued);
        report.non_manifold_vertices = new_bad_vertices(non_manifold_vertices(mesh), before).size();
      } else {
        report.non_manifold_vertices = glued.size();
      }
      break;
    }
    ++report.repair_rounds;
    protect_around(input, glued, protect);
  }
  return report;
}

// --- blocks ------------------------------------------------------------------------------------
//
// A large mesh is cut into spatial blocks (by face centroid: the longest side of a block's box
// halved until the block is small enough), each block simplified alone and in parallel to
// kBlockSlack times its share of the target, with the faces at its border with other blocks kept
// as they are; then one pass over the joined mesh (the seams, left at full density, are cheap to
// collapse) takes it to the target. The cut depends on the mesh and the target only, so the
// result is the same for any number of threads.
//
// A block's border costs its interior: the smaller its share of the target next to its border,
// the harder the interior is pressed. So a block is made large enough that its share is at least
// kMinBlockShare faces (a block of n faces has a border of the order of sqrt(n) faces), and never
// smaller than kMinBlockFaces; a mesh that is not at least two such blocks is one pass.
// (Measured on a sphere of 113k and 454k faces: the same volume and vertex error as one pass.)
constexpr std::size_t kMinBlockFaces = 16384;
constexpr double kMinBlockShare = 8192;
constexpr double kBlockSlack = 1.5;
// Where a second blocks' pass cuts its boxes (the first cuts them in half), and how close to the
// target the blocks must come for the joined pass to be skipped.
constexpr float kSecondCut = 0.375f;
constexpr double kBlocksTolerance = 0.01;

std::size_t block_faces_for(std::size_t faces, std::size_t target_faces, double slack) {
  const double ratio = static_cast<double>(target_faces) * slack / static_cast<double>(faces);
  return std::max(kMinBlockFaces, static_cast<std::size_t>(std::ceil(kMinBlockShare / ratio)));
}

bool use_blocks(std::size_t faces, std::size_t target_faces, double slack,
                const SimplifyOptions& options) {
  return options.blocks && options.lock_border &&
         static_cast<double>(target_faces) * slack < static_cast<double>(faces) &&
         faces >= 2 * block_faces_for(faces, target_faces, slack);
}

using Centroid = std::array<float, 3>;

// Splits `faces` (numbers of faces) into blocks, appending them to `blocks` in a fixed order.
// Splits faces[begin, end) (numbers of faces, reordered in place) into blocks of at most
// `block_faces`, appending each block's range to `blocks` in a fixed order. `cut`: where along
// the longest side a box is cut (a half; elsewhere for a second pass whose seams must not fall on
// the first's).
void split_blocks(std::vector<uint32_t>& faces, std::size_t begin, std::size_t end,
                  const std::vector<Centroid>& centroids, std::size_t block_faces, float cut,
                  std::vector<std::pair<std::size_t, std::size_t>>& blocks) {
  if (end - begin <= block_faces) {
    blocks.emplace_back(begin, end);
    return;
  }
  Centroid low = centroids[faces[begin]], high = low;
  for (std::size_t i = begin; i < end; ++i) {
    const Centroid& c = centroids[faces[i]];
    for (int a = 0; a < 3; ++a) {
      low[a] = std::min(low[a], c[a]);
      high[a] = std::max(high[a], c[a]);
    }
  }
  int axis = 0;
  for (int a = 1; a < 3; ++a) {
    if (high[a] - low[a] > high[axis] - low[axis]) axis = a;
  }
  const float middle = low[axis] + (high[axis] - low[axis]) * cut;
  // (std::partition is deterministic for a given input, which is all the result needs.)
  auto split = std::partition(faces.begin() + static_cast<std::ptrdiff_t>(begin),
                              faces.begin() + static_cast<std::ptrdiff_t>(end),
                              [&](uint32_t f) { return centroids[f][axis] < middle; });
  std::size_t middle_at = static_cast<std::size_t>(split - faces.begin());
  if (middle_at == begin || middle_at == end) middle_at = begin + (end - begin) / 2;  // one place
  std::vector<std::pair<std::size_t, std::size_t>> halves[2];
  mesh_parallel::for_each_index(2, [&](std::size_t side) {
    split_blocks(faces, side == 0 ? begin : middle_at, side == 0 ? middle_at : end, centroids,
                 block_faces, cut, halves[side]);
  });
  for (auto& half : halves) blocks.insert(blocks.end(), half.begin(), half.end());
}

std::vector<std::vector<uint32_t>> make_blocks(const Mesh& mesh, std::size_t block_faces,
                                               float cut) {
  std::vector<Centroid> centroids(mesh.face_count());
  mesh_parallel::for_each_chunk(centroids.size(), [&](std::size_t begin, std::size_t end) {
    for (std::size_t f = begin; f < end; ++f) {
      for (int a = 0; a < 3; ++a) {
        float sum = 0;
        for (int c = 0; c < 3; ++c) {
          sum += mesh.vertices[mesh.indices[f * 3 + c] * std::size_t{3} + a];
        }
        centroids[f][a] = sum / 3.0f;
      }
    }
  });
  std::vector<uint32_t> all(mesh.face_count());
  for (std::size_t f = 0; f < all.size(); ++f) all[f] = static_cast<uint32_t>(f);
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  split_blocks(all, 0, all.size(), centroids, block_faces, cut, ranges);
  std::vector<std::vector<uint32_t>> blocks;
  blocks.reserve(ranges.size());
  for (const auto& [begin, end] : ranges) {
    blocks.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(begin),
                        all.begin() + static_cast<std::ptrdiff_t>(end));
  }
  return blocks;
}

// The vertices of faces of more than one block.
std::vector<uint8_t> seam_vertices(const Mesh& mesh,
                                   const std::vector<std::vector<uint32_t>>& blocks) {
  std::vector<uint8_t> seam(mesh.vertex_count(), 0);
  std::vector<uint32_t> owner(mesh.vertex_count(), UINT32_MAX);
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    for (const uint32_t f : blocks[b]) {
      for (int c = 0; c < 3; ++c) {
        const uint32_t v = mesh.indices[f * std::size_t{3} + c];
        if (owner[v] == UINT32_MAX) {
          owner[v] = static_cast<uint32_t>(b);
        } else if (owner[v] != b) {
          seam[v] = 1;
        }
      }
    }
  }
  return seam;
}

// A block as a mesh of its own (its vertices renumbered in order of first use), so that
// meshoptimizer's per-vertex work is the block's size, not the whole mesh's.
struct BlockMesh {
  Mesh mesh;
  std::vector<uint32_t> global;  // local vertex -> the whole mesh's
};

BlockMesh extract_block(const Mesh& whole, const std::vector<uint32_t>& faces) {
  BlockMesh block;
  // Open addressing over the whole mesh's vertex numbers, kept at most half full (a block has
  // about half as many vertices as faces; the table grows for one that has more).
  std::size_t slots = std::bit_ceil(faces.size() + 16);
  std::vector<std::pair<uint32_t, uint32_t>> table(slots, {UINT32_MAX, 0});
  const auto find_slot = [&](uint32_t v) {
    std::size_t slot = (v * 0x9E3779B1u) & (slots - 1);
    while (table[slot].first != UINT32_MAX && table[slot].first != v) {
      slot = (slot + 1) & (slots - 1);
    }
    return slot;
  };
  block.mesh.indices.reserve(faces.size() * 3);
  for (const uint32_t f : faces) {
    for (int c = 0; c < 3; ++c) {
      const uint32_t v = whole.indices[f * std::size_t{3} + c];
      std::size_t slot = find_slot(v);
      if (table[slot].first == UINT32_MAX) {
        if ((block.global.size() + 1) * 2 > slots) {
          slots *= 2;
          table.assign(slots, {UINT32_MAX, 0});
          for (uint32_t local = 0; local < block.global.size(); ++local) {
            table[find_slot(block.global[local])] = {block.global[local], local};
          }
          slot = find_slot(v);
        }
        table[slot] = {v, static_cast<uint32_t>(block.global.size())};
        block.global.push_back(v);
        const auto at = whole.vertices.begin() + static_cast<std::ptrdiff_t>(v * std::size_t{3});
        block.mesh.vertices.insert(block.mesh.vertices.end(), at, at + 3);
      }
      block.mesh.indices.push_back(table[slot].second);
    }
  }
  return block;
}

struct BlockResult {
  std::vector<uint32_t> indices;  // the whole mesh's numbers
  PassReport report;              // its error relative to the whole mesh's extent
};

// One block (faces of `whole`) simplified to `target_faces`, the faces around `protect`ed
// vertices (the whole mesh's numbers) kept as they are, repaired where it glued.
// meshoptimizer's errors are relative to the extent of what it is given, the block here:
// `whole_scale` (meshopt_simplifyScale of the whole mesh) turns the options' bound into the
// block's and its error back into the whole mesh's.
BlockResult simplify_block(const Mesh& whole, float whole_scale, const std::vector<uint32_t>& faces,
                           std::size_t target_faces, const std::vector<uint8_t>& protect,
                           SimplifyOptions options) {
  BlockMesh block = extract_block(whole, faces);
  const float scale = meshopt_simplifyScale(block.mesh.vertices.data(), block.mesh.vertex_count(),
                                            sizeof(float) * 3);
  const float to_block = scale > 0 ? whole_scale / scale : 1.0f;
  options.max_error *= to_block;
  options.allow_sloppy = false;  // only the joined pass may finish with it
  std::vector<uint8_t> local_protect(block.global.size(), 0);
  for (std::size_t v = 0; v < block.global.size(); ++v) local_protect[v] = protect[block.global[v]];
  BlockResult result;
  result.report = repaired_pass(block.mesh, target_faces, std::move(local_protect), options,
                                kBlockRepairRounds, /*split=*/false);
  result.report.error /= to_block;
  result.indices.reserve(block.mesh.indices.size());
  for (const uint32_t v : block.mesh.indices) result.indices.push_back(block.global[v]);
  return result;
}

// The blocks' pass: every block to its share of `target_faces` times `slack`, in parallel,
// joined in block order. Leaves mesh.indices the joined faces (the vertices are unchanged, but
// for those added where glue was split).
void simplify_blocks(Mesh& mesh, std::size_t target_faces, double slack, float cut,
                     const SimplifyOptions& options, SimplifyReport& report) {
  const std::vector<std::vector<uint32_t>> blocks =
      make_blocks(mesh, block_faces_for(mesh.face_count(), target_faces, slack), cut);
  report.blocks += blocks.size();
  // The faces that touch a vertex of two blocks stay as they are in this pass, so that what each
  // block simplifies is bounded by vertices of its own: two blocks then never make the same edge,
  // which would glue the join (an edge of four faces across the seam).
  const std::vector<uint8_t> protect = seam_vertices(mesh, blocks);
  const float whole_scale =
      meshopt_simplifyScale(mesh.vertices.data(), mesh.vertex_count(), sizeof(float) * 3);
  const double share =
      static_cast<double>(target_faces) * slack / static_cast<double>(mesh.face_count());
  std::vector<BlockResult> results(blocks.size());
  mesh_parallel::for_each_index(blocks.size(), [&](std::size_t b) {
    const auto target =
        static_cast<std::size_t>(std::ceil(share * static_cast<double>(blocks[b].size())));
    results[b] = simplify_block(mesh, whole_scale, blocks[b], target, protect, options);
  });
  std::vector<uint32_t> joined;
  for (const BlockResult& r : results) {
    joined.insert(joined.end(), r.indices.begin(), r.indices.end());
    report.error = std::max(report.error, r.report.error);
    report.cancelled_faces += r.report.cancelled_faces;
    report.repair_rounds += r.report.repair_rounds;
  }
  const std::vector<uint32_t> input = std::move(mesh.indices);
  mesh.indices = std::move(joined);
  // What a block left glued (its rounds ran out) is split here, where new vertices can be
  // numbered, so that the joined pass starts manifold wherever the input was.
  if (std::any_of(results.begin(), results.end(),
                  [](const BlockResult& r) { return r.report.non_manifold_vertices > 0; })) {
    const std::vector<uint32_t> glued = new_bad_vertices(
        non_manifold_vertices(mesh), non_manifold_vertices(input, mesh.vertex_count()));
    report.split_vertices += split_pinched_vertices(mesh, glued);
  }
}

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
  if (use_blocks(report.faces_before, report.target_faces, kBlockSlack, options)) {
    simplify_blocks(mesh, report.target_faces, kBlockSlack, 0.5f, options, report);
    remove_unreferenced_vertices(mesh);
    // A joined mesh still large is taken to the target by a second blocks' pass, its cuts away
    // from the first's (whose seams, kept at full density, it simplifies), instead of by one
    // long pass on one thread; the joined pass below then has little or nothing left to do.
    if (use_blocks(mesh.face_count(), report.target_faces, 1.0, options)) {
      simplify_blocks(mesh, report.target_faces, 1.0, kSecondCut, options, report);
      remove_unreferenced_vertices(mesh);
    }
    report.block_faces = mesh.face_count();
    if (static_cast<double>(mesh.face_count()) <=
        static_cast<double>(report.target_faces) * (1.0 + kBlocksTolerance)) {
      report.faces_after = mesh.face_count();
      return report;
    }
  }
  const PassReport last =
      repaired_pass(mesh, report.target_faces, std::vector<uint8_t>(mesh.vertex_count(), 0),
                    options, std::max(0, options.repair_rounds), /*split=*/true);
  report.error = std::max(report.error, last.error);
  report.sloppy = last.sloppy;
  report.cancelled_faces += last.cancelled_faces;
  report.repair_rounds += last.repair_rounds;
  report.split_vertices += last.split_vertices;
  report.non_manifold_vertices = last.non_manifold_vertices;
  remove_unreferenced_vertices(mesh);
  report.faces_after = mesh.face_count();
  return report;
}

}  // namespace cube3d
