#include "cube3d/mesh/mesh_cleanup.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/mesh/mesh_stats.h"

namespace cube3d {
namespace {

// Keeps the faces for which keep(f) is true, in order; returns how many were dropped.
template <typename Keep>
std::size_t filter_faces(Mesh& mesh, const Keep& keep) {
  const std::size_t before = mesh.face_count();
  std::size_t out = 0;
  for (std::size_t f = 0; f < before; ++f) {
    if (keep(f)) {
      std::copy_n(mesh.indices.begin() + static_cast<std::ptrdiff_t>(f * 3), 3,
                  mesh.indices.begin() + static_cast<std::ptrdiff_t>(out * 3));
      ++out;
    }
  }
  mesh.indices.resize(out * 3);
  return before - out;
}

}  // namespace

std::size_t merge_duplicate_vertices(Mesh& mesh) {
  const std::size_t count = mesh.vertex_count();
  std::vector<uint32_t> order(count);
  std::iota(order.begin(), order.end(), 0u);
  const float* v = mesh.vertices.data();
  auto position = [&](uint32_t n) {
    return std::array<float, 3>{v[n * std::size_t{3}], v[n * std::size_t{3} + 1],
                                v[n * std::size_t{3} + 2]};
  };
  // Stable: among equal positions the lowest index comes first and becomes the survivor.
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return position(a) < position(b); });
  std::vector<uint32_t> survivor(count);
  std::iota(survivor.begin(), survivor.end(), 0u);
  std::size_t merged = 0;
  for (std::size_t n = 1; n < count; ++n) {
    if (position(order[n]) == position(order[n - 1])) {
      survivor[order[n]] = survivor[order[n - 1]];
      ++merged;
    }
  }
  if (merged > 0) {
    for (uint32_t& index : mesh.indices) {
      index = survivor[index];
    }
  }
  return merged;
}

std::size_t remove_degenerate_faces(Mesh& mesh) {
  const auto& v = mesh.vertices;
  const auto& idx = mesh.indices;
  return filter_faces(mesh, [&](std::size_t f) {
    const std::size_t a = idx[f * 3], b = idx[f * 3 + 1], c = idx[f * 3 + 2];
    if (a == b || b == c || a == c) {
      return false;
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
  const std::size_t faces = mesh.face_count();
  std::vector<std::array<uint32_t, 3>> keys(faces);
  for (std::size_t f = 0; f < faces; ++f) {
    keys[f] = {mesh.indices[f * 3], mesh.indices[f * 3 + 1], mesh.indices[f * 3 + 2]};
    std::sort(keys[f].begin(), keys[f].end());
  }
  std::vector<uint32_t> order(faces);
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return keys[a] < keys[b]; });
  std::vector<uint8_t> keep(faces, 1);
  for (std::size_t n = 1; n < faces; ++n) {
    if (keys[order[n]] == keys[order[n - 1]]) {
      keep[order[n]] = 0;  // the earliest face of each set sorts first and stays
    }
  }
  return filter_faces(mesh, [&](std::size_t f) { return keep[f] != 0; });
}

std::size_t cancel_opposite_faces(Mesh& mesh) {
  const std::size_t faces = mesh.face_count();
  // Key: the sorted vertex set; winding: whether sorting took an odd number of swaps.
  std::vector<std::array<uint32_t, 3>> keys(faces);
  std::vector<uint8_t> odd(faces, 0);
  for (std::size_t f = 0; f < faces; ++f) {
    auto& k = keys[f];
    k = {mesh.indices[f * 3], mesh.indices[f * 3 + 1], mesh.indices[f * 3 + 2]};
    for (const auto& [x, y] : {std::pair{0, 1}, std::pair{1, 2}, std::pair{0, 1}}) {
      if (k[x] > k[y]) {
        std::swap(k[x], k[y]);
        odd[f] ^= 1;
      }
    }
  }
  std::vector<uint32_t> order(faces);
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return keys[a] < keys[b]; });
  std::vector<uint8_t> keep(faces, 1);
  for (std::size_t begin = 0; begin < faces;) {
    std::size_t end = begin + 1;
    while (end < faces && keys[order[end]] == keys[order[begin]]) {
      ++end;
    }
    std::size_t windings[2] = {0, 0};
    for (std::size_t n = begin; n < end; ++n) {
      ++windings[odd[order[n]]];
    }
    // Drop the minority winding and as many of the majority's last faces.
    const std::size_t cancel = std::min(windings[0], windings[1]);
    std::size_t dropped[2] = {0, 0};
    for (std::size_t n = end; n-- > begin;) {
      const uint8_t w = odd[order[n]];
      if (dropped[w] < cancel) {
        keep[order[n]] = 0;
        ++dropped[w];
      }
    }
    begin = end;
  }
  return filter_faces(mesh, [&](std::size_t f) { return keep[f] != 0; });
}

std::size_t remove_unreferenced_vertices(Mesh& mesh) {
  const std::size_t count = mesh.vertex_count();
  std::vector<uint32_t> new_index(count, UINT32_MAX);
  for (const uint32_t index : mesh.indices) {
    new_index[index] = 0;
  }
  uint32_t next = 0;
  for (std::size_t n = 0; n < count; ++n) {
    if (new_index[n] == 0) {
      new_index[n] = next;
      std::copy_n(mesh.vertices.begin() + static_cast<std::ptrdiff_t>(n * 3), 3,
                  mesh.vertices.begin() + static_cast<std::ptrdiff_t>(next * std::size_t{3}));
      ++next;
    }
  }
  mesh.vertices.resize(next * std::size_t{3});
  for (uint32_t& index : mesh.indices) {
    index = new_index[index];
  }
  return count - next;
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
  std::vector<BoundingBox> boxes(components);
  std::vector<uint8_t> seen(components, 0);
  BoundingBox whole;
  bool any = false;
  for (std::size_t f = 0; f < labels.size(); ++f) {
    BoundingBox& box = boxes[labels[f]];
    for (int corner = 0; corner < 3; ++corner) {
      const float* p = &mesh.vertices[mesh.indices[f * 3 + corner] * std::size_t{3}];
      for (int axis = 0; axis < 3; ++axis) {
        const bool first = seen[labels[f]] == 0;
        box.min[axis] = first ? p[axis] : std::min(box.min[axis], p[axis]);
        box.max[axis] = first ? p[axis] : std::max(box.max[axis], p[axis]);
        whole.min[axis] = any ? std::min(whole.min[axis], p[axis]) : p[axis];
        whole.max[axis] = any ? std::max(whole.max[axis], p[axis]) : p[axis];
      }
      seen[labels[f]] = 1;
      any = true;
    }
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
    report.degenerate_faces = remove_degenerate_faces(mesh);
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
