// The hyper-parameters of CLIP's text transformer, as Hugging Face's config.json gives them.
// Torch-free, so that the checkpoint spec (weight_spec.h) is built from it without the model.
#pragma once

#include <cstdint>
#include <string>

#include "cube3d/core/constants.h"

namespace cube3d {

// CLIPTextConfig's fields that shape the forward pass. The defaults are the text model of
// openai/clip-vit-large-patch14, the one Cube 3D uses.
struct ClipTextConfig {
  int64_t vocab_size = 49408;
  int64_t hidden_size = 768;
  int64_t intermediate_size = 3072;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t max_position_embeddings = kClipContextLength;
  std::string hidden_act = "quick_gelu";  // "quick_gelu" or "gelu" (exact erf GELU)
  double layer_norm_eps = 1e-5;

  int64_t head_dim() const { return hidden_size / num_attention_heads; }

  // Throws invalid_argument naming `source` and the offending field.
  void validate(const std::string& source) const;

  // Reads a Hugging Face config.json: a CLIPTextConfig (model_type clip_text_model) or a full
  // CLIPConfig (model_type clip) whose text model is its "text_config_dict" or "text_config"
  // object, with the precedence transformers gives them. A key the file leaves out takes
  // transformers' CLIPTextConfig default (hidden 512, 8 heads, ...: ViT-B/32's, NOT the defaults
  // of this struct), because that is what transformers itself would load. Throws not_found for
  // a missing file and invalid_argument naming the file and the key for a bad value.
  static ClipTextConfig from_json_file(const std::string& path);
};

}  // namespace cube3d
