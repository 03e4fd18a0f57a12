// The tensors a checkpoint must hold for a given config: names (the official modules'
// state_dict names), shapes and roles. One spec per model (shape GPT, shape tokenizer, CLIP
// text encoder) drives both the check of a checkpoint and its random weights (weights.h), so
// the two cannot disagree about what a model is made of.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cube3d/core/model_config.h"
#include "cube3d/model/clip_text_config.h"

namespace cube3d {

// A tensor's part in its model: decides the dtype it runs in (norm parameters, the codebook and
// the Fourier frequencies stay float32) and how random_checkpoint scales its values.
enum class TensorRole { kWeight, kBias, kNormWeight, kNormBias, kEmbedding, kCodebook, kFourier };

// How random_checkpoint draws a spec's tensors. Demo models and tests depend on the exact
// numbers a seed gives, so each model keeps the scheme its seeds were chosen with.
enum class RandomInit {
  // Each tensor from its own generator seeded from (seed, name), drawn in the run dtype on the
  // run device: the CPU fills tensors in parallel and values do not depend on the order, but a
  // GPU draws other numbers than the CPU. Embeddings N(0, 1).
  kPerTensor,
  // One CPU generator drawn through the tensors in spec order, in float32, then moved to the
  // device: the same numbers on every device, for a model small enough to draw serially.
  // Embeddings N(0, 0.02), transformers' initialisation.
  kSequentialCpu,
};

struct TensorSpec {
  // Names the tensor may be stored under; the first is canonical. A tensor shared by several
  // modules (the Fourier embedder) may be present under any one of them.
  std::vector<std::string> names;
  std::vector<int64_t> shape;
  TensorRole role = TensorRole::kWeight;

  const std::string& name() const { return names.front(); }
};

struct CheckpointSpec {
  std::string what;  // "shape GPT" / "shape tokenizer" / "CLIP text", for messages
  std::vector<TensorSpec> tensors;
  // Tensors under these prefixes belong to modules we never run (the shape encoder): accepted
  // in a checkpoint and never loaded.
  std::vector<std::string> ignored_prefixes;
  RandomInit random_init = RandomInit::kPerTensor;
  // What the shapes were derived from, for messages: a mismatch may be the config's fault.
  std::string config_source = "the model config";
};

CheckpointSpec gpt_checkpoint_spec(const GptConfig& config);
CheckpointSpec shape_tokenizer_checkpoint_spec(const ShapeModelConfig& config);
// CLIPTextModel's state dict, every name under `prefix` ("text_model." as CLIPModel and
// transformers 4 store it, "" as transformers 5 stores a CLIPTextModel), in the order that
// kSequentialCpu draws in: the demo model's CLIP weights depend on it.
CheckpointSpec clip_text_checkpoint_spec(const ClipTextConfig& config, const std::string& prefix);

std::string shape_to_string(const std::vector<int64_t>& shape);

}  // namespace cube3d
