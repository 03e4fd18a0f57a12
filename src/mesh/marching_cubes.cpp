#include "cube3d/mesh/marching_cubes.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/mesh/mc_triangulation.h"
#include "parallel.h"

namespace cube3d {
namespace {

// A slab works with local vertex numbers; the top two bits say which numbering, so that the
// slabs can run independently and be stitched in a fixed order afterwards.
constexpr uint32_t kTagShift = 30;
constexpr uint32_t kOrdinalMask = (1u << kTagShift) - 1;
constexpr uint32_t kOwnedTag = 0;     // an edge vertex this slab creates
constexpr uint32_t kNextSlabTag = 1;  // an edge vertex of the next slab's first plane
constexpr uint32_t kCentreTag = 2;    // a loop centre vertex this slab creates

uint32_t tagged(uint32_t tag, std::size_t ordinal) {
  if (ordinal > kOrdinalMask) {
    throw resource_exhausted("marching cubes: more than 2^30 vertices in one slab");
  }
  return (tag << kTagShift) | static_cast<uint32_t>(ordinal);
}

// Where the level crosses the edge from v0 (lower index) to v1, as a fraction of the edge.
float crossing(float v0, float v1, float level) {
  const float t = (level - v0) / (v1 - v0);
  if (std::isfinite(t)) {
    return std::clamp(t, 0.0f, 1.0f);
  }
  // inf / inf: the crossing lies at the finite end, or midway between two infinities.
  if (std::isinf(v0)) {
    return std::isinf(v1) ? 0.5f : 1.0f;
  }
  return 0.0f;
}

struct SlabOutput {
  std::vector<float> edge_vertices;
  std::vector<float> centre_vertices;
  std::vector<uint32_t> indices;  // tagged
  bool found_nan = false;
  std::exception_ptr error;
};

// What a row of a plane (fixed i and j, every k) holds: all outside, all inside, or both. A cell
// row whose four corner rows are all outside (or all inside) has no surface, and an edge between
// two such rows no crossing: most rows of a shape's grid are, and are skipped whole.
enum RowState : uint8_t { kRowOutside = 0, kRowInside = 1, kRowMixed = 2 };

// Shared by a grid's slabs: faces made so far, against the caller's limit.
struct FaceBudget {
  std::size_t limit = 0;  // 0: none
  std::atomic<std::size_t> faces{0};
  std::atomic<bool> exceeded{false};
  // Counts a layer's new faces; false once the limit is passed (by this slab or another).
  bool add(std::size_t new_faces) {
    if (limit == 0) return true;
    if (faces.fetch_add(new_faces, std::memory_order_relaxed) + new_faces > limit) {
      exceeded.store(true, std::memory_order_relaxed);
    }
    return !exceeded.load(std::memory_order_relaxed);
  }
};

// Meshes the cell layers [first_layer, end_layer) with two planes of edge-vertex numbers and one
// layer of x-edge numbers in memory: O(ny * nz) per slab whatever the grid size.
class SlabMesher {
 public:
  SlabMesher(const GridView& grid, float level)
      : grid_(grid),
        level_(level),
        ny_(grid.dims[1]),
        nz_(grid.dims[2]),
        plane_size_(static_cast<std::size_t>(ny_ * nz_)),
        table_(mc::Triangulation::instance()) {}

  // false when the face budget ran out (the slab's output is then incomplete).
  bool run(int64_t first_layer, int64_t end_layer, bool owns_last_plane, SlabOutput& out,
           FaceBudget& budget) {
    std::vector<uint8_t> signs_a(plane_size_), signs_b(plane_size_);
    std::vector<uint8_t> rows_a(static_cast<std::size_t>(ny_)), rows_b(rows_a.size());
    std::vector<uint32_t> y_a(plane_size_), z_a(plane_size_), y_b(plane_size_), z_b(plane_size_),
        x_edges(plane_size_);
    out_ = &out;

    compute_signs(first_layer, signs_a, rows_a);
    number_plane(first_layer, signs_a, rows_a, kOwnedTag, y_a, z_a);
    for (int64_t i = first_layer; i < end_layer; ++i) {
      compute_signs(i + 1, signs_b, rows_b);
      number_x_edges(i, signs_a, signs_b, rows_a, rows_b, x_edges);
      const bool owned = i + 1 < end_layer || owns_last_plane;
      number_plane(i + 1, signs_b, rows_b, owned ? kOwnedTag : kNextSlabTag, y_b, z_b);
      const Planes planes{signs_a.data(), signs_b.data(), rows_a.data(), rows_b.data(), y_a.data(),
                          z_a.data(),     y_b.data(),     z_b.data(),    x_edges.data()};
      const std::size_t faces_before = out.indices.size() / 3;
      emit_cells(i, planes);
      if (!budget.add(out.indices.size() / 3 - faces_before)) return false;
      std::swap(signs_a, signs_b);
      std::swap(rows_a, rows_b);
      std::swap(y_a, y_b);
      std::swap(z_a, z_b);
    }
    return true;
  }

