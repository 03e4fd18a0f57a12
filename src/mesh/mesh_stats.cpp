#include "cube3d/mesh/mesh_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

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

std::vector<uint32_t> non_manifold_vertices(const Mesh& mesh) {
  std::vector<uint32_t> bad;
  const std::vector<DirectedEdge> edges = sorted_edges(mesh);
  for (std::size_t begin = 0; begin < edges.size();) {
    std::size_t end = begin + 1;
    while (end < edges.size() && edges[end].low == edges[begin].low &&
           edges[end].high == edges[begin].high) {
      ++end;
    }
    if (end - begin > 2 || (end - begin == 2 && edges[begin].forward == edges[begin + 1].forward)) {
      bad.push_back(edges[begin].low);
      bad.push_back(edges[begin].high);
    }
    begin = end;
  }

  // Fans: the corners of a vertex, joined across each edge at the vertex that two faces share.
  // Corner c = 3 f + k has vertex v, next n and previous p; the corner across edge (v, n) is the
  // one of vertex v whose previous vertex is n.
  const std::size_t corners = mesh.indices.size();
  struct Key {
    uint32_t vertex, previous, corner;
    bool operator<(const Key& o) const {
      return vertex != o.vertex       ? vertex < o.vertex
             : previous != o.previous ? previous < o.previous
                                      : corner < o.corner;
    }
  };
  std::vector<Key> keys(corners);
  for (std::size_t c = 0; c < corners; ++c) {
    const std::size_t f = c / 3 * 3;
    keys[c] = {mesh.indices[c], mesh.indices[f + (c + 2) % 3], static_cast<uint32_t>(c)};
  }
  std::sort(keys.begin(), keys.end());
  std::vector<uint32_t> parent(corners);
  std::iota(parent.begin(), parent.end(), 0u);
  auto find = [&](uint32_t x) {
    while (parent[x] != x) {
      parent[x] = parent[parent[x]];
      x = parent[x];
    }
    return x;
  };
  for (std::size_t c = 0; c < corners; ++c) {
    const std::size_t f = c / 3 * 3;
    const uint32_t vertex = mesh.indices[c];
    const uint32_t next = mesh.indices[f + (c + 1) % 3];
    auto it = std::lower_bound(keys.begin(), keys.end(), Key{vertex, next, 0});
    if (it != keys.end() && it->vertex == vertex && it->previous == next &&
        (it + 1 == keys.end() || it[1].vertex != vertex || it[1].previous != next)) {
      const uint32_t a = find(static_cast<uint32_t>(c));
      const uint32_t b = find(it->corner);
      parent[std::max(a, b)] = std::min(a, b);
    }
  }
  // keys are grouped by vertex: a vertex with corners in two fans is a pinch.
  for (std::size_t begin = 0; begin < corners;) {
    std::size_t end = begin + 1;
    const uint32_t root = find(keys[begin].corner);
    bool pinched = false;
    while (end < corners && keys[end].vertex == keys[begin].vertex) {
      pinched |= find(keys[end].corner) != root;
      ++end;
    }
    if (pinched) {
      bad.push_back(keys[begin].vertex);
    }
    begin = end;
  }
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
  std::iota(parent.begin(), parent.end(), 0u);
  auto find = [&](uint32_t v) {
    while (parent[v] != v) {
      parent[v] = parent[parent[v]];
      v = parent[v];
    }
    return v;
  };
  for (std::size_t f = 0; f + 2 < mesh.indices.size(); f += 3) {
    uint32_t root = find(mesh.indices[f]);
    for (int corner = 1; corner < 3; ++corner) {
      const uint32_t other = find(mesh.indices[f + corner]);
      if (other != root) {
        parent[std::max(root, other)] = std::min(root, other);
        root = std::min(root, other);
      }
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
