#include "cube3d/mesh/marching_cubes.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/mesh/mc_triangulation.h"

namespace cube3d {
namespace {

// A slab works with local vertex numbers; the top two bits say which numbering, so that the
// slabs can run independently and be stitched in a fixed order afterwards.
constexpr uint32_t kTagShift = 30;
constexpr uint32_t kOrdinalMask = (1u << kTagShift) - 1;
constexpr uint32_t kOwnedTag = 0;     // an edge vertex this slab creates
constexpr uint32_t kNextSlabTag = 1;  // an edge vertex of the next slab's first plane
constexpr uint32_t kCentreTag = 2;    // a loop centre vertex this slab creates
constexpr uint32_t kNoVertex = 0xFFFFFFFFu;

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

  void run(int64_t first_layer, int64_t end_layer, bool owns_last_plane, SlabOutput& out) {
    std::vector<uint8_t> signs_a(plane_size_), signs_b(plane_size_);
    std::vector<uint32_t> y_a(plane_size_), z_a(plane_size_), y_b(plane_size_), z_b(plane_size_),
        x_edges(plane_size_);
    out_ = &out;

    compute_signs(first_layer, signs_a);
    number_plane(first_layer, signs_a, kOwnedTag, y_a, z_a);
    for (int64_t i = first_layer; i < end_layer; ++i) {
      compute_signs(i + 1, signs_b);
      number_x_edges(i, signs_a, signs_b, x_edges);
      const bool owned = i + 1 < end_layer || owns_last_plane;
      number_plane(i + 1, signs_b, owned ? kOwnedTag : kNextSlabTag, y_b, z_b);
      const Planes planes{signs_a.data(), signs_b.data(), y_a.data(),    z_a.data(),
                          y_b.data(),     z_b.data(),     x_edges.data()};
      emit_cells(i, planes);
      std::swap(signs_a, signs_b);
      std::swap(y_a, y_b);
      std::swap(z_a, z_b);
    }
  }

 private:
  struct Planes {
    const uint8_t* signs_a;
    const uint8_t* signs_b;
    const uint32_t* y_a;
    const uint32_t* z_a;
    const uint32_t* y_b;
    const uint32_t* z_b;
    const uint32_t* x;
  };

  const float* plane_values(int64_t i) const {
    return grid_.values.data() + static_cast<std::size_t>(i) * plane_size_;
  }

  void compute_signs(int64_t i, std::vector<uint8_t>& signs) {
    const float* values = plane_values(i);
    bool nan = false;
    for (std::size_t n = 0; n < plane_size_; ++n) {
      signs[n] = values[n] > level_ ? 1 : 0;
      nan |= std::isnan(values[n]);
    }
    out_->found_nan |= nan;
  }

  void push_vertex(std::vector<float>& vertices, float x, float y, float z) {
    vertices.push_back(x);
    vertices.push_back(y);
    vertices.push_back(z);
  }

  // Numbers the crossing y- and z-edges of plane i in (j, k) order, y before z. The slab that
  // owns the plane also creates their vertices; the slab below only needs the same numbers.
  void number_plane(int64_t i, const std::vector<uint8_t>& signs, uint32_t tag,
                    std::vector<uint32_t>& y_edges, std::vector<uint32_t>& z_edges) {
    const float* values = plane_values(i);
    const bool owned = tag == kOwnedTag;
    std::vector<float>& vertices = out_->edge_vertices;
    std::size_t ordinal = owned ? vertices.size() / 3 : 0;
    const auto x = static_cast<float>(i);
    for (int64_t j = 0; j < ny_; ++j) {
      for (int64_t k = 0; k < nz_; ++k) {
        const std::size_t n = static_cast<std::size_t>(j * nz_ + k);
        y_edges[n] = kNoVertex;
        z_edges[n] = kNoVertex;
        if (j + 1 < ny_ && signs[n] != signs[n + nz_]) {
          y_edges[n] = tagged(tag, ordinal++);
          if (owned) {
            push_vertex(vertices, x,
                        static_cast<float>(j) + crossing(values[n], values[n + nz_], level_),
                        static_cast<float>(k));
          }
        }
        if (k + 1 < nz_ && signs[n] != signs[n + 1]) {
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
                      const std::vector<uint8_t>& signs_b, std::vector<uint32_t>& x_edges) {
    const float* values_a = plane_values(i);
    const float* values_b = plane_values(i + 1);
    std::vector<float>& vertices = out_->edge_vertices;
    const auto x = static_cast<float>(i);
    for (int64_t j = 0; j < ny_; ++j) {
      for (int64_t k = 0; k < nz_; ++k) {
        const std::size_t n = static_cast<std::size_t>(j * nz_ + k);
        if (signs_a[n] != signs_b[n]) {
          x_edges[n] = tagged(kOwnedTag, vertices.size() / 3);
          push_vertex(vertices, x + crossing(values_a[n], values_b[n], level_),
                      static_cast<float>(j), static_cast<float>(k));
        } else {
          x_edges[n] = kNoVertex;
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
      for (int64_t k = 0; k + 1 < nz_; ++k) {
        const std::size_t n = static_cast<std::size_t>(j * nz_ + k);
        const unsigned cell_case = p.signs_a[n] | (p.signs_b[n] << 1) | (p.signs_a[n + nz] << 2) |
                                   (p.signs_b[n + nz] << 3) | (p.signs_a[n + 1] << 4) |
                                   (p.signs_b[n + 1] << 5) | (p.signs_a[n + nz + 1] << 6) |
                                   (p.signs_b[n + nz + 1] << 7);
        if (cell_case == 0 || cell_case == 255) {
          continue;
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
    if (index == kNoVertex) {
      throw internal_error("marching cubes: a cell refers to an edge without a crossing");
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

int resolve_threads(int requested) {
  if (requested > 0) {
    return requested;
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

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

Mesh marching_cubes(const GridView& grid, const MarchingCubesOptions& options) {
  validate_grid(grid);
  if (std::isnan(options.level)) {
    throw invalid_argument("marching cubes: the level is NaN");
  }
  const int64_t layers = grid.dims[0] - 1;
  const int threads = static_cast<int>(std::min<int64_t>(resolve_threads(options.threads), layers));
  // Several slabs per thread balance the load (the surface often sits in a few layers); the
  // output does not depend on how the layers are cut.
  const int64_t slab_count = threads == 1 ? 1 : std::min<int64_t>(layers, int64_t{threads} * 4);
  std::vector<SlabOutput> slabs(static_cast<std::size_t>(slab_count));
  auto slab_begin = [&](int64_t s) { return s * layers / slab_count; };

  std::atomic<int64_t> next_slab{0};
  auto worker = [&] {
    SlabMesher mesher(grid, options.level);
    for (int64_t s = next_slab++; s < slab_count; s = next_slab++) {
      SlabOutput& out = slabs[static_cast<std::size_t>(s)];
      try {
        mesher.run(slab_begin(s), slab_begin(s + 1), s + 1 == slab_count, out);
      } catch (...) {
        out.error = std::current_exception();
      }
    }
  };
  if (threads == 1) {
    worker();
  } else {
    std::vector<std::jthread> pool;
    pool.reserve(static_cast<std::size_t>(threads));
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back(worker);
    }
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
