// The CUDA-graph decode runner: the decode step (every layer, the CFG mix and the sampler) is
// captured once per single-stream mode on the runner's static buffers, at engine start (the
// lifecycle is GraphDecodeRunner's, graph_runner.h); each token then only replays it, with no
// launch gaps and no host work between kernels.
#pragma once

#include <memory>

#include "cube3d/engine/decode_runner.h"

namespace cube3d {

// True when this build carries the runner (libtorch with CUDA and the CUDA toolkit's headers
// at build time), whether or not this machine has a GPU.
bool cuda_graph_runner_compiled();

// True when the runner is compiled in AND a CUDA device is present.
bool cuda_graphs_available();

// Throws failed_precondition when cuda_graphs_available() is false or the model is not on a
// CUDA device.
std::unique_ptr<DecodeRunner> make_cuda_graph_runner(const ShapeGpt& gpt, KvState cache,
                                                     DecodeRunnerConfig config);

}  // namespace cube3d
