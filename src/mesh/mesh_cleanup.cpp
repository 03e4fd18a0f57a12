#include "cube3d/mesh/mesh_cleanup.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/mesh/mesh_stats.h"
#include "parallel.h"
#include "union_find.h"

namespace cube3d {
namespace {

using mesh_parallel::bucket_by_key;
using mesh_parallel::Buckets;
using mesh_parallel::for_each_chunk;
using mesh_parallel::for_each_index;

// Keeps the faces for which keep(f) is true, in order; returns how many were dropped.
template <typename Keep>
std::size_t filter_faces(Mesh& mesh, const Keep& keep) {
  return mesh_parallel::filter_groups(mesh.indices, 3, keep);
}

// A position's bits with -0 folded into +0, so that equal floats hash alike.
uint32_t position_bits(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  return bits == 0x80000000u ? 0u : bits;
}

uint64_t position_hash(const float* p) {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (int axis = 0; axis < 3; ++axis) {
    h ^= position_bits(p[axis]);
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
  }
  return h;
}

// The face's vertices sorted, and whether sorting took an odd number of swaps (its winding).
struct FaceKey {
  std::array<uint32_t, 3> sorted;
  uint8_t odd = 0;
};

FaceKey face_key(const std::vector<uint32_t>& indices, std::size_t f) {
  FaceKey key{{indices[f * 3], indices[f * 3 + 1], indices[f * 3 + 2]}};
  auto& k = key.sorted;
  for (const auto& [x, y] : {std::pair{0, 1}, std::pair{1, 2}, std::pair{0, 1}}) {
    if (k[x] > k[y]) {
      std::swap(k[x], k[y]);
      key.odd ^= 1;
    }
  }
  return key;
}

// Faces grouped by their lowest vertex (ascending face order within a group): two faces over
// the same vertex set are in the same group, and groups are small, so duplicates are found in a
// linear pass instead of a sort of every face.
Buckets faces_by_lowest_vertex(const Mesh& mesh) {
  return bucket_by_key(mesh.face_count(), mesh.vertex_count(), [&](std::size_t f) {
    const uint32_t* v = &mesh.indices[f * 3];
    return std::min({v[0], v[1], v[2]});
  });
}

// fn(group) for every lowest-vertex group, with the group's faces as FaceKeys, in parallel over
// fixed ranges of vertices.
template <typename Fn>
void for_each_face_group(const Mesh& mesh, const Buckets& groups, const Fn& fn) {
  for_each_chunk(mesh.vertex_count(), [&](std::size_t begin, std::size_t end) {
    std::vector<std::pair<FaceKey, uint32_t>> group;
    for (std::size_t v = begin; v < end; ++v) {
      if (groups.size(v) < 2) continue;
      group.clear();
      for (const uint32_t* f = groups.begin(v); f != groups.end(v); ++f) {
        group.emplace_back(face_key(mesh.indices, *f), *f);
      }
      // By vertex set, then face order: equal sets become runs in the order of their faces.
      // Groups are a few faces: an insertion sort (stable, no allocation) unless one is large.
      const auto less = [](const auto& a, const auto& b) {
        return a.first.sorted < b.first.sorted;
      };
      if (group.size() > 32) {
        std::stable_sort(group.begin(), group.end(), less);
      } else {
        for (std::size_t i = 1; i < group.size(); ++i) {
          for (std::size_t j = i; j > 0 && less(group[j], group[j - 1]); --j) {
            std::swap(group[j], group[j - 1]);
          }
        }
      }
      fn(group);
    }
  });
}

}  // namespace

std::size_t merge_duplicate_vertices(Mesh& mesh) {
  const std::size_t count = mesh.vertex_count();
  if (count < 2) return 0;
  const float* v = mesh.vertices.data();
  std::vector<uint64_t> hashes(count);
  for_each_chunk(count, [&](std::size_t begin, std::size_t end) {
    for (std::size_t n = begin; n < end; ++n) hashes[n] = position_hash(v + n * 3);
  });
  // Partitions by the hash's top bits, each with its own table, walked in vertex order: the
  // lowest index of each position is met first and becomes the survivor. How many partitions
  // depends on the count only (not the threads).
  const int partition_bits = count < (std::size_t{1} << 16) ? 0 : 6;
  const Buckets parts = mesh_parallel::partition_items(count, partition_bits, [&](std::size_t n) {
    return partition_bits == 0 ? 0 : hashes[n] >> (64 - partition_bits);
  });
  std::vector<uint32_t> survivor(count);
  std::iota(survivor.begin(), survivor.end(), 0u);
  std::vector<std::size_t> merged_in(std::size_t{1} << partition_bits, 0);
  const auto same = [v](uint32_t a, uint32_t b) {
    return v[a * std::size_t{3}] == v[b * std::size_t{3}] &&
           v[a * std::size_t{3} + 1] == v[b * std::size_t{3} + 1] &&
           v[a * std::size_t{3} + 2] == v[b * std::size_t{3} + 2];
  };
  for_each_index(merged_in.size(), [&](std::size_t p) {
    const std::size_t size = parts.size(p);
    if (size < 2) return;
    const std::size_t slots = std::bit_ceil(size * 2);
    std::vector<uint32_t> table(slots, UINT32_MAX);
    for (const uint32_t* it = parts.begin(p); it != parts.end(p); ++it) {
      const uint32_t n = *it;
      for (std::size_t slot = hashes[n] & (slots - 1);; slot = (slot + 1) & (slots - 1)) {
        if (table[slot] == UINT32_MAX) {
          table[slot] = n;
          break;
        }
        if (same(table[slot], n)) {
          survivor[n] = table[slot];
          ++merged_in[p];
          break;
        }
      }
    }
  });
  const std::size_t merged = std::accumulate(merged_in.begin(), merged_in.end(), std::size_t{0});
  if (merged > 0) {
    for_each_chunk(mesh.indices.size(), [&](std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; ++i) mesh.indices[i] = survivor[mesh.indices[i]];
    });
  }
  return merged;
}

