// The shape stage of cube3d-bench (shape_bench.h).
#include "shape_bench.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cube3d/engine/engine.h"
#include "cube3d/mesh/grid.h"
#include "cube3d/pipeline/shape_pipeline.h"
#include "device_probe.h"

namespace cube3d::bench {
namespace {

// The resolution of the one untimed run per occupancy mode.
constexpr int64_t kMeshWarmupResolution = 4;

}  // namespace

nlohmann::json bench_shape(Engine& engine, const at::Tensor& ids, int64_t resolution,
                           const Settings& s, double tokens_ms) {
  const int64_t n = grid_points_per_axis(resolution);
  nlohmann::json by_mode = nlohmann::json::array();
  std::printf("\nshape (resolution %lld, %lld^3 grid, GLB, mean of %lld; tokens %.1f ms):\n",
              static_cast<long long>(resolution), static_cast<long long>(n),
              static_cast<long long>(s.mesh_repeat), tokens_ms);
  for (const bool hierarchical : s.occupancy_modes) {
    ShapeOptions options;
    options.occupancy.sampling.hierarchical = hierarchical;
    const ShapePipeline pipeline(engine, options);
    ShapeRequest request;
    request.format = MeshFormat::kGlb;
    // One small warm-up pays the first-call costs (thread pools, allocator, library handles)
    // without doubling a run that takes seconds at the default resolution.
    if (s.warmup > 0) {
      request.resolution_base = std::min<int64_t>(resolution, kMeshWarmupResolution);
      (void)pipeline.make_shape(ids, request);
    }
    request.resolution_base = resolution;
    std::vector<Shape> runs;
    for (int64_t i = 0; i < s.mesh_repeat; ++i) {
      synchronize(engine.device());
      runs.push_back(pipeline.make_shape(ids, request));
    }
    const auto avg = [&](double ShapeReport::*field) {
      double sum = 0;
      for (const Shape& r : runs) sum += r.report.*field;
      return sum / static_cast<double>(runs.size());
    };
    const Shape& last = runs.back();
    const ShapeReport& r = last.report;
    const double shape_ms = avg(&ShapeReport::total_ms);
    const std::string mode = hierarchical ? "hierarchical" : "dense";
    std::printf(
        "  %-12s latents %.2f ms | occupancy %.2f ms (%lld of %lld points, %.1fx fewer) | "
        "marching cubes %.2f ms (%zu faces) | post-process %.2f ms | encode %.2f ms -> %zu "
        "faces | shape %.1f ms, object %.1f ms\n",
        mode.c_str(), avg(&ShapeReport::latents_ms), avg(&ShapeReport::occupancy_ms),
        static_cast<long long>(r.occupancy.points_evaluated),
        static_cast<long long>(r.occupancy.dense_points),
        static_cast<double>(r.occupancy.dense_points) /
            static_cast<double>(std::max<int64_t>(1, r.occupancy.points_evaluated)),
        avg(&ShapeReport::marching_cubes_ms), r.mesh.marching_cubes_faces,
        avg(&ShapeReport::postprocess_ms), avg(&ShapeReport::encode_ms), last.mesh.face_count(),
        shape_ms, tokens_ms + shape_ms);
    if (!r.has_surface) {
      std::printf(
          "  note: the occupancy field does not cross level 0 (random weights), so the mesh "
          "is empty and marching cubes has nothing to do\n");
    }
    by_mode.push_back(
        {{"occupancy", mode},
         {"occupancy_points", r.occupancy.points_evaluated},
         {"dense_points", r.occupancy.dense_points},
         {"points_per_level", r.occupancy.points_per_level},
         {"latents_ms", avg(&ShapeReport::latents_ms)},
         {"occupancy_ms", avg(&ShapeReport::occupancy_ms)},
         {"marching_cubes_ms", avg(&ShapeReport::marching_cubes_ms)},
         {"marching_cubes_faces", r.mesh.marching_cubes_faces},
         {"postprocess_ms", avg(&ShapeReport::postprocess_ms)},
         {"pipeline_ms", avg(&ShapeReport::marching_cubes_ms) + avg(&ShapeReport::postprocess_ms)},
         {"encode_ms", avg(&ShapeReport::encode_ms)},
         {"shape_ms", shape_ms},
         {"object_ms", tokens_ms + shape_ms},
         {"faces", last.mesh.face_count()},
         {"file_bytes", last.encoded.size()}});
  }
  // The first mode's figures at the top level (the layout before modes), all of them below.
  nlohmann::json out = by_mode.front();
  out["resolution_base"] = resolution;
  out["repeat"] = s.mesh_repeat;
  out["grid_points_per_axis"] = n;
  out["tokens_ms"] = tokens_ms;
  out["by_occupancy"] = by_mode;
  return out;
}

}  // namespace cube3d::bench