 private:
  struct Planes {
    const uint8_t* signs_a;
    const uint8_t* signs_b;
    const uint8_t* rows_a;
    const uint8_t* rows_b;
    const uint32_t* y_a;
    const uint32_t* z_a;
    const uint32_t* y_b;
    const uint32_t* z_b;
    const uint32_t* x;
  };

  const float* plane_values(int64_t i) const {
    return grid_.values.data() + static_cast<std::size_t>(i) * plane_size_;
  }

  // Two rows (or row pairs) whose states are equal and not mixed hold no crossing between them.
  static bool uniform(uint8_t a, uint8_t b) { return a == b && a != kRowMixed; }

  void compute_signs(int64_t i, std::vector<uint8_t>& signs, std::vector<uint8_t>& rows) {
    const float* values = plane_values(i);
    const std::size_t nz = static_cast<std::size_t>(nz_);
    const float level = level_;
    uint8_t nan = 0;
    for (int64_t j = 0; j < ny_; ++j) {
      const std::size_t row = static_cast<std::size_t>(j) * nz;
      const float* v = values + row;
      uint8_t* sign = signs.data() + row;
      // Plain loops over a row, so that the compiler vectorises each of them.
      for (std::size_t k = 0; k < nz; ++k) sign[k] = v[k] > level ? 1 : 0;
      uint8_t any_inside = 0, all_inside = 1;
      for (std::size_t k = 0; k < nz; ++k) {
        any_inside |= sign[k];
        all_inside &= sign[k];
      }
      for (std::size_t k = 0; k < nz; ++k) nan |= v[k] != v[k] ? 1 : 0;
      rows[static_cast<std::size_t>(j)] = all_inside   ? kRowInside
                                          : any_inside ? kRowMixed
                                                       : kRowOutside;
    }
    out_->found_nan |= nan != 0;
  }

  void push_vertex(std::vector<float>& vertices, float x, float y, float z) {
    vertices.push_back(x);
    vertices.push_back(y);
    vertices.push_back(z);
  }

  // Numbers the crossing y- and z-edges of plane i in (j, k) order, y before z. The slab that
  // owns the plane also creates their vertices; the slab below only needs the same numbers.
  // Only the entries of crossing edges are written: a cell reads no other.
  void number_plane(int64_t i, const std::vector<uint8_t>& signs, const std::vector<uint8_t>& rows,
                    uint32_t tag, std::vector<uint32_t>& y_edges, std::vector<uint32_t>& z_edges) {
    const float* values = plane_values(i);
    const bool owned = tag == kOwnedTag;
    std::vector<float>& vertices = out_->edge_vertices;
    std::size_t ordinal = owned ? vertices.size() / 3 : 0;
    const auto x = static_cast<float>(i);
    for (int64_t j = 0; j < ny_; ++j) {
      const uint8_t row = rows[static_cast<std::size_t>(j)];
      const bool y_crossings = j + 1 < ny_ && !uniform(row, rows[static_cast<std::size_t>(j + 1)]);
      const bool z_crossings = row == kRowMixed;
      if (!y_crossings && !z_crossings) continue;
      const std::size_t row_start = static_cast<std::size_t>(j * nz_);
      const std::size_t nz = static_cast<std::size_t>(nz_);
      for (int64_t k = 0; k < nz_; ++k) {
        const std::size_t n = static_cast<std::size_t>(j * nz_ + k);
        if ((k & 7) == 0 && static_cast<std::size_t>(k) + 9 <= nz) {
          // Eight points without a crossing y- or z-edge are skipped at once.
          const std::size_t at = row_start + static_cast<std::size_t>(k);
          const uint64_t y = y_crossings ? load_word(&signs[at]) ^ load_word(&signs[at + nz]) : 0;
          const uint64_t z = z_crossings ? load_word(&signs[at]) ^ load_word(&signs[at + 1]) : 0;
          if ((y | z) == 0) {
            k += 7;
            continue;
          }
        }
        if (y_crossings && signs[n] != signs[n + nz_]) {
          y_edges[n] = tagged(tag, ordinal++);
          if (owned) {
            push_vertex(vertices, x,
                        static_cast<float>(j) + crossing(values[n], values[n + nz_], level_),
                        static_cast<float>(k));
          }
        }
        if (z_crossings && k + 1 < nz_ && signs[n] != signs[n + 1]) {
          z_edges[n] = tagged(tag, ordinal++);
          if (owned) {
            push_vertex(vertices, x, static_cast<float>(j),
                        static_cast<float>(k) + crossing(values[n], values[n + 1], level_));
          }
        }
      }
    }
  }