std::size_t remove_degenerate_faces(Mesh& mesh, bool zero_area) {
  const auto& v = mesh.vertices;
  const auto& idx = mesh.indices;
  return filter_faces(mesh, [&](std::size_t f) {
    const std::size_t a = idx[f * 3], b = idx[f * 3 + 1], c = idx[f * 3 + 2];
    if (a == b || b == c || a == c) {
      return false;
    }
    if (!zero_area) {
      return true;
    }
    double e1[3], e2[3];
    for (std::size_t axis = 0; axis < 3; ++axis) {
      e1[axis] = double{v[b * 3 + axis]} - v[a * 3 + axis];
      e2[axis] = double{v[c * 3 + axis]} - v[a * 3 + axis];
    }
    const double n[3] = {e1[1] * e2[2] - e1[2] * e2[1], e1[2] * e2[0] - e1[0] * e2[2],
                         e1[0] * e2[1] - e1[1] * e2[0]};
    return n[0] != 0.0 || n[1] != 0.0 || n[2] != 0.0;
  });
}

std::size_t remove_duplicate_faces(Mesh& mesh) {
  const Buckets groups = faces_by_lowest_vertex(mesh);
  std::vector<uint8_t> keep(mesh.face_count(), 1);
  for_each_face_group(mesh, groups, [&](const auto& group) {
    for (std::size_t n = 1; n < group.size(); ++n) {
      if (group[n].first.sorted == group[n - 1].first.sorted) {
        keep[group[n].second] = 0;  // the earliest face of each set sorts first and stays
      }
    }
  });
  return filter_faces(mesh, [&](std::size_t f) { return keep[f] != 0; });
}

std::size_t cancel_opposite_faces(Mesh& mesh) {
  const Buckets groups = faces_by_lowest_vertex(mesh);
  std::vector<uint8_t> keep(mesh.face_count(), 1);
  for_each_face_group(mesh, groups, [&](const auto& group) {
    for (std::size_t begin = 0; begin < group.size();) {
      std::size_t end = begin + 1;
      while (end < group.size() && group[end].first.sorted == group[begin].first.sorted) ++end;
      std::size_t windings[2] = {0, 0};
      for (std::size_t n = begin; n < end; ++n) ++windings[group[n].first.odd];
      // Drop the minority winding and as many of the majority's last faces.
      const std::size_t cancel = std::min(windings[0], windings[1]);
      std::size_t dropped[2] = {0, 0};
      for (std::size_t n = end; cancel > 0 && n-- > begin;) {
        const uint8_t w = group[n].first.odd;
        if (dropped[w] < cancel) {
          keep[group[n].second] = 0;
          ++dropped[w];
        }
      }
      begin = end;
    }
  });
  return filter_faces(mesh, [&](std::size_t f) { return keep[f] != 0; });
}

