// The shape GPT (official DualStreamRoformer): condition encoding, full causal forward (the
// training semantics, also used as prefill) and the one-token decode step against a KV cache.
// Pure forward math: no scheduling, no sampling, no allocation of caches.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

#include "cube3d/core/model_config.h"
#include "cube3d/model/kv_state.h"
#include "cube3d/model/layers.h"
#include "cube3d/model/weights.h"

namespace cube3d {

// How the single-stream blocks attend during KV decoding (docs/architecture.md, difference 1).
enum class SingleStreamDecode {
  kCausal,     // every earlier shape token, like training and our no-cache path (default)
  kReference,  // the BOS key only, reproducing the official KV-cache path token for token
};
SingleStreamDecode parse_single_stream_decode(const std::string& text);  // "causal"|"reference"
std::string to_string(SingleStreamDecode mode);

// Fused implementations of parts of the decode step that the engine may plug in (its kernels on
// CUDA; the model knows nothing of them). Each computes what the unfused ops compute, up to
// bf16 rounding; an empty member means the unfused ops.
struct DecodeStepFusions {
  // The q/k path of one attention block for one new token per row: `qk` [R, 1, 2D], the q and k
  // columns of the packed projection's output (a view: contiguous in its last dim, its rows
  // qk.stride(0) elements apart); RMSNorm with q_norm / k_norm (eps 1e-5), RoPE by cos / sin
  // [R, 1, 1, hd/2] (float32); writes k into `keys` [R, H, Lmax, hd] at slots [R]; returns q
  // [R, H, 1, hd].
  std::function<at::Tensor(const at::Tensor& qk, const at::Tensor& q_norm, const at::Tensor& k_norm,
                           const at::Tensor& cos, const at::Tensor& sin, at::Tensor& keys,
                           const at::Tensor& slots)>
      qk_norm_rope_store;
};

// Attention inputs of one stream (DismantledPreAttention).
struct PreAttentionWeights {
  Linear c_qk;  // q and k halves, no bias; undefined when the stream has no query
  Linear c_k;   // the last dual block's condition stream: keys only
  Linear c_v;
  at::Tensor q_norm, k_norm;  // RMSNorm(hd) weights; q_norm undefined without query
  // Packed at load (pack_projections): [c_qk ; c_v] (or [c_k ; c_v]) as one linear, so a step
  // runs one GEMM over one weight stream, with the bias inside it (zeros for the q and k
  // columns, which have none). c_qk, c_k and c_v are then views of its weight and bias.
  Linear qkv;
  // [q_norm (H rows) ; k_norm (H rows)] as [2H, 1, hd], float32: both RMSNorms in one
  // broadcast multiply on the CPU. Undefined without query.
  at::Tensor qk_norm;
  bool has_query() const { return c_qk.weight.defined(); }
};

// x + c_proj(a), then x + mlp(ln_3(x)) (DismantledPostAttention).
struct PostAttentionWeights {
  Linear c_proj;
  SwiGluMlp mlp;
};

struct DualBlockWeights {
  PreAttentionWeights pre_x, pre_c;
  PostAttentionWeights post_x;
  PostAttentionWeights post_c;  // absent (undefined weights) on the last dual block
};

struct SingleBlockWeights {
  Linear c_qk, c_v, c_proj;
  at::Tensor q_norm, k_norm;
  SwiGluMlp mlp;
  Linear qkv;          // [c_qk ; c_v] packed, as PreAttentionWeights::qkv
  at::Tensor qk_norm;  // [2H, 1, hd], as PreAttentionWeights::qk_norm
};

struct GptWeights {
  Linear text_proj, shape_proj, bbox_proj;  // bbox_proj only with use_bbox
  at::Tensor wte;                           // [C + 3, D], rows < C replaced from the codebook
  std::vector<DualBlockWeights> dual_blocks;
  std::vector<SingleBlockWeights> single_blocks;
  at::Tensor lm_head;  // [C + 3, D]

  // Builds the structure from resolved tensors. `codebook` is the shape tokenizer's normalised
  // codebook [C, E]: rows 0..C-1 of wte become shape_proj(codebook), as the official engine does.
  // The projections that read one input are packed (PreAttentionWeights::qkv, SwiGluMlp's
  // gate_up) once, here; the tensors they were packed from are dropped from `tensors` and, when
  // `release` is given (ModelWeights::release_gpt), handed to it by name, so that a checkpoint's
  // pages of them go back and the weights stay held once.
  static GptWeights from_tensors(const GptConfig& config, TensorMap tensors,
                                 const at::Tensor& codebook,
                                 const std::function<void(const std::string&)>& release = {});
};

class ShapeGpt {
 public:
  // max_shape_positions: RoPE table length (1 + T covers BOS and every generated token).
  ShapeGpt(GptConfig config, GptWeights weights, int64_t max_shape_positions);

  const GptConfig& config() const { return config_; }
  const GptWeights& weights() const { return weights_; }
  int64_t max_shape_positions() const { return rope_.cos.size(0); }
  // The rotary tables [max_shape_positions, hd/2] float32 on the model's device (for the decode
  // kernels, which read a row's angles themselves).
  const RopeTables& rope() const { return rope_; }

  // text_proj(text_hidden [B, 77, Dt]), plus bbox_proj(bbox [B, 3]) as one more token for
  // use_bbox models (bbox undefined = zeros, as the official code does). Returns [B, S, D].
  at::Tensor encode_condition(const at::Tensor& text_hidden, const at::Tensor& bbox) const;

  // wte rows for token ids (any shape) -> [..., D].
  at::Tensor embed(const at::Tensor& ids) const;

  // Full causal forward over [cond (S) ; shape tokens (L)] with shape positions 0..L-1:
  // logits [R, L, C + 3]. With a cache, also writes the keys/values of all S + L positions
  // (prefill: L = 1, the BOS token).
  at::Tensor forward(const at::Tensor& cond, const at::Tensor& shape_embeds,
                     KvState* cache = nullptr) const;

  // One token per row: embeds [R, D] at shape positions [R] (int64), against a cache holding
  // the condition and every earlier token. Writes this token's keys/values and returns logits
  // [R, C + 3]. No host sync and no data-dependent shapes, so it can be graph-captured.
  at::Tensor decode_step(const at::Tensor& embeds, const at::Tensor& positions, KvState& cache,
                         SingleStreamDecode mode, const DecodeStepFusions& fusions = {}) const;

 private:
  at::Tensor logits(const at::Tensor& h) const;

  GptConfig config_;
  GptWeights weights_;
  RopeTables rope_;
};

}  // namespace cube3d