  void number_x_edges(int64_t i, const std::vector<uint8_t>& signs_a,
                      const std::vector<uint8_t>& signs_b, const std::vector<uint8_t>& rows_a,
                      const std::vector<uint8_t>& rows_b, std::vector<uint32_t>& x_edges) {
    const float* values_a = plane_values(i);
    const float* values_b = plane_values(i + 1);
    std::vector<float>& vertices = out_->edge_vertices;
    const auto x = static_cast<float>(i);
    for (int64_t j = 0; j < ny_; ++j) {
      if (uniform(rows_a[static_cast<std::size_t>(j)], rows_b[static_cast<std::size_t>(j)])) {
        continue;
      }
      for (int64_t k = 0; k < nz_; ++k) {
        const std::size_t n = static_cast<std::size_t>(j * nz_ + k);
        if ((k & 7) == 0 && k + 8 <= nz_ &&
            (load_word(&signs_a[n]) ^ load_word(&signs_b[n])) == 0) {
          k += 7;  // eight points without a crossing x-edge
          continue;
        }
        if (signs_a[n] != signs_b[n]) {
          x_edges[n] = tagged(kOwnedTag, vertices.size() / 3);
          push_vertex(vertices, x + crossing(values_a[n], values_b[n], level_),
                      static_cast<float>(j), static_cast<float>(k));
        }
      }
    }
  }

  // Offset of corner c from the cell's lowest point within a plane (y and z offsets).
  std::size_t corner_offset(unsigned corner) const {
    return ((corner >> 1) & 1u) * static_cast<std::size_t>(nz_) + ((corner >> 2) & 1u);
  }

  void emit_cells(int64_t i, const Planes& p) {
    const float* values_a = plane_values(i);
    const float* values_b = plane_values(i + 1);
    const std::size_t nz = static_cast<std::size_t>(nz_);
    for (int64_t j = 0; j + 1 < ny_; ++j) {
      const auto row = static_cast<std::size_t>(j);
      const uint8_t state = p.rows_a[row];
      if (state != kRowMixed && p.rows_a[row + 1] == state && p.rows_b[row] == state &&
          p.rows_b[row + 1] == state) {
        continue;  // the four corner rows all outside (or all inside): no surface here
      }
      const std::size_t row_start = row * nz;
      const std::size_t cells = nz - 1;
      // Eight cells at a time: a byte per cell, set where its corners are not all on one side,
      // from the four corner rows' sign bytes; a word of no such cell is skipped whole.
      for (std::size_t k0 = 0; k0 < cells; k0 += 8) {
        uint64_t active = ~uint64_t{0};
        if (k0 + 9 <= nz) {
          active = crossing_cells(p, row_start + k0, nz);
          if (active == 0) continue;
        }
        for (std::size_t k = k0; k < std::min(cells, k0 + 8); ++k) {
          if (((active >> ((k - k0) * 8)) & 0xFF) == 0) continue;
          emit_cell(i, j, static_cast<int64_t>(k), row_start + k, p, values_a, values_b);
        }
      }
    }
  }

  static uint64_t load_word(const uint8_t* at) {
    uint64_t word;
    std::memcpy(&word, at, sizeof word);
    return word;
  }

  // Byte c of the answer is non-zero when cell n + c (of the 8 from n, along k) has corners on
  // both sides. Sign bytes are 0 or 1.
  static uint64_t crossing_cells(const Planes& p, std::size_t n, std::size_t nz) {
    const auto load = load_word;
    const uint64_t a0 = load(p.signs_a + n), a1 = load(p.signs_a + n + nz),
                   b0 = load(p.signs_b + n), b1 = load(p.signs_b + n + nz);
    const uint64_t a0n = load(p.signs_a + n + 1), a1n = load(p.signs_a + n + nz + 1),
                   b0n = load(p.signs_b + n + 1), b1n = load(p.signs_b + n + nz + 1);
    const uint64_t any = a0 | a1 | b0 | b1 | a0n | a1n | b0n | b1n;
    const uint64_t all = a0 & a1 & b0 & b1 & a0n & a1n & b0n & b1n;
    return any & ~all;
  }