std::size_t split_pinched_vertices(Mesh& mesh, const std::vector<uint32_t>& vertices) {
  if (vertices.empty()) return 0;
  std::vector<uint32_t>& idx = mesh.indices;
  std::vector<uint8_t> listed(mesh.vertex_count(), 0);
  for (const uint32_t v : vertices) listed[v] = 1;
  // The corners of the listed vertices, grouped by vertex (in corner order).
  std::vector<uint32_t> corner_list;
  for (std::size_t c = 0; c < idx.size(); ++c) {
    if (listed[idx[c]]) corner_list.push_back(static_cast<uint32_t>(c));
  }
  std::stable_sort(corner_list.begin(), corner_list.end(),
                   [&](uint32_t a, uint32_t b) { return idx[a] < idx[b]; });
  const auto next_of = [&](uint32_t c) { return idx[c / 3 * 3 + (c + 1) % 3]; };
  const auto prev_of = [&](uint32_t c) { return idx[c / 3 * 3 + (c + 2) % 3]; };
  std::size_t added = 0;
  std::vector<uint32_t> parent, rewrite;
  for (std::size_t begin = 0; begin < corner_list.size();) {
    const uint32_t v = idx[corner_list[begin]];
    std::size_t end = begin + 1;
    while (end < corner_list.size() && idx[corner_list[end]] == v) ++end;
    const std::size_t d = end - begin;
    const uint32_t* corners = corner_list.data() + begin;
    // Fans, as non_manifold_vertices joins them: corner a with the one corner whose previous
    // vertex is a's next.
    parent.resize(d);
    union_find::reset(parent.data(), d);
    for (std::size_t a = 0; a < d; ++a) {
      std::size_t match = d, matches = 0;
      for (std::size_t b = 0; b < d; ++b) {
        if (prev_of(corners[b]) == next_of(corners[a])) {
          match = b;
          ++matches;
        }
      }
      if (matches == 1) {
        union_find::join(parent.data(), static_cast<uint32_t>(a), static_cast<uint32_t>(match));
      }
    }
    // The fan of the first corner keeps the vertex; each other fan, in order of its first
    // corner, gets a copy.
    rewrite.assign(d, UINT32_MAX);
    for (std::size_t i = 0; i < d; ++i) {
      const uint32_t root = union_find::find(parent.data(), static_cast<uint32_t>(i));
      if (root == 0) continue;
      if (rewrite[root] == UINT32_MAX) {
        rewrite[root] = static_cast<uint32_t>(mesh.vertex_count());
        const auto at = mesh.vertices.begin() + static_cast<std::ptrdiff_t>(v * std::size_t{3});
        const std::array<float, 3> position{at[0], at[1], at[2]};
        mesh.vertices.insert(mesh.vertices.end(), position.begin(), position.end());
        ++added;
      }
      rewrite[i] = rewrite[root];
    }
    for (std::size_t i = 0; i < d; ++i) {
      if (rewrite[i] != UINT32_MAX) idx[corners[i]] = rewrite[i];
    }
    begin = end;
  }
  return added;
}

