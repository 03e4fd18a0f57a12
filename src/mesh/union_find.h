// Union-find over a caller's array of parents (one per element), as the mesh layer uses it to
// join corners into fans and vertices into components. Joining keeps the lower root, so a set's
// root is its lowest element whatever the order of the joins: clean-up and the mesh statistics
// then agree on which fan of a vertex is its first, and labels come out in input order.
//
// Private to src/mesh/.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace cube3d::union_find {

// Every element its own set.
inline void reset(uint32_t* parent, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) parent[i] = static_cast<uint32_t>(i);
}

// The root of x's set (path halving: each step points an element at its grandparent).
inline uint32_t find(uint32_t* parent, uint32_t x) {
  while (parent[x] != x) x = parent[x] = parent[parent[x]];
  return x;
}

// Joins the sets of a and b; returns the joined set's root (the lower of the two roots).
inline uint32_t join(uint32_t* parent, uint32_t a, uint32_t b) {
  const uint32_t ra = find(parent, a), rb = find(parent, b);
  const uint32_t root = std::min(ra, rb);
  parent[std::max(ra, rb)] = root;
  return root;
}

}  // namespace cube3d::union_find
