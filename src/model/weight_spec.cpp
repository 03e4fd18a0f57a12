#include "cube3d/model/weight_spec.h"

#include <utility>

namespace cube3d {
namespace {

class SpecBuilder {
 public:
  explicit SpecBuilder(CheckpointSpec& spec) : spec_(spec) {}

  void add(std::string name, std::vector<int64_t> shape, TensorRole role) {
    spec_.tensors.push_back({{std::move(name)}, std::move(shape), role});
  }
  void add_aliases(std::vector<std::string> names, std::vector<int64_t> shape, TensorRole role) {
    spec_.tensors.push_back({std::move(names), std::move(shape), role});
  }
  void linear(const std::string& prefix, int64_t in, int64_t out, bool bias) {
    add(prefix + ".weight", {out, in}, TensorRole::kWeight);
    if (bias) add(prefix + ".bias", {out}, TensorRole::kBias);
  }
  void norm_weight(const std::string& name, int64_t dim) {
    add(name, {dim}, TensorRole::kNormWeight);
  }
  void layer_norm(const std::string& prefix, int64_t dim) {
    norm_weight(prefix + ".weight", dim);
    add(prefix + ".bias", {dim}, TensorRole::kNormBias);
  }

 private:
  CheckpointSpec& spec_;
};

}  // namespace

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

CheckpointSpec gpt_checkpoint_spec(const GptConfig& c) {
  CheckpointSpec spec;
  spec.what = "shape GPT";
  SpecBuilder b(spec);
  const int64_t d = c.n_embd;
  const int64_t hd = c.head_dim();
  b.linear("text_proj", c.text_model_embed_dim, d, c.bias);
  b.linear("shape_proj", c.shape_model_embed_dim, d, /*bias=*/true);
  if (c.use_bbox) b.linear("bbox_proj", 3, d, /*bias=*/true);
  // Rows 0..C-1 are replaced at load by shape_proj(codebook); the checkpoint still has them.
  b.add("transformer.wte.weight", {c.vocab_size(), d}, TensorRole::kEmbedding);

  const auto post = [&](const std::string& p) {
    b.linear(p + ".c_proj", d, d, c.bias);
    b.linear(p + ".mlp.gate_proj", d, 4 * d, c.bias);
    b.linear(p + ".mlp.up_proj", d, 4 * d, c.bias);
    b.linear(p + ".mlp.down_proj", 4 * d, d, c.bias);
  };
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string p = "transformer.dual_blocks." + std::to_string(i);
    const bool cond_pre_only = i == c.n_layer - 1;
    b.linear(p + ".attn.pre_x.c_qk", d, 2 * d, /*bias=*/false);
    b.norm_weight(p + ".attn.pre_x.q_norm.weight", hd);
    b.norm_weight(p + ".attn.pre_x.k_norm.weight", hd);
    b.linear(p + ".attn.pre_x.c_v", d, d, c.bias);
    if (cond_pre_only) {
      b.linear(p + ".attn.pre_c.c_k", d, d, c.bias);
    } else {
      b.linear(p + ".attn.pre_c.c_qk", d, 2 * d, /*bias=*/false);
      b.norm_weight(p + ".attn.pre_c.q_norm.weight", hd);
    }
    b.norm_weight(p + ".attn.pre_c.k_norm.weight", hd);
    b.linear(p + ".attn.pre_c.c_v", d, d, c.bias);
    post(p + ".post_1");
    if (!cond_pre_only) post(p + ".post_2");
  }
  for (int64_t i = 0; i < c.n_single_layer; ++i) {
    const std::string p = "transformer.single_blocks." + std::to_string(i);
    b.linear(p + ".attn.c_qk", d, 2 * d, /*bias=*/false);
    b.linear(p + ".attn.c_v", d, d, c.bias);
    b.linear(p + ".attn.c_proj", d, d, c.bias);
    b.norm_weight(p + ".attn.q_norm.weight", hd);
    b.norm_weight(p + ".attn.k_norm.weight", hd);
    b.linear(p + ".mlp.gate_proj", d, 4 * d, c.bias);
    b.linear(p + ".mlp.up_proj", d, 4 * d, c.bias);
    b.linear(p + ".mlp.down_proj", 4 * d, d, c.bias);
  }
  b.linear("lm_head", d, c.vocab_size(), /*bias=*/false);
  return spec;
}

