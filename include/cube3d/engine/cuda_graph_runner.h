// The CUDA-graph decode runner: one captured graph per batch bucket. The decode step (every
// layer, the CFG mix and the sampler) is recorded once on the runner's static buffers; each
// token then only replays it, with no launch gaps and no host work between kernels.
#pragma once

#include <memory>

#include "cube3d/engine/decode_runner.h"

namespace cube3d {

// True when this build carries the runner (libtorch with CUDA and the CUDA toolkit's headers)
// AND a CUDA device is present.
bool cuda_graphs_available();

// Throws failed_precondition when cuda_graphs_available() is false. The runner captures its
// graph on first use (or in prepare()), and again if the single-stream mode changes.
std::unique_ptr<DecodeRunner> make_cuda_graph_runner(const ShapeGpt& gpt, KvState cache,
                                                     DecodeRunnerConfig config);

}  // namespace cube3d
