#include "cube3d/mesh/mesh_stats.h"

#include <algorithm>
#include <cmath>

#include "parallel.h"
#include "union_find.h"

namespace cube3d {
namespace {

struct Corners {
  double a[3], b[3], c[3];
};

Corners corners(const Mesh& mesh, std::size_t face) {
  Corners out;
  for (int axis = 0; axis < 3; ++axis) {
    out.a[axis] = mesh.vertices[mesh.indices[face * 3] * std::size_t{3} + axis];
    out.b[axis] = mesh.vertices[mesh.indices[face * 3 + 1] * std::size_t{3} + axis];
    out.c[axis] = mesh.vertices[mesh.indices[face * 3 + 2] * std::size_t{3} + axis];
  }
  return out;
}

// Sorted directed edges, keyed (low, high) with the direction in the lowest bit of a tie-breaker.
struct DirectedEdge {
  uint32_t low, high;
  bool forward;  // runs low -> high
  bool operator<(const DirectedEdge& other) const {
    return low != other.low     ? low < other.low
           : high != other.high ? high < other.high
                                : forward < other.forward;
  }
};

std::vector<DirectedEdge> sorted_edges(const Mesh& mesh) {
  std::vector<DirectedEdge> edges;
  edges.reserve(mesh.indices.size());
  for (std::size_t f = 0; f + 2 < mesh.indices.size(); f += 3) {
    for (int e = 0; e < 3; ++e) {
      const uint32_t from = mesh.indices[f + e];
      const uint32_t to = mesh.indices[f + (e + 1) % 3];
      edges.push_back({std::min(from, to), std::max(from, to), from < to});
    }
  }
  std::sort(edges.begin(), edges.end());
  return edges;
}

}  // namespace

double surface_area(const Mesh& mesh) {
  double area = 0.0;
  for (std::size_t f = 0; f < mesh.face_count(); ++f) {
    const Corners p = corners(mesh, f);
    const double e1[3] = {p.b[0] - p.a[0], p.b[1] - p.a[1], p.b[2] - p.a[2]};
    const double e2[3] = {p.c[0] - p.a[0], p.c[1] - p.a[1], p.c[2] - p.a[2]};
    const double n[3] = {e1[1] * e2[2] - e1[2] * e2[1], e1[2] * e2[0] - e1[0] * e2[2],
                         e1[0] * e2[1] - e1[1] * e2[0]};
    area += 0.5 * std::sqrt(n[0] * n[0] + n[1] * n[1] + n[2] * n[2]);
  }
  return area;
}

double signed_volume(const Mesh& mesh) {
  double volume = 0.0;
  for (std::size_t f = 0; f < mesh.face_count(); ++f) {
    const Corners p = corners(mesh, f);
    // a . (b x c) / 6: the signed volume of the tetrahedron from the origin.
    volume += (p.a[0] * (p.b[1] * p.c[2] - p.b[2] * p.c[1]) +
               p.a[1] * (p.b[2] * p.c[0] - p.b[0] * p.c[2]) +
               p.a[2] * (p.b[0] * p.c[1] - p.b[1] * p.c[0])) /
              6.0;
  }
  return volume;
}

EdgeReport edge_report(const Mesh& mesh) {
  const std::vector<DirectedEdge> edges = sorted_edges(mesh);
  EdgeReport report;
  for (std::size_t begin = 0; begin < edges.size();) {
    std::size_t end = begin + 1;
    while (end < edges.size() && edges[end].low == edges[begin].low &&
           edges[end].high == edges[begin].high) {
      ++end;
    }
    ++report.edges;
    const std::size_t uses = end - begin;
    if (uses == 1) {
      ++report.boundary;
    } else if (uses == 2) {
      ++(edges[begin].forward != edges[begin + 1].forward ? report.manifold : report.misoriented);
    } else {
      ++report.non_manifold;
    }
    begin = end;
  }
  return report;
}

namespace {

// The vertex's corners are c[0..d): next and previous vertex of each. Its edges: a directed edge
// that two faces run alike (a repeated next or a repeated previous) is an edge of three faces or
// more, or of two misoriented ones; both its ends are bad. Its fans: corner a joins the corner
// whose previous vertex is a's next (when exactly one is); more than one fan is a pinch.
// `bad` gets the vertices found (repeats allowed).
// Above this many corners a vertex is checked with sorts instead of pairwise comparisons.
constexpr std::size_t kPairwiseCorners = 32;

void check_vertex(uint32_t v, std::size_t d, const uint32_t* next, const uint32_t* prev,
                  uint32_t* parent, std::vector<uint32_t>& bad) {
  std::vector<std::pair<uint32_t, uint32_t>> by_prev;  // only for a vertex of many corners
  if (d <= kPairwiseCorners) {
    for (std::size_t i = 0; i < d; ++i) {
      for (std::size_t j = i + 1; j < d; ++j) {
        if (next[i] == next[j]) {
          bad.push_back(v);
          bad.push_back(next[i]);
        }
        if (prev[i] == prev[j]) {
          bad.push_back(v);
          bad.push_back(prev[i]);
        }
      }
    }
  } else {
    for (const uint32_t* ends : {next, prev}) {
      std::vector<uint32_t> sorted(ends, ends + d);
      std::sort(sorted.begin(), sorted.end());
      for (std::size_t i = 1; i < d; ++i) {
        if (sorted[i] == sorted[i - 1]) {
          bad.push_back(v);
          bad.push_back(sorted[i]);
        }
      }
    }
    for (std::size_t i = 0; i < d; ++i) by_prev.emplace_back(prev[i], static_cast<uint32_t>(i));
    std::sort(by_prev.begin(), by_prev.end());
  }
  if (d < 2) return;
  union_find::reset(parent, d);
  for (std::size_t a = 0; a < d; ++a) {
    std::size_t match = d, matches = 0;
    if (d <= kPairwiseCorners) {
      for (std::size_t b = 0; b < d; ++b) {
        if (prev[b] == next[a]) {
          match = b;
          ++matches;
        }
      }
    } else {
      auto it = std::lower_bound(by_prev.begin(), by_prev.end(),
                                 std::pair<uint32_t, uint32_t>{next[a], 0});
      for (; it != by_prev.end() && it->first == next[a]; ++it, ++matches) match = it->second;
    }
    if (matches == 1) {
      union_find::join(parent, static_cast<uint32_t>(a), static_cast<uint32_t>(match));
    }
  }
  for (std::size_t i = 1; i < d; ++i) {
    if (union_find::find(parent, static_cast<uint32_t>(i)) != 0) {
      bad.push_back(v);
      return;
    }
  }
}

}  // namespace

std::vector<uint32_t> non_manifold_vertices(const Mesh& mesh) {
  return non_manifold_vertices(mesh.indices, mesh.vertex_count());
}

std::vector<uint32_t> non_manifold_vertices(const std::vector<uint32_t>& idx,
                                            std::size_t vertex_count) {
  // Every vertex's corners (faces) grouped by a linear counting sort, then each vertex looked at
  // alone (check_vertex), in parallel over fixed ranges of vertices. A vertex has a handful of
  // corners, so the quadratic checks are a few dozen comparisons.
  const mesh_parallel::Buckets corners =
      mesh_parallel::bucket_by_key(idx.size(), vertex_count, [&](std::size_t c) { return idx[c]; });
  const std::size_t chunks = mesh_parallel::chunk_count(vertex_count);
  std::vector<std::vector<uint32_t>> found(chunks);
  mesh_parallel::for_each_chunk(vertex_count, [&](std::size_t begin, std::size_t end) {
    std::vector<uint32_t>& bad = found[begin / mesh_parallel::kChunk];
    std::vector<uint32_t> next, prev, parent;
    for (std::size_t vertex = begin; vertex < end; ++vertex) {
      const std::size_t d = corners.size(vertex);
      if (d == 0) continue;
      next.resize(d);
      prev.resize(d);
      parent.resize(d);
      const uint32_t* c = corners.begin(vertex);
      for (std::size_t i = 0; i < d; ++i) {
        const std::size_t face = c[i] / 3 * 3;
        next[i] = idx[face + (c[i] + 1) % 3];
        prev[i] = idx[face + (c[i] + 2) % 3];
      }
      check_vertex(static_cast<uint32_t>(vertex), d, next.data(), prev.data(), parent.data(), bad);
    }
  });
  std::vector<uint32_t> bad;
  for (const auto& part : found) bad.insert(bad.end(), part.begin(), part.end());
  std::sort(bad.begin(), bad.end());
  bad.erase(std::unique(bad.begin(), bad.end()), bad.end());
  return bad;
}

int64_t euler_characteristic(const Mesh& mesh) {
  std::vector<uint8_t> referenced(mesh.vertex_count(), 0);
  for (const uint32_t index : mesh.indices) {
    referenced[index] = 1;
  }
  const auto vertices = std::count(referenced.begin(), referenced.end(), uint8_t{1});
  const auto edges = static_cast<int64_t>(edge_report(mesh).edges);
  return static_cast<int64_t>(vertices) - edges + static_cast<int64_t>(mesh.face_count());
}

std::vector<uint32_t> face_components(const Mesh& mesh, std::size_t* count) {
  // Union-find over vertices, then label faces by their first vertex's root.
  std::vector<uint32_t> parent(mesh.vertex_count());
  union_find::reset(parent.data(), parent.size());
  const auto find = [&](uint32_t v) { return union_find::find(parent.data(), v); };
  for (std::size_t f = 0; f + 2 < mesh.indices.size(); f += 3) {
    uint32_t root = find(mesh.indices[f]);
    for (int corner = 1; corner < 3; ++corner) {
      root = union_find::join(parent.data(), root, mesh.indices[f + corner]);
    }
  }
  std::vector<uint32_t> label_of_root(mesh.vertex_count(), UINT32_MAX);
  std::vector<uint32_t> labels(mesh.face_count());
  uint32_t next = 0;
  for (std::size_t f = 0; f < labels.size(); ++f) {
    uint32_t& label = label_of_root[find(mesh.indices[f * 3])];
    if (label == UINT32_MAX) {
      label = next++;
    }
    labels[f] = label;
  }
  if (count != nullptr) {
    *count = next;
  }
  return labels;
}

}  // namespace cube3d
