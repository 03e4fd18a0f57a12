// CLIP's text transformer with the semantics of Hugging Face's CLIPTextModel: the engine
// conditions the shape GPT on its last_hidden_state at every one of the 77 positions, padding
// included, so the padding positions must match transformers exactly too. Always float32 (the
// official pipeline never runs CLIP under autocast). Pure forward math on ATen ops.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cube3d/model/clip_text_config.h"
#include "cube3d/model/layers.h"

namespace cube3d {

struct ClipTextLayerWeights {
  at::Tensor ln1_weight, ln1_bias;
  Linear qkv;  // q_proj, k_proj, v_proj stacked into one [3 * hidden, hidden] matmul
  Linear out_proj;
  at::Tensor ln2_weight, ln2_bias;
  Linear fc1, fc2;
};

struct ClipTextWeights {
  at::Tensor token_embedding;     // [vocab, hidden]
  at::Tensor position_embedding;  // [max_positions, hidden]
  std::vector<ClipTextLayerWeights> layers;
  at::Tensor final_ln_weight, final_ln_bias;
};

class ClipTextModel {
 public:
  // `folder_or_file` is a Hugging Face model folder (config.json + model.safetensors) or a
  // safetensors file with a config.json beside it. Only the text transformer's tensors are
  // read: `text_model.*` (CLIPModel, and CLIPTextModel as transformers 4 saves it) or the same
  // names without the prefix (CLIPTextModel as transformers 5 saves it); the vision tower,
  // projections, logit_scale and the position_ids buffer stay on disk. Weights become float32
  // on `device`. Throws not_found for missing files and invalid_argument listing every missing,
  // unexpected and misshapen text tensor at once, naming the file.
  static ClipTextModel load(const std::string& folder_or_file, at::Device device);

  // Random weights for `config`, the same for the same seed on every machine (the demo model
  // and the bench).
  static ClipTextModel random(const ClipTextConfig& config, uint64_t seed, at::Device device);

  ClipTextModel(ClipTextConfig config, ClipTextWeights weights);

  const ClipTextConfig& config() const { return config_; }
  const ClipTextWeights& weights() const { return weights_; }
  at::Device device() const { return weights_.token_embedding.device(); }

  // input_ids [B, L] (int64 or int32, 1 <= L <= max_position_embeddings, every id < vocab) and
  // attention_mask [B, L] (nonzero = real token, any dtype) -> last_hidden_state [B, L, hidden]
  // float32 on the model's device. Inputs may live on any device. Const and free of mutable
  // state, so any number of threads may call it at once. Throws invalid_argument for bad
  // inputs.
  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& attention_mask) const;

 private:
  ClipTextConfig config_;
  ClipTextWeights weights_;
  bool quick_gelu_;
};

}  // namespace cube3d
