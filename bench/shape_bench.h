// The shape stage of cube3d-bench: one object's tokens through the shape pipeline (latents,
// occupancy field, marching cubes, post-processing, GLB), timed stage by stage. Its own file
// because it times another layer (the pipeline) than the decode benchmark, and its table lines
// and the JSON's "mesh" object are a section of their own (bench/README.md, "Shape section").
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <nlohmann/json.hpp>

#include "bench_options.h"

namespace cube3d {
class Engine;
}  // namespace cube3d

namespace cube3d::bench {

// One object's tokens -> file through the shape pipeline, as the server and cube3d-generate
// make it, once per occupancy mode asked for; the stages' times are means over --mesh-repeat.
// Prints one line per occupancy mode and returns the JSON's "mesh" object.
nlohmann::json bench_shape(Engine& engine, const at::Tensor& ids, int64_t resolution,
                           const Settings& s, double tokens_ms);

}  // namespace cube3d::bench
