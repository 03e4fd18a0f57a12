// One shape's occupancy field on the engine's device: the dense grid (every point, as the
// official code) or coarse-to-fine near the surface (mesh/hierarchical_occupancy.h), through one
// chunked query. Why here and not in the model: choosing points, chunking for the device,
// reporting progress and stopping are scheduling, and the model is pure forward math.
//
// Device-friendly: the latents' keys and values are computed once per shape; a level's points go
// to the device in one copy, its chunks write into one device buffer, and the values come back in
// one copy per level (no synchronous copy per chunk on CUDA).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cube3d/engine/engine.h"
#include "cube3d/mesh/hierarchical_occupancy.h"

namespace cube3d {

struct OccupancyOptions {
  OccupancySamplingOptions sampling;  // dense or hierarchical, coarsest level, dilation
  int64_t chunk_points = 0;           // points per decoder call; 0: Engine::occupancy_chunk_points
};

// "dense" | "hierarchical"; invalid_argument naming `field` otherwise.
bool parse_occupancy_mode(const std::string& text, const std::string& field = "occupancy");
std::string occupancy_mode_name(const OccupancySamplingOptions& sampling);

struct OccupancyProgress {
  int64_t points_done = 0;
  // Points known so far to need evaluation: with refinement it grows level by level.
  int64_t points_planned = 0;
  int64_t levels_done = 0;
  int64_t levels_total = 0;  // levels of refinement (1 for a dense grid), repairs not counted
};

struct OccupancyField {
  std::vector<float> values;  // [N^3] x-major logits (positive = inside)
  int64_t points_per_axis = 0;
  OccupancySamplingReport report;
  double ms = 0;
};

// The field for one shape's latents [1, T, W] (on the engine's device). `on_progress` is called
// after every chunk (a chunk is a fraction of a second of work on a CPU); `should_stop` is asked
// before every chunk and a true answer ends the evaluation with ErrorCode::kCancelled.
OccupancyField evaluate_occupancy(
    const Engine& engine, const at::Tensor& latents, int64_t resolution_base,
    const OccupancyOptions& options,
    const std::function<void(const OccupancyProgress&)>& on_progress = {},
    const std::function<bool()>& should_stop = {});

}  // namespace cube3d
