// How decode steps run: eagerly, as captured CUDA graphs, or through the CPU emulation of the
// graph runner (the same capture lifecycle with eager execution, so CI proves that capturing
// never changes a token). The `--cuda-graphs on|off|emulate` of the tools and the model config.
#pragma once

#include <string>

namespace cube3d {

enum class GraphMode {
  kOff,      // eager decode steps
  kOn,       // one captured CUDA graph per decode variant (CUDA models; eager on the CPU)
  kEmulate,  // the graph runner's lifecycle with eager replays (any device)
};

// "on" | "off" | "emulate"; throws invalid_argument naming `field` otherwise.
GraphMode parse_graph_mode(const std::string& text, const std::string& field = "cuda_graphs");
std::string to_string(GraphMode mode);

}  // namespace cube3d