  void emit_cell(int64_t i, int64_t j, int64_t k, std::size_t n, const Planes& p,
                 const float* values_a, const float* values_b) {
    const std::size_t nz = static_cast<std::size_t>(nz_);
    const unsigned cell_case = p.signs_a[n] | (p.signs_b[n] << 1) | (p.signs_a[n + nz] << 2) |
                               (p.signs_b[n + nz] << 3) | (p.signs_a[n + 1] << 4) |
                               (p.signs_b[n + 1] << 5) | (p.signs_a[n + nz + 1] << 6) |
                               (p.signs_b[n + nz + 1] << 7);
    if (cell_case == 0 || cell_case == 255) {
      return;
    }
    auto value = [&](unsigned corner) {
      return ((corner & 1u) ? values_b : values_a)[n + corner_offset(corner)];
    };
    // Ambiguous faces: the asymptotic decider, from the face's own four values so that both
    // cells sharing the face decide alike (the products commute, so corner order is moot).
    unsigned joined = 0;
    const auto faces = table_.ambiguous_faces(cell_case);
    for (std::size_t f = 0; f < faces.size(); ++f) {
      const mc::AmbiguousFace& face = faces[f];
      const float inside_product =
          (value(face.inside[0]) - level_) * (value(face.inside[1]) - level_);
      const float outside_product =
          (value(face.outside[0]) - level_) * (value(face.outside[1]) - level_);
      if (inside_product > outside_product) {
        joined |= 1u << f;
      }
    }
    const mc::CellTriangulation tri = table_.triangulation(cell_case, joined);
    const std::size_t centre_base = out_->centre_vertices.size() / 3;
    for (const uint16_t loop : tri.centre_loops) {
      add_centre(i, j, k, loop, value);
    }
    for (const uint8_t ref : tri.refs) {
      uint32_t index;
      if (ref >= mc::kCentreRef) {
        index = tagged(kCentreTag, centre_base + (ref - mc::kCentreRef));
      } else {
        index = edge_vertex(ref, n, p);
      }
      out_->indices.push_back(index);
    }
  }

  uint32_t edge_vertex(unsigned edge, std::size_t n, const Planes& p) const {
    const std::size_t b0 = edge & 1u;
    const std::size_t b1 = (edge >> 1) & 1u;
    const std::size_t nz = static_cast<std::size_t>(nz_);
    uint32_t index;
    switch (edge / 4) {
      case 0:  // x-edge: offsets along y (b0) and z (b1)
        index = p.x[n + b0 * nz + b1];
        break;
      case 1:  // y-edge: offsets along x (b0) and z (b1)
        index = (b0 ? p.y_b : p.y_a)[n + b1];
        break;
      default:  // z-edge: offsets along x (b0) and y (b1)
        index = (b0 ? p.z_b : p.z_a)[n + b1 * nz];
        break;
    }
    return index;
  }

  template <typename ValueFn>
  void add_centre(int64_t i, int64_t j, int64_t k, uint16_t loop, const ValueFn& value) {
    double sum[3] = {0, 0, 0};
    int count = 0;
    for (unsigned edge = 0; edge < 12; ++edge) {
      if (((loop >> edge) & 1u) == 0) {
        continue;
      }
      unsigned c0 = 0, c1 = 0;
      mc::edge_corners(edge, c0, c1);
      const float t = crossing(value(c0), value(c1), level_);
      const unsigned axis = edge / 4;
      for (unsigned a = 0; a < 3; ++a) {
        sum[a] += static_cast<double>((c0 >> a) & 1u) + (a == axis ? t : 0.0f);
      }
      ++count;
    }
    push_vertex(out_->centre_vertices, static_cast<float>(static_cast<double>(i) + sum[0] / count),
                static_cast<float>(static_cast<double>(j) + sum[1] / count),
                static_cast<float>(static_cast<double>(k) + sum[2] / count));
  }

