// Cube 3D model configuration in the official YAML layout (`gpt_model:`, `shape_model:`),
// as value types. Loading validates every key and names the one at fault.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cube3d/core/constants.h"

namespace cube3d {

// `gpt_model:` (DualStreamRoformer.Config)
struct GptConfig {
  int64_t n_layer = 0;         // dual-stream blocks
  int64_t n_single_layer = 0;  // single-stream blocks after them
  double rope_theta = 10000.0;
  int64_t n_head = 0;
  int64_t n_embd = 0;                  // D
  bool bias = true;                    // bias in c_v, c_k, c_proj, MLPs and text_proj
  double eps = 1e-6;                   // LayerNorm eps (the q/k RMSNorms always use 1e-5)
  int64_t shape_model_vocab_size = 0;  // C: codes; the vocabulary adds BOS, EOS and PAD
  int64_t shape_model_embed_dim = 0;
  int64_t text_model_embed_dim = 0;
  bool use_pooled_text_embed = false;  // only false is supported (last_hidden_state)
  bool encoder_with_cls_token = true;
  bool use_bbox = false;  // v0.5: one more condition token from bbox_proj

  int64_t head_dim() const { return n_embd / n_head; }
  // The shape codes, then BOS, EOS and padding (the last two never generated nor read).
  int64_t vocab_size() const { return shape_model_vocab_size + 3; }
  int64_t bos_id() const { return shape_model_vocab_size; }
};

// `shape_model:` (OneDAutoEncoder.Config); we use the decode side only.
struct ShapeModelConfig {
  bool encoder_with_cls_token = true;
  int64_t num_encoder_latents = 0;  // T: shape tokens per mesh
  int64_t num_decoder_latents = 0;
  int64_t embed_dim = 0;  // codebook dimension
  int64_t width = 0;      // W
  int64_t num_heads = 0;
  int64_t out_dim = 1;
  double eps = 1e-6;
  int64_t num_freqs = 0;  // F of the Fourier embedder
  int64_t point_feats = 0;
  bool embed_point_feats = false;
  int64_t num_encoder_layers = 0;
  std::vector<int64_t> encoder_cross_attention_levels;
  int64_t num_decoder_layers = 0;
  int64_t num_codes = 0;  // C

  int64_t head_dim() const { return width / num_heads; }
  int64_t fourier_dim() const { return 3 * (2 * num_freqs + 1); }
};

struct ModelConfig {
  GptConfig gpt;
  ShapeModelConfig shape;
  std::string text_model_name = "openai/clip-vit-large-patch14";
  // Our extension: when set, weights are generated from this seed at load time and no
  // checkpoint files are read (the demo model; `cube3d-bench` on any size).
  std::optional<uint64_t> random_weights_seed;
  std::string source;  // the file it came from, for messages

  // S: condition tokens (the CLIP positions, plus the bbox token for v0.5).
  int64_t cond_len(int64_t text_tokens = kClipContextLength) const {
    return text_tokens + (gpt.use_bbox ? 1 : 0);
  }
};

// Parses and validates. Throws cube3d::Error (not_found / invalid_argument) naming the file
// and the key: missing, unknown, wrong type, out of range, inconsistent (n_embd not divisible
// by n_head, codes disagreeing between gpt_model and shape_model, ...).
ModelConfig load_model_config(const std::string& path);
ModelConfig parse_model_config(const std::string& yaml_text, const std::string& source);

// Checks the cross-field invariants (also run by the loaders); throws invalid_argument.
void validate_model_config(const ModelConfig& config);

}  // namespace cube3d