CheckpointSpec shape_tokenizer_checkpoint_spec(const ShapeModelConfig& c) {
  CheckpointSpec spec;
  spec.what = "shape tokenizer";
  // Only the decode side runs: the encoder and the bottleneck's input projections never do.
  spec.ignored_prefixes = {"encoder.", "bottleneck.block.c_in.", "bottleneck.block.c_x."};
  SpecBuilder b(spec);
  const int64_t w = c.width;
  const int64_t e = c.embed_dim;
  const int64_t hd = c.head_dim();
  // The Fourier embedder is one module shared by encoder and occupancy decoder; a checkpoint
  // saved with safetensors' save_model keeps it under one of these names only.
  b.add_aliases({"occupancy_decoder.embedder.weight", "embedder.weight", "encoder.embedder.weight"},
                {3, c.num_freqs}, TensorRole::kFourier);

  b.add("bottleneck.block.codebook.weight", {c.num_codes, e}, TensorRole::kCodebook);
  b.norm_weight("bottleneck.block.cb_weight", e);
  b.add("bottleneck.block.cb_bias", {e}, TensorRole::kNormBias);
  b.norm_weight("bottleneck.block.norm.weight", e);
  b.linear("bottleneck.block.c_out", e, w, /*bias=*/true);

  b.add("decoder.positional_encodings", {c.num_encoder_latents, w}, TensorRole::kEmbedding);
  for (int64_t i = 0; i < c.num_decoder_layers; ++i) {
    const std::string p = "decoder.blocks." + std::to_string(i);
    b.linear(p + ".attn.c_qk", w, 2 * w, /*bias=*/true);
    b.linear(p + ".attn.c_v", w, w, /*bias=*/true);
    b.linear(p + ".attn.c_proj", w, w, /*bias=*/true);
    b.norm_weight(p + ".attn.q_norm.weight", hd);
    b.norm_weight(p + ".attn.k_norm.weight", hd);
    b.linear(p + ".mlp.up_proj", w, 4 * w, /*bias=*/true);
    b.linear(p + ".mlp.down_proj", 4 * w, w, /*bias=*/true);
  }

  const std::string o = "occupancy_decoder";
  b.linear(o + ".query_in.in_layer", c.fourier_dim(), w, /*bias=*/true);
  b.linear(o + ".query_in.out_layer", w, w, /*bias=*/true);
  b.linear(o + ".attn_out.attn.c_q", w, w, /*bias=*/true);
  b.linear(o + ".attn_out.attn.c_k", w, w, /*bias=*/true);
  b.linear(o + ".attn_out.attn.c_v", w, w, /*bias=*/true);
  b.linear(o + ".attn_out.attn.c_proj", w, w, /*bias=*/true);
  b.linear(o + ".attn_out.mlp.up_proj", w, 4 * w, /*bias=*/true);
  b.linear(o + ".attn_out.mlp.down_proj", 4 * w, w, /*bias=*/true);
  b.layer_norm(o + ".ln_f", w);
  b.linear(o + ".c_head", w, c.out_dim, /*bias=*/true);
  return spec;
}

CheckpointSpec clip_text_checkpoint_spec(const ClipTextConfig& c, const std::string& prefix) {
  CheckpointSpec spec;
  spec.what = "CLIP text";
  spec.random_init = RandomInit::kSequentialCpu;
  SpecBuilder b(spec);
  const int64_t d = c.hidden_size;
  const int64_t f = c.intermediate_size;
  b.add(prefix + "embeddings.token_embedding.weight", {c.vocab_size, d}, TensorRole::kEmbedding);
  b.add(prefix + "embeddings.position_embedding.weight", {c.max_position_embeddings, d},
        TensorRole::kEmbedding);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = prefix + "encoder.layers." + std::to_string(i);
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      b.linear(p + ".self_attn." + proj, d, d, /*bias=*/true);
    }
    b.layer_norm(p + ".layer_norm1", d);
    b.linear(p + ".mlp.fc1", d, f, /*bias=*/true);
    b.linear(p + ".mlp.fc2", f, d, /*bias=*/true);
    b.layer_norm(p + ".layer_norm2", d);
  }
  b.layer_norm(prefix + "final_layer_norm", d);
  return spec;
}

}  // namespace cube3d
