// Checkpoint loading: checks a checkpoint's tensors against the config's CheckpointSpec
// (reporting every missing, unexpected and misshapen tensor at once), converts them to the run
// dtype and device, or generates random weights from a seed for the same spec.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cube3d/core/model_config.h"
#include "cube3d/model/weight_spec.h"

namespace cube3d {

// Canonical tensor name -> tensor, ready for the model.
using TensorMap = std::map<std::string, at::Tensor>;

struct WeightOptions {
  at::ScalarType dtype = at::kFloat;  // matmul weights; norm parameters always stay float32
  at::Device device = at::kCPU;
};

// What a checkpoint offers: every stored name with its shape, and a loader for one name.
struct TensorSource {
  std::string description;  // e.g. the file path, for messages
  std::map<std::string, std::vector<int64_t>> shapes;
  std::function<at::Tensor(const std::string&)> load;
};

TensorSource safetensors_source(const std::string& path);

// Throws invalid_argument listing all problems; a shared tensor stored under several aliases
// must hold the same values under each.
TensorMap resolve_checkpoint(const CheckpointSpec& spec, const TensorSource& source,
                             const WeightOptions& options);

// Random weights for `spec`, deterministic in `seed` (the demo model and the bench).
TensorMap random_checkpoint(const CheckpointSpec& spec, uint64_t seed,
                            const WeightOptions& options);

struct ModelWeights {
  TensorMap gpt;
  TensorMap shape;
};

// Loads both checkpoints (or generates them when the paths are empty and the config has
// random_weights_seed). Throws invalid_argument / not_found naming the file.
ModelWeights load_model_weights(const ModelConfig& config, const std::string& gpt_path,
                                const std::string& shape_path, const WeightOptions& options);

}  // namespace cube3d
