#include "cube3d/mesh/mesh_pipeline.h"

#include <meshoptimizer.h>

#include <algorithm>
#include <bit>

#include "cube3d/core/clock.h"
#include "cube3d/core/error.h"
#include "parallel.h"

namespace cube3d {
namespace {

// A grid can be halved when every side has an odd number of points, 5 or more: 2^r + 1 -> 2^(r-1)
// + 1, the coarse points being the fine grid's even ones (the same world positions).
bool can_halve(const std::array<int64_t, 3>& dims) {
  return std::all_of(dims.begin(), dims.end(), [](int64_t n) { return n >= 5 && n % 2 == 1; });
}

struct HalvedGrid {
  std::vector<float> values;
  std::array<int64_t, 3> dims{0, 0, 0};
};

HalvedGrid halve(const GridView& grid) {
  HalvedGrid out;
  for (int a = 0; a < 3; ++a) out.dims[a] = (grid.dims[a] - 1) / 2 + 1;
  const auto nx = static_cast<std::size_t>(out.dims[0]), ny = static_cast<std::size_t>(out.dims[1]),
             nz = static_cast<std::size_t>(out.dims[2]);
  out.values.resize(nx * ny * nz);
  mesh_parallel::for_each_index(nx, [&](std::size_t i) {
    float* row = out.values.data() + i * ny * nz;
    for (std::size_t j = 0; j < ny; ++j) {
      for (std::size_t k = 0; k < nz; ++k) {
        *row++ = grid.at(static_cast<int64_t>(2 * i), static_cast<int64_t>(2 * j),
                         static_cast<int64_t>(2 * k));
      }
    }
  });
  return out;
}

// Marching cubes within the budget: the grid, halved as often as the surface needs, or (a grid
// that cannot be halved) the whole surface taken to the budget by the sloppy simplifier.
Mesh extract_within_budget(const GridView& grid, const MeshPipelineOptions& options,
                           MeshPipelineReport& report) {
  const std::size_t budget = options.max_marching_cubes_faces;
  MarchingCubesOptions mc = options.marching_cubes;
  mc.max_faces = budget;
  bool over = false;
  Mesh mesh;
  HalvedGrid coarse;
  GridView view = grid;
  const int64_t points = grid.dims[0] * grid.dims[1] * grid.dims[2];
  if (budget > 0 && static_cast<std::size_t>(points) >= options.budget_prediction_points &&
      can_halve(grid.dims)) {
    coarse = halve(grid);
    const GridView halved{coarse.values, coarse.dims};
    Mesh predicted = marching_cubes(halved, mc, &over);
    if (over || predicted.face_count() * 4 > budget) {
      view = halved;
      ++report.coarsened;
      mesh = std::move(predicted);
      over = over || mesh.face_count() > budget;
    } else {
      mesh = marching_cubes(grid, mc, &over);
    }
  } else {
    mesh = marching_cubes(grid, mc, &over);
  }
  report.over_budget = over || report.coarsened > 0;
  while (over && can_halve(view.dims)) {
    HalvedGrid next = halve(view);
    coarse = std::move(next);
    view = GridView{coarse.values, coarse.dims};
    ++report.coarsened;
    mesh = marching_cubes(view, mc, &over);
  }
  if (report.over_budget) report.budget_faces = budget;
  report.extracted_dims = view.dims;
  if (over) {
    mc.max_faces = 0;
    mesh = marching_cubes(view, mc);
    std::vector<uint32_t> kept(mesh.indices.size());
    kept.resize(meshopt_simplifySloppy(kept.data(), mesh.indices.data(), mesh.indices.size(),
                                       mesh.vertices.data(), mesh.vertex_count(), sizeof(float) * 3,
                                       budget * 3, 1.0f, nullptr));
    mesh.indices = std::move(kept);
    remove_unreferenced_vertices(mesh);
    report.sloppy_budget_pass = true;
  }
  return mesh;
}

// The resolution base of a side of 2^r + 1 points, or 0.
int64_t resolution_of(int64_t points) {
  const auto cells = static_cast<uint64_t>(points - 1);
  return points > 1 && std::has_single_bit(cells) ? std::countr_zero(cells) : 0;
}

}  // namespace

std::string budget_warning(const MeshPipelineReport& report, const std::array<int64_t, 3>& dims) {
  if (!report.over_budget) return {};
  std::string text = "the surface had more than " + std::to_string(report.budget_faces) +
                     " marching-cubes faces (max_marching_cubes_faces " +
                     std::to_string(report.budget_faces) + "): ";
  if (report.sloppy_budget_pass) {
    text +=
        "decimated to the budget by the sloppy simplifier before the clean-up, so the mesh "
        "may not be closed";
  } else {
    const int64_t from = resolution_of(dims[0]), to = resolution_of(report.extracted_dims[0]);
    text += from > 0 && to > 0 ? "extracted at resolution_base " + std::to_string(to) +
                                     " instead of " + std::to_string(from)
                               : "extracted from " + std::to_string(report.extracted_dims[0]) +
                                     " grid points a side instead of " + std::to_string(dims[0]);
    text += " (" + std::to_string(report.marching_cubes_faces) + " faces)";
  }
  return text;
}

Mesh grid_to_mesh(const GridView& grid, const MeshPipelineOptions& options,
                  MeshPipelineReport* report) {
  if (options.max_faces && *options.max_faces < 1) {
    throw invalid_argument("mesh max_faces must be at least 1");
  }
  MeshPipelineReport local;
  Mesh mesh = mesh_parallel::with_threads(options.threads, [&] {
    const auto start = SteadyClock::now();
    Mesh mesh = extract_within_budget(grid, options, local);
    local.marching_cubes_faces = mesh.face_count();
    const auto marching_cubes_done = SteadyClock::now();
    local.marching_cubes_ms = ms_between(start, marching_cubes_done);
    if (options.postprocess) {
      local.cleanup = cleanup_mesh(mesh, options.cleanup);
    }
    local.cleanup_faces = mesh.face_count();
    const auto cleanup_done = SteadyClock::now();
    local.cleanup_ms = ms_between(marching_cubes_done, cleanup_done);
    const bool simplify = options.postprocess && options.simplify;
    SimplifyOptions simplification = options.simplification;
    // Over budget, the cheaper path all the way: what the simplifier glues is split at once,
    // without redoing a pass (a surface that large is usually a noisy field, where redos would
    // take round after round).
    if (local.over_budget) simplification.repair_rounds = 0;
    if (!options.max_faces) {
      if (simplify) local.simplification = simplify_mesh(mesh, simplification);
    } else {
      const std::size_t max_faces = *options.max_faces;
      const std::size_t faces = mesh.face_count();
      if (simplify) {
        local.uncapped_target_faces = simplification.target_faces > 0 ? simplification.target_faces
                                                                      : default_target_faces(faces);
        simplification.target_faces = std::min(local.uncapped_target_faces, max_faces);
        local.capped = local.uncapped_target_faces > max_faces && faces > max_faces;
      } else {
        simplification.target_faces = max_faces;
        local.capped = faces > max_faces;
      }
      if (simplify || local.capped) local.simplification = simplify_mesh(mesh, simplification);
      if (mesh.face_count() > max_faces) {
        // meshopt_simplify keeps the topology, so it can stop above its target (and the
        // config's tolerance may accept that): the limit is hard, so the sloppy simplifier,
        // which always reaches its budget, finishes the job, with no error bound.
        local.faces_before_sloppy_pass = mesh.face_count();
        SimplifyOptions sloppy = simplification;
        sloppy.tolerance = 0;
        sloppy.allow_sloppy = true;
        sloppy.max_error = 1.0f;
        const SimplifyReport second = simplify_mesh(mesh, sloppy);
        SimplifyReport& first = local.simplification;
        first.faces_after = second.faces_after;
        first.error = std::max(first.error, second.error);
        first.sloppy = first.sloppy || second.sloppy;
        first.cancelled_faces += second.cancelled_faces;
        first.repair_rounds += second.repair_rounds;
        first.non_manifold_vertices = second.non_manifold_vertices;
      }
    }
    local.simplify_ms = ms_since(cleanup_done);
    if (options.world_coordinates) {
      index_to_world(mesh, local.extracted_dims, options.bound_min, options.bound_max);
    }
    local.postprocess_ms = ms_since(marching_cubes_done);
    return mesh;
  });
  if (report != nullptr) {
    *report = local;
  }
  return mesh;
}

std::vector<Mesh> levels_of_detail(const Mesh& finest, const std::vector<std::size_t>& targets,
                                   const SimplifyOptions& options, int threads,
                                   std::vector<SimplifyReport>* reports) {
  for (const std::size_t target : targets) {
    if (target < 1) throw invalid_argument("a level of detail's target must be at least 1 face");
  }
  return mesh_parallel::with_threads(threads, [&] {
    std::vector<Mesh> levels;
    levels.reserve(targets.size());
    const Mesh* previous = &finest;
    for (const std::size_t target : targets) {
      Mesh level = *previous;
      SimplifyOptions pass = options;
      pass.target_faces = target;
      const SimplifyReport report = simplify_mesh(level, pass);
      if (reports != nullptr) reports->push_back(report);
      levels.push_back(std::move(level));
      previous = &levels.back();
    }
    return levels;
  });
}

}  // namespace cube3d
