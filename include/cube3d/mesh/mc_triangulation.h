// The marching-cubes triangulation of one cell, generated at first use instead of typed in as a
// 256-case table (where one typo silently breaks watertightness).
//
// Conventions
// - Corner c = x | y << 1 | z << 2 (offsets 0 or 1 from the cell's lowest grid point). A cell's
//   case has bit c set when corner c is inside (value > level).
// - Edge e = axis * 4 + b0 + 2 * b1: the edge along `axis` whose end points have offsets b0 and b1
//   along the other two axes, in increasing axis order.
// - Face f = axis * 2 + side: the face at offset `side` (0 or 1) along `axis`.
//
// Construction: on every face, the iso-line separates inside from outside corners. Seen from
// outside the cell, each segment runs with the inside corners on its right. A face with four
// crossings (diagonal corners alike, "ambiguous") is resolved by a bit: joined (the two inside
// corners connect across the face: the bilinear saddle is inside) or separated. The segments
// chain into closed loops around the cell (each crossing ends one segment and starts the next),
// and each loop becomes a triangle fan. Loops whose every fan would put a diagonal between two
// vertices on one cell face (a diagonal the neighbour cell could also use, gluing four triangles
// to one edge) are fanned around an extra centre vertex instead.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace cube3d::mc {

// An ambiguous face of a case: its two inside corners and its two outside corners (diagonals).
struct AmbiguousFace {
  uint8_t face = 0;
  uint8_t inside[2] = {0, 0};
  uint8_t outside[2] = {0, 0};
};

// Vertex references of triangles: 0..11 are edge vertices, kCentreRef + n is the centre of
// loop n of `centre_loops` (a bit mask of the loop's edges).
inline constexpr uint8_t kCentreRef = 12;

struct CellTriangulation {
  std::span<const uint8_t> refs;  // three per triangle, counter-clockwise seen from outside
  std::span<const uint16_t> centre_loops;
};

class Triangulation {
 public:
  static const Triangulation& instance();

  // Ambiguous faces of a case, in increasing face order; bit n of `joined_mask` in triangulation()
  // decides face n of this list (set: joined), so joined_mask < 2^(number of faces).
  std::span<const AmbiguousFace> ambiguous_faces(unsigned cell_case) const;
  CellTriangulation triangulation(unsigned cell_case, unsigned joined_mask) const;

  Triangulation(const Triangulation&) = delete;
  Triangulation& operator=(const Triangulation&) = delete;

 private:
  Triangulation();

  struct Entry {
    uint32_t ref_offset = 0;
    uint32_t ref_count = 0;
    uint32_t centre_offset = 0;
    uint32_t centre_count = 0;
  };
  std::vector<AmbiguousFace> faces_;    // all cases' ambiguous faces, case by case
  std::vector<uint32_t> case_faces_;    // [257]: case c's faces are [c], [c + 1)
  std::vector<uint32_t> case_entries_;  // [256]: first entry of case c (one per joined mask)
  std::vector<Entry> entries_;
  std::vector<uint8_t> refs_;
  std::vector<uint16_t> centre_loops_;
};

// The two corners of an edge, lower corner first.
inline constexpr void edge_corners(unsigned edge, unsigned& c0, unsigned& c1) {
  const unsigned axis = edge / 4;
  const unsigned b0 = edge & 1u;
  const unsigned b1 = (edge >> 1) & 1u;
  const unsigned other0 = axis == 0 ? 1 : 0;
  const unsigned other1 = axis == 2 ? 1 : 2;
  c0 = (b0 << other0) | (b1 << other1);
  c1 = c0 | (1u << axis);
}

}  // namespace cube3d::mc
