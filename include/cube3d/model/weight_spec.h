// The tensors a Cube 3D checkpoint must hold for a given config: names (the official modules'
// state_dict names) and shapes. Used to validate checkpoints and to generate random weights.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cube3d/core/model_config.h"

namespace cube3d {

// How random weights are drawn for a tensor (see random_weights.cpp); also documents its role.
enum class TensorRole { kWeight, kBias, kNormWeight, kNormBias, kEmbedding, kCodebook, kFourier };

struct TensorSpec {
  // Names the tensor may be stored under; the first is canonical. A tensor shared by several
  // modules (the Fourier embedder) may be present under any one of them.
  std::vector<std::string> names;
  std::vector<int64_t> shape;
  TensorRole role = TensorRole::kWeight;

  const std::string& name() const { return names.front(); }
};

struct CheckpointSpec {
  std::string what;  // "shape GPT" / "shape tokenizer", for messages
  std::vector<TensorSpec> tensors;
  // Tensors under these prefixes belong to modules we never run (the shape encoder): accepted
  // in a checkpoint and never loaded.
  std::vector<std::string> ignored_prefixes;
};

CheckpointSpec gpt_checkpoint_spec(const GptConfig& config);
CheckpointSpec shape_tokenizer_checkpoint_spec(const ShapeModelConfig& config);

std::string shape_to_string(const std::vector<int64_t>& shape);

}  // namespace cube3d
