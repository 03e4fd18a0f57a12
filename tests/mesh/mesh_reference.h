// Plain reference versions of the mesh layer's linear, parallel passes: the sort-based
// implementations they replaced, kept here so that the tests can check the fast ones against
// them, result for result, on meshes made to be awkward (repeated faces, folds, pinches).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <numeric>
#include <vector>

#include "cube3d/mesh/mesh.h"

namespace cube3d::reference {

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

inline std::size_t merge_duplicate_vertices(Mesh& mesh) {
  const std::size_t count = mesh.vertex_count();
  std::vector<uint32_t> order(count);
  std::iota(order.begin(), order.end(), 0u);
  const float* v = mesh.vertices.data();
  auto position = [&](uint32_t n) {
    return std::array<float, 3>{v[n * std::size_t{3}], v[n * std::size_t{3} + 1],
                                v[n * std::size_t{3} + 2]};
  };
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
  for (uint32_t& index : mesh.indices) index = survivor[index];
  return merged;
}

inline std::size_t remove_duplicate_faces(Mesh& mesh) {
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
    if (keys[order[n]] == keys[order[n - 1]]) keep[order[n]] = 0;
  }
  return filter_faces(mesh, [&](std::size_t f) { return keep[f] != 0; });
}

inline std::size_t cancel_opposite_faces(Mesh& mesh) {
  const std::size_t faces = mesh.face_count();
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
    while (end < faces && keys[order[end]] == keys[order[begin]]) ++end;
    std::size_t windings[2] = {0, 0};
    for (std::size_t n = begin; n < end; ++n) ++windings[odd[order[n]]];
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

inline std::vector<uint32_t> non_manifold_vertices(const Mesh& mesh) {
  struct DirectedEdge {
    uint32_t low, high;
    bool forward;
    bool operator<(const DirectedEdge& o) const {
      return low != o.low ? low < o.low : high != o.high ? high < o.high : forward < o.forward;
    }
  };
  std::vector<DirectedEdge> edges;
  for (std::size_t f = 0; f + 2 < mesh.indices.size(); f += 3) {
    for (int e = 0; e < 3; ++e) {
      const uint32_t from = mesh.indices[f + e], to = mesh.indices[f + (e + 1) % 3];
      edges.push_back({std::min(from, to), std::max(from, to), from < to});
    }
  }
  std::sort(edges.begin(), edges.end());
  std::vector<uint32_t> bad;
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
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  for (std::size_t c = 0; c < corners; ++c) {
    const std::size_t f = c / 3 * 3;
    const uint32_t vertex = mesh.indices[c], next = mesh.indices[f + (c + 1) % 3];
    auto it = std::lower_bound(keys.begin(), keys.end(), Key{vertex, next, 0});
    if (it != keys.end() && it->vertex == vertex && it->previous == next &&
        (it + 1 == keys.end() || it[1].vertex != vertex || it[1].previous != next)) {
      const uint32_t a = find(static_cast<uint32_t>(c)), b = find(it->corner);
      parent[std::max(a, b)] = std::min(a, b);
    }
  }
  for (std::size_t begin = 0; begin < corners;) {
    std::size_t end = begin + 1;
    const uint32_t root = find(keys[begin].corner);
    bool pinched = false;
    while (end < corners && keys[end].vertex == keys[begin].vertex) {
      pinched |= find(keys[end].corner) != root;
      ++end;
    }
    if (pinched) bad.push_back(keys[begin].vertex);
    begin = end;
  }
  std::sort(bad.begin(), bad.end());
  bad.erase(std::unique(bad.begin(), bad.end()), bad.end());
  return bad;
}

}  // namespace cube3d::reference