  const GridView& grid_;
  const float level_;
  const int64_t ny_;
  const int64_t nz_;
  const std::size_t plane_size_;
  const mc::Triangulation& table_;
  SlabOutput* out_ = nullptr;
};

}  // namespace

bool has_level_crossing(const GridView& grid, float level) {
  validate_grid(grid);
  bool above = false;
  bool not_above = false;
  for (const float v : grid.values) {
    (v > level ? above : not_above) = true;
    if (above && not_above) {
      return true;
    }
  }
  return false;
}

Mesh marching_cubes(const GridView& grid, const MarchingCubesOptions& options, bool* over_limit) {
  validate_grid(grid);
  if (std::isnan(options.level)) {
    throw invalid_argument("marching cubes: the level is NaN");
  }
  if (over_limit != nullptr) *over_limit = false;
  const int64_t layers = grid.dims[0] - 1;
  FaceBudget budget;
  budget.limit = options.max_faces;
  std::vector<SlabOutput> slabs;
  mesh_parallel::with_threads(options.threads, [&] {
    // Several slabs per thread balance the load (the surface often sits in a few layers); the
    // output does not depend on how the layers are cut.
    const int threads = mesh_parallel::concurrency();
    const int64_t slab_count = threads == 1 ? 1 : std::min<int64_t>(layers, int64_t{threads} * 4);
    slabs.resize(static_cast<std::size_t>(slab_count));
    const auto slab_begin = [&](int64_t s) { return s * layers / slab_count; };
    mesh_parallel::for_each_index(slabs.size(), [&](std::size_t s) {
      SlabOutput& out = slabs[s];
      const auto slab = static_cast<int64_t>(s);
      try {
        if (budget.exceeded.load(std::memory_order_relaxed)) return;
        SlabMesher mesher(grid, options.level);
        mesher.run(slab_begin(slab), slab_begin(slab + 1), slab + 1 == slab_count, out, budget);
      } catch (...) {
        out.error = std::current_exception();
      }
    });
  });
  if (budget.exceeded.load()) {
    // (NaN was checked in the part of the grid seen; the caller meshes another grid next.)
    if (over_limit == nullptr) {
      throw resource_exhausted("marching cubes: the surface has more than " +
                               std::to_string(options.max_faces) + " faces (max_faces)");
    }
    *over_limit = true;
    return Mesh{};
  }

  // Stitch: all edge vertices in grid order, then all centre vertices in cell order.
  std::vector<std::size_t> edge_offset(slabs.size() + 1, 0);
  std::vector<std::size_t> centre_offset(slabs.size() + 1, 0);
  std::size_t index_count = 0;
  for (std::size_t s = 0; s < slabs.size(); ++s) {
    if (slabs[s].error) {
      std::rethrow_exception(slabs[s].error);
    }
    if (slabs[s].found_nan) {
      throw invalid_argument("marching cubes: the grid holds NaN values");
    }
    edge_offset[s + 1] = edge_offset[s] + slabs[s].edge_vertices.size() / 3;
    centre_offset[s + 1] = centre_offset[s] + slabs[s].centre_vertices.size() / 3;
    index_count += slabs[s].indices.size();
  }
  const std::size_t edge_total = edge_offset.back();
  const std::size_t vertex_total = edge_total + centre_offset.back();
  if (vertex_total > 0xFFFFFFFFull) {
    throw resource_exhausted("marching cubes: " + std::to_string(vertex_total) +
                             " vertices do not fit 32-bit indices");
  }

  // Each slab's arrays are released as soon as they are copied, so the peak stays near twice the
  // mesh instead of growing with copies.
  Mesh mesh;
  mesh.vertices.reserve(vertex_total * 3);
  for (SlabOutput& slab : slabs) {
    mesh.vertices.insert(mesh.vertices.end(), slab.edge_vertices.begin(), slab.edge_vertices.end());
    std::vector<float>().swap(slab.edge_vertices);
  }
  for (SlabOutput& slab : slabs) {
    mesh.vertices.insert(mesh.vertices.end(), slab.centre_vertices.begin(),
                         slab.centre_vertices.end());
    std::vector<float>().swap(slab.centre_vertices);
  }
  mesh.indices.reserve(index_count);
  for (std::size_t s = 0; s < slabs.size(); ++s) {
    const std::size_t base[3] = {edge_offset[s], edge_offset[s + 1], edge_total + centre_offset[s]};
    for (const uint32_t index : slabs[s].indices) {
      mesh.indices.push_back(
          static_cast<uint32_t>(base[index >> kTagShift] + (index & kOrdinalMask)));
    }
    std::vector<uint32_t>().swap(slabs[s].indices);
  }
  return mesh;
}

}  // namespace cube3d