std::size_t remove_unreferenced_vertices(Mesh& mesh) {
  const std::size_t count = mesh.vertex_count();
  std::vector<uint8_t> referenced(count, 0);
  for_each_chunk(mesh.indices.size(), [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      std::atomic_ref<uint8_t>(referenced[mesh.indices[i]]).store(1, std::memory_order_relaxed);
    }
  });
  // New numbers in vertex order: each chunk counts its referenced vertices, then numbers and
  // copies them from its offset.
  const std::size_t chunks = mesh_parallel::chunk_count(count);
  std::vector<uint32_t> offset(chunks + 1, 0);
  for_each_chunk(count, [&](std::size_t begin, std::size_t end) {
    offset[begin / mesh_parallel::kChunk + 1] = static_cast<uint32_t>(
        std::count(referenced.begin() + static_cast<std::ptrdiff_t>(begin),
                   referenced.begin() + static_cast<std::ptrdiff_t>(end), uint8_t{1}));
  });
  for (std::size_t c = 0; c < chunks; ++c) offset[c + 1] += offset[c];
  const std::size_t kept = offset[chunks];
  if (kept == count) return 0;
  std::vector<uint32_t> new_index(count, UINT32_MAX);
  std::vector<float> vertices(kept * 3);
  for_each_chunk(count, [&](std::size_t begin, std::size_t end) {
    uint32_t next = offset[begin / mesh_parallel::kChunk];
    for (std::size_t n = begin; n < end; ++n) {
      if (referenced[n]) {
        std::copy_n(mesh.vertices.begin() + static_cast<std::ptrdiff_t>(n * 3), 3,
                    vertices.begin() + static_cast<std::ptrdiff_t>(next * std::size_t{3}));
        new_index[n] = next++;
      }
    }
  });
  mesh.vertices = std::move(vertices);
  for_each_chunk(mesh.indices.size(), [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) mesh.indices[i] = new_index[mesh.indices[i]];
  });
  return count - kept;
}

std::size_t remove_floaters(Mesh& mesh, double ratio) {
  if (!(ratio >= 0.0)) {
    throw invalid_argument("remove_floaters: the diagonal ratio must be >= 0");
  }
  std::size_t components = 0;
  const std::vector<uint32_t> labels = face_components(mesh, &components);
  if (components < 2) {
    return 0;
  }
  // Each referenced vertex's component (that of any face using it), then the boxes over the
  // vertices: a component's box is its vertices' box.
  std::vector<uint32_t> vertex_label(mesh.vertex_count(), UINT32_MAX);
  for_each_chunk(labels.size(), [&](std::size_t begin, std::size_t end) {
    for (std::size_t f = begin; f < end; ++f) {
      for (int corner = 0; corner < 3; ++corner) {
        // Every face of a vertex has the same label: the stores race with equal values.
        std::atomic_ref<uint32_t>(vertex_label[mesh.indices[f * 3 + corner]])
            .store(labels[f], std::memory_order_relaxed);
      }
    }
  });
  std::vector<BoundingBox> boxes(components);
  std::vector<uint8_t> seen(components, 0);
  BoundingBox whole;
  bool any = false;
  for (std::size_t v = 0; v < vertex_label.size(); ++v) {
    const uint32_t label = vertex_label[v];
    if (label == UINT32_MAX) continue;
    const float* p = &mesh.vertices[v * 3];
    BoundingBox& box = boxes[label];
    const bool first = seen[label] == 0;
    for (int axis = 0; axis < 3; ++axis) {
      box.min[axis] = first ? p[axis] : std::min(box.min[axis], p[axis]);
      box.max[axis] = first ? p[axis] : std::max(box.max[axis], p[axis]);
      whole.min[axis] = any ? std::min(whole.min[axis], p[axis]) : p[axis];
      whole.max[axis] = any ? std::max(whole.max[axis], p[axis]) : p[axis];
    }
    seen[label] = 1;
    any = true;
  }
  const double threshold = ratio * whole.diagonal();
  std::vector<uint8_t> keep(components);
  for (std::size_t c = 0; c < components; ++c) {
    keep[c] = boxes[c].diagonal() >= threshold ? 1 : 0;
  }
  return filter_faces(mesh, [&](std::size_t f) { return keep[labels[f]] != 0; });
}

CleanupReport cleanup_mesh(Mesh& mesh, const CleanupOptions& options) {
  CleanupReport report;
  if (options.merge_duplicate_vertices) {
    report.merged_vertices = merge_duplicate_vertices(mesh);
  }
  if (options.remove_degenerate_faces) {
    report.degenerate_faces = remove_degenerate_faces(mesh, options.remove_zero_area_faces);
  }
  if (options.remove_duplicate_faces) {
    report.duplicate_faces = remove_duplicate_faces(mesh);
  }
  if (options.remove_floaters) {
    report.floater_faces = remove_floaters(mesh, options.floater_diagonal_ratio);
  }
  if (options.remove_unreferenced_vertices) {
    report.unreferenced_vertices = remove_unreferenced_vertices(mesh);
  }
  return report;
}

}  // namespace cube3d
