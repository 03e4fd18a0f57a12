#include "cube3d/mesh/mc_triangulation.h"

#include <array>
#include <string>

#include "cube3d/core/error.h"

namespace cube3d::mc {
namespace {

constexpr unsigned kNoEdge = 0xFF;

// The edge joining two corners that differ along one axis.
unsigned edge_between(unsigned c0, unsigned c1) {
  const unsigned diff = c0 ^ c1;
  const unsigned axis = diff == 1 ? 0 : diff == 2 ? 1 : 2;
  const unsigned low = c0 & c1;
  const unsigned other0 = axis == 0 ? 1 : 0;
  const unsigned other1 = axis == 2 ? 1 : 2;
  return axis * 4 + ((low >> other0) & 1u) + 2 * ((low >> other1) & 1u);
}

// Bit mask of the two faces that contain an edge.
unsigned edge_face_mask(unsigned edge) {
  const unsigned axis = edge / 4;
  const unsigned other0 = axis == 0 ? 1 : 0;
  const unsigned other1 = axis == 2 ? 1 : 2;
  return (1u << (other0 * 2 + (edge & 1u))) | (1u << (other1 * 2 + ((edge >> 1) & 1u)));
}

// Corners of a face in counter-clockwise order seen from outside the cell. With (axis, u, v)
// cyclic, e_u x e_v = e_axis: the square (0,0) (1,0) (1,1) (0,1) in (u, v) turns
// counter-clockwise seen from +axis, which is outside for side 1; side 0 looks from -axis.
std::array<unsigned, 4> face_corners_ccw(unsigned face) {
  const unsigned axis = face / 2;
  const unsigned side = face % 2;
  const unsigned u = (axis + 1) % 3;
  const unsigned v = (axis + 2) % 3;
  constexpr unsigned square[4][2] = {{0, 0}, {1, 0}, {1, 1}, {0, 1}};
  std::array<unsigned, 4> corners{};
  for (unsigned n = 0; n < 4; ++n) {
    corners[n] = (side << axis) | (square[n][0] << u) | (square[n][1] << v);
  }
  if (side == 0) {
    std::swap(corners[1], corners[3]);
  }
  return corners;
}

bool inside(unsigned cell_case, unsigned corner) { return ((cell_case >> corner) & 1u) != 0; }

}  // namespace

const Triangulation& Triangulation::instance() {
  static const Triangulation table;
  return table;
}

Triangulation::Triangulation() {
  case_faces_.reserve(257);
  case_entries_.reserve(256);
  for (unsigned cell_case = 0; cell_case < 256; ++cell_case) {
    case_faces_.push_back(static_cast<uint32_t>(faces_.size()));
    case_entries_.push_back(static_cast<uint32_t>(entries_.size()));

    // Which faces are ambiguous, and each face's position in the case's list.
    std::array<int, 6> ambiguous_index{-1, -1, -1, -1, -1, -1};
    for (unsigned face = 0; face < 6; ++face) {
      const auto cs = face_corners_ccw(face);
      const bool in0 = inside(cell_case, cs[0]);
      if (in0 == inside(cell_case, cs[2]) && in0 != inside(cell_case, cs[1]) &&
          inside(cell_case, cs[1]) == inside(cell_case, cs[3])) {
        AmbiguousFace amb;
        amb.face = static_cast<uint8_t>(face);
        const unsigned first_in = in0 ? 0 : 1;
        amb.inside[0] = static_cast<uint8_t>(cs[first_in]);
        amb.inside[1] = static_cast<uint8_t>(cs[first_in + 2]);
        amb.outside[0] = static_cast<uint8_t>(cs[1 - first_in]);
        amb.outside[1] = static_cast<uint8_t>(cs[3 - first_in]);
        ambiguous_index[face] = static_cast<int>(faces_.size() - case_faces_[cell_case]);
        faces_.push_back(amb);
      }
    }
    const unsigned ambiguous_count = static_cast<unsigned>(faces_.size() - case_faces_[cell_case]);

    for (unsigned mask = 0; mask < (1u << ambiguous_count); ++mask) {
      // next[e]: the crossing that follows crossing e along its loop.
      std::array<unsigned, 12> next;
      next.fill(kNoEdge);
      unsigned crossing_edges = 0;
      auto link = [&](unsigned from, unsigned to) {
        if (next[from] != kNoEdge) {
          throw internal_error("marching cubes table: crossing " + std::to_string(from) +
                               " starts two segments in case " + std::to_string(cell_case));
        }
        next[from] = to;
      };
      for (unsigned face = 0; face < 6; ++face) {
        const auto cs = face_corners_ccw(face);
        // Crossings in counter-clockwise order; `enters` = the walk goes from outside to inside.
        unsigned edges[4];
        bool enters[4];
        unsigned count = 0;
        for (unsigned n = 0; n < 4; ++n) {
          const unsigned a = cs[n];
          const unsigned b = cs[(n + 1) % 4];
          if (inside(cell_case, a) != inside(cell_case, b)) {
            edges[count] = edge_between(a, b);
            enters[count] = inside(cell_case, b);
            crossing_edges |= 1u << edges[count];
            ++count;
          }
        }
        // With the inside on the right of a segment seen from outside, a segment starts where
        // the counter-clockwise walk enters the inside and ends where it leaves.
        if (count == 2) {
          link(enters[0] ? edges[0] : edges[1], enters[0] ? edges[1] : edges[0]);
        } else if (count == 4) {
          const bool joined = ((mask >> ambiguous_index[face]) & 1u) != 0;
          for (unsigned n = 0; n < 4; ++n) {
            if (enters[n]) {
              // Separated: cut off the inside corner just walked into (next crossing).
              // Joined: cut off the outside corner just walked out of (previous crossing).
              link(edges[n], edges[joined ? (n + 3) % 4 : (n + 1) % 4]);
            }
          }
        }
      }

      Entry entry;
      entry.ref_offset = static_cast<uint32_t>(refs_.size());
      entry.centre_offset = static_cast<uint32_t>(centre_loops_.size());
      unsigned visited = 0;
      for (unsigned start = 0; start < 12; ++start) {
        if (next[start] == kNoEdge || ((visited >> start) & 1u) != 0) {
          continue;
        }
        std::array<unsigned, 12> loop{};
        unsigned n = 0;
        for (unsigned e = start; ((visited >> e) & 1u) == 0; e = next[e]) {
          if (next[e] == kNoEdge) {
            throw internal_error("marching cubes table: open loop in case " +
                                 std::to_string(cell_case));
          }
          visited |= 1u << e;
          loop[n++] = e;
        }
        if (n < 3) {
          throw internal_error("marching cubes table: loop of " + std::to_string(n) +
                               " crossings in case " + std::to_string(cell_case));
        }
        // The first fan root whose diagonals all join vertices on no common face.
        int root = -1;
        for (unsigned r = 0; r < n && root < 0; ++r) {
          bool safe = true;
          for (unsigned k = 2; k + 1 < n; ++k) {
            if ((edge_face_mask(loop[r]) & edge_face_mask(loop[(r + k) % n])) != 0) {
              safe = false;
            }
          }
          if (safe) {
            root = static_cast<int>(r);
          }
        }
        if (root >= 0) {
          for (unsigned k = 1; k + 1 < n; ++k) {
            refs_.push_back(static_cast<uint8_t>(loop[root]));
            refs_.push_back(static_cast<uint8_t>(loop[(root + k) % n]));
            refs_.push_back(static_cast<uint8_t>(loop[(root + k + 1) % n]));
          }
        } else {
          const auto centre = static_cast<uint8_t>(kCentreRef + entry.centre_count);
          uint16_t loop_mask = 0;
          for (unsigned k = 0; k < n; ++k) {
            loop_mask = static_cast<uint16_t>(loop_mask | (1u << loop[k]));
            refs_.push_back(centre);
            refs_.push_back(static_cast<uint8_t>(loop[k]));
            refs_.push_back(static_cast<uint8_t>(loop[(k + 1) % n]));
          }
          centre_loops_.push_back(loop_mask);
          ++entry.centre_count;
        }
      }
      if (visited != crossing_edges) {
        throw internal_error("marching cubes table: crossings left out of loops in case " +
                             std::to_string(cell_case));
      }
      entry.ref_count = static_cast<uint32_t>(refs_.size()) - entry.ref_offset;
      entries_.push_back(entry);
    }
  }
  case_faces_.push_back(static_cast<uint32_t>(faces_.size()));
}

std::span<const AmbiguousFace> Triangulation::ambiguous_faces(unsigned cell_case) const {
  const uint32_t begin = case_faces_[cell_case & 0xFFu];
  const uint32_t end = case_faces_[(cell_case & 0xFFu) + 1];
  return std::span<const AmbiguousFace>(faces_).subspan(begin, end - begin);
}

CellTriangulation Triangulation::triangulation(unsigned cell_case, unsigned joined_mask) const {
  const Entry& entry = entries_[case_entries_[cell_case & 0xFFu] + joined_mask];
  return {
      std::span<const uint8_t>(refs_).subspan(entry.ref_offset, entry.ref_count),
      std::span<const uint16_t>(centre_loops_).subspan(entry.centre_offset, entry.centre_count)};
}

}  // namespace cube3d::mc
