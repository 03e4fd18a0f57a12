#include "cube3d/model/shape_gpt.h"

#include <ATen/ATen.h>

#include <limits>
#include <utility>
#include <vector>

#include "cube3d/core/error.h"

namespace cube3d {
namespace {

SwiGluMlp swiglu(const WeightLookup& t, const std::string& prefix) {
  return {t.linear(prefix + ".gate_proj"), t.linear(prefix + ".up_proj"),
          t.linear(prefix + ".down_proj")};
}

PostAttentionWeights post(const WeightLookup& t, const std::string& prefix) {
  return {t.linear(prefix + ".c_proj"), swiglu(t, prefix + ".mlp")};
}

// q, k, v of one stream, heads split, q/k normalised (no RoPE yet). q undefined without query.
struct Qkv {
  at::Tensor q, k, v;
};

Qkv pre_attention(const PreAttentionWeights& w, const at::Tensor& x, int64_t heads) {
  Qkv out;
  if (w.has_query()) {
    const auto qk = w.c_qk(x).chunk(2, -1);
    out.q = rms_norm(split_heads(qk[0], heads), w.q_norm, kQkNormEps);
    out.k = rms_norm(split_heads(qk[1], heads), w.k_norm, kQkNormEps);
  } else {
    out.k = rms_norm(split_heads(w.c_k(x), heads), w.k_norm, kQkNormEps);
  }
  out.v = split_heads(w.c_v(x), heads);
  return out;
}

at::Tensor post_attention(const PostAttentionWeights& w, const at::Tensor& x, const at::Tensor& a,
                          double eps) {
  const at::Tensor h = x + w.c_proj(a);
  return h + w.mlp(layer_norm(h, eps));
}

// Causal mask for queries at global indices [q_offset, q_offset + lq) over keys [0, lk).
at::Tensor causal_mask(int64_t lq, int64_t lk, int64_t q_offset, const at::Device& device) {
  const auto opts = at::TensorOptions().dtype(at::kLong).device(device);
  const at::Tensor q_idx = at::arange(q_offset, q_offset + lq, opts).unsqueeze(1);
  const at::Tensor k_idx = at::arange(lk, opts).unsqueeze(0);
  return k_idx.le(q_idx);  // [lq, lk]
}

// The rotation of one set of positions, gathered once per call and applied to the q and k of
// every layer. On CUDA it is one complex multiply per use (fewer kernels); the CPU keeps the
// written-out formula that the golden tests pin.
struct Rotation {
  at::Tensor cos, sin;  // broadcastable to [R, H, L, hd/2], float32
  at::Tensor cis;       // cos + i sin, complex64, on CUDA only

  Rotation(at::Tensor c, at::Tensor s) : cos(std::move(c)), sin(std::move(s)) {
    if (cos.is_cuda()) cis = rope_cis(cos, sin);
  }
  at::Tensor operator()(const at::Tensor& x) const {
    return cis.defined() ? apply_rope_complex(x, cis) : apply_rope(x, cos, sin);
  }
};

// Per-row positions [R, L] -> rotation tables [R, 1, L, hd/2].
Rotation rotation_at(const RopeTables& rope, const at::Tensor& positions) {
  return {rope.cos.index({positions}).unsqueeze(1), rope.sin.index({positions}).unsqueeze(1)};
}

// Positions 0..L-1, shared by all rows.
Rotation rotation_prefix(const RopeTables& rope, int64_t l) {
  return {rope.cos.narrow(0, 0, l), rope.sin.narrow(0, 0, l)};
}

// The additive form of a visibility mask [..., L] (true = attend): 0 where visible, -inf where
// not, in `dtype`, which is what scaled_dot_product_attention turns a bool mask into at every
// call. Made once per decode step and shared by every layer; its rows are stored 16 elements
// apart (the memory-efficient CUDA kernel's alignment), so no layer pads or converts it again.
at::Tensor additive_mask(const at::Tensor& visible, at::ScalarType dtype) {
  constexpr int64_t kAlignment = 16;
  const int64_t l = visible.size(-1);
  std::vector<int64_t> sizes = visible.sizes().vec();
  sizes.back() = (l + kAlignment - 1) / kAlignment * kAlignment;
  const at::Tensor buffer = at::full(sizes, -std::numeric_limits<double>::infinity(),
                                     at::TensorOptions().dtype(dtype).device(visible.device()));
  return buffer.narrow(-1, 0, l).masked_fill_(visible, 0.0);
}

// Writes [R, H, 1, hd] into cache [R, H, Lmax, hd] at per-row slots [R] (int64).
void write_slot(at::Tensor& cache, const at::Tensor& slots, const at::Tensor& value) {
  const at::Tensor index = slots.view({-1, 1, 1, 1}).expand_as(value);
  cache.scatter_(2, index, value);
}

}  // namespace

SingleStreamDecode parse_single_stream_decode(const std::string& text) {
  if (text == "causal") return SingleStreamDecode::kCausal;
  if (text == "reference") return SingleStreamDecode::kReference;
  throw invalid_argument("single_stream_decode: '" + text + "' is not one of causal, reference");
}

std::string to_string(SingleStreamDecode mode) {
  return mode == SingleStreamDecode::kCausal ? "causal" : "reference";
}

GptWeights GptWeights::from_tensors(const GptConfig& config, const TensorMap& tensors,
                                    const at::Tensor& codebook) {
  const WeightLookup t(tensors, "shape GPT");
  GptWeights w;
  w.text_proj = t.linear("text_proj");
  w.shape_proj = t.linear("shape_proj");
  if (config.use_bbox) w.bbox_proj = t.linear("bbox_proj");
  w.lm_head = t.tensor("lm_head.weight");

  // The official engine overwrites the code rows of wte with the projected codebook, so the
  // checkpoint's own rows are never used.
  const int64_t codes = config.shape_model_vocab_size;
  if (codebook.size(0) != codes || codebook.size(1) != config.shape_model_embed_dim) {
    throw invalid_argument("shape tokenizer codebook is [" + std::to_string(codebook.size(0)) +
                           ", " + std::to_string(codebook.size(1)) + "], the shape GPT expects [" +
                           std::to_string(codes) + ", " +
                           std::to_string(config.shape_model_embed_dim) + "]");
  }
  w.wte = t.tensor("transformer.wte.weight").clone();
  const at::Tensor projected = w.shape_proj(codebook.to(w.shape_proj.weight.scalar_type()));
  w.wte.narrow(0, 0, codes).copy_(projected);

  for (int64_t i = 0; i < config.n_layer; ++i) {
    const std::string p = "transformer.dual_blocks." + std::to_string(i);
    DualBlockWeights b;
    b.pre_x.c_qk = t.linear(p + ".attn.pre_x.c_qk");
    b.pre_x.c_v = t.linear(p + ".attn.pre_x.c_v");
    b.pre_x.q_norm = t.tensor(p + ".attn.pre_x.q_norm.weight");
    b.pre_x.k_norm = t.tensor(p + ".attn.pre_x.k_norm.weight");
    if (i == config.n_layer - 1) {
      b.pre_c.c_k = t.linear(p + ".attn.pre_c.c_k");
    } else {
      b.pre_c.c_qk = t.linear(p + ".attn.pre_c.c_qk");
      b.pre_c.q_norm = t.tensor(p + ".attn.pre_c.q_norm.weight");
      b.post_c = post(t, p + ".post_2");
    }
    b.pre_c.c_v = t.linear(p + ".attn.pre_c.c_v");
    b.pre_c.k_norm = t.tensor(p + ".attn.pre_c.k_norm.weight");
    b.post_x = post(t, p + ".post_1");
    w.dual_blocks.push_back(std::move(b));
  }
  for (int64_t i = 0; i < config.n_single_layer; ++i) {
    const std::string p = "transformer.single_blocks." + std::to_string(i);
    SingleBlockWeights b;
    b.c_qk = t.linear(p + ".attn.c_qk");
    b.c_v = t.linear(p + ".attn.c_v");
    b.c_proj = t.linear(p + ".attn.c_proj");
    b.q_norm = t.tensor(p + ".attn.q_norm.weight");
    b.k_norm = t.tensor(p + ".attn.k_norm.weight");
    b.mlp = swiglu(t, p + ".mlp");
    w.single_blocks.push_back(std::move(b));
  }
  return w;
}

ShapeGpt::ShapeGpt(GptConfig config, GptWeights weights, int64_t max_shape_positions)
    : config_(std::move(config)), weights_(std::move(weights)) {
  const RopeTables tables =
      make_rope_tables(config_.head_dim(), max_shape_positions, config_.rope_theta);
  const at::Device device = weights_.wte.device();
  rope_ = {tables.cos.to(device), tables.sin.to(device)};
}

at::Tensor ShapeGpt::encode_condition(const at::Tensor& text_hidden, const at::Tensor& bbox) const {
  const at::ScalarType dtype = weights_.text_proj.weight.scalar_type();
  at::Tensor cond = weights_.text_proj(text_hidden.to(dtype));
  if (config_.use_bbox) {
    const at::Tensor box = bbox.defined() ? bbox.to(cond.options())
                                          : at::zeros({text_hidden.size(0), 3}, cond.options());
    cond = at::cat({cond, weights_.bbox_proj(box).unsqueeze(1)}, 1);
  }
  return cond;
}

at::Tensor ShapeGpt::embed(const at::Tensor& ids) const { return at::embedding(weights_.wte, ids); }

at::Tensor ShapeGpt::logits(const at::Tensor& h) const {
  return at::linear(layer_norm(h, config_.eps), weights_.lm_head);
}

at::Tensor ShapeGpt::forward(const at::Tensor& cond, const at::Tensor& shape_embeds,
                             KvState* cache) const {
  const int64_t heads = config_.n_head;
  const double eps = config_.eps;
  const int64_t s = cond.size(1);
  const int64_t l = shape_embeds.size(1);
  if (l > max_shape_positions()) {
    throw invalid_argument("shape GPT forward: " + std::to_string(l) +
                           " shape tokens exceed the RoPE table of " +
                           std::to_string(max_shape_positions()));
  }
  const at::Device device = shape_embeds.device();
  const Rotation rotate = rotation_prefix(rope_, l);
  at::Tensor x = shape_embeds;
  at::Tensor c = cond;
  size_t layer = 0;

  for (const auto& block : weights_.dual_blocks) {
    const Qkv qx = pre_attention(block.pre_x, layer_norm(x, eps), heads);
    const Qkv qc = pre_attention(block.pre_c, layer_norm(c, eps), heads);
    // Condition tokens all sit at RoPE position 0, where the rotation is the identity.
    const at::Tensor kx = rotate(qx.k);
    const at::Tensor qxr = rotate(qx.q);
    const bool cond_queries = block.pre_c.has_query();
    const at::Tensor q = cond_queries ? at::cat({qc.q, qxr}, 2) : qxr;
    const at::Tensor k = at::cat({qc.k, kx}, 2);
    const at::Tensor v = at::cat({qc.v, qx.v}, 2);
    if (cache) {
      cache->keys[layer].narrow(2, 0, s + l).copy_(k);
      cache->values[layer].narrow(2, 0, s + l).copy_(v);
    }
    const at::Tensor mask = causal_mask(q.size(2), s + l, cond_queries ? 0 : s, device);
    const at::Tensor a = merge_heads(attention(q, k, v, mask));
    if (cond_queries) {
      x = post_attention(block.post_x, x, a.narrow(1, s, l), eps);
      c = post_attention(block.post_c, c, a.narrow(1, 0, s), eps);
    } else {
      x = post_attention(block.post_x, x, a, eps);
    }
    ++layer;
  }
  for (const auto& block : weights_.single_blocks) {
    const at::Tensor h = layer_norm(x, eps);
    const auto qk = block.c_qk(h).chunk(2, -1);
    const at::Tensor q = rotate(rms_norm(split_heads(qk[0], heads), block.q_norm, kQkNormEps));
    const at::Tensor k = rotate(rms_norm(split_heads(qk[1], heads), block.k_norm, kQkNormEps));
    const at::Tensor v = split_heads(block.c_v(h), heads);
    if (cache) {
      cache->keys[layer].narrow(2, 0, l).copy_(k);
      cache->values[layer].narrow(2, 0, l).copy_(v);
    }
    const at::Tensor a = merge_heads(attention(q, k, v, causal_mask(l, l, 0, device)));
    x = x + block.c_proj(a);
    x = x + block.mlp(layer_norm(x, eps));
    ++layer;
  }
  return logits(x);
}

at::Tensor ShapeGpt::decode_step(const at::Tensor& embeds, const at::Tensor& positions,
                                 KvState& cache, SingleStreamDecode mode,
                                 const DecodeStepFusions& fusions) const {
  const int64_t heads = config_.n_head;
  const double eps = config_.eps;
  const int64_t s = cache.cond_len;
  const auto long_opts = at::TensorOptions().dtype(at::kLong).device(embeds.device());
  const at::Tensor pos = positions.view({-1, 1});  // [R, 1]
  const Rotation rotate = rotation_at(rope_, pos);
  at::Tensor x = embeds.unsqueeze(1);  // [R, 1, D]
  size_t layer = 0;

  // Dual blocks: the condition stream's keys/values are in the cache since prefill; only the
  // shape stream runs. Keys 0..S+p are visible to a token at shape position p.
  const int64_t dual_len = weights_.dual_blocks.empty() ? 0 : cache.keys[0].size(2);
  const at::ScalarType dtype = embeds.scalar_type();
  const at::Tensor dual_mask = additive_mask(
      at::arange(dual_len, long_opts).unsqueeze(0).le(pos + s).view({-1, 1, 1, dual_len}), dtype);
  const at::Tensor dual_slots = positions + s;
  for (const auto& block : weights_.dual_blocks) {
    const at::Tensor h = layer_norm(x, eps);
    at::Tensor q;
    if (fusions.qk_norm_rope_store) {
      q = fusions.qk_norm_rope_store(block.pre_x.c_qk(h), block.pre_x.q_norm, block.pre_x.k_norm,
                                     rotate.cos, rotate.sin, cache.keys[layer], dual_slots);
      write_slot(cache.values[layer], dual_slots, split_heads(block.pre_x.c_v(h), heads));
    } else {
      const Qkv qx = pre_attention(block.pre_x, h, heads);
      q = rotate(qx.q);
      write_slot(cache.keys[layer], dual_slots, rotate(qx.k));
      write_slot(cache.values[layer], dual_slots, qx.v);
    }
    const at::Tensor a =
        merge_heads(attention(q, cache.keys[layer], cache.values[layer], dual_mask));
    x = post_attention(block.post_x, x, a, eps);
    ++layer;
  }

  if (!weights_.single_blocks.empty()) {
    const int64_t single_len = cache.keys[layer].size(2);
    const at::Tensor key_index = at::arange(single_len, long_opts).unsqueeze(0);
    // The official KV path calls SDPA with is_causal and a single query row, whose top-left
    // aligned mask lets the new token see key 0 (BOS) only; `reference` reproduces that.
    const at::Tensor single_mask =
        additive_mask((mode == SingleStreamDecode::kCausal ? key_index.le(pos) : key_index.eq(0))
                          .view({-1, 1, 1, single_len}),
                      dtype);
    for (const auto& block : weights_.single_blocks) {
      const at::Tensor h = layer_norm(x, eps);
      at::Tensor q;
      if (fusions.qk_norm_rope_store) {
        q = fusions.qk_norm_rope_store(block.c_qk(h), block.q_norm, block.k_norm, rotate.cos,
                                       rotate.sin, cache.keys[layer], positions);
      } else {
        const auto qk = block.c_qk(h).chunk(2, -1);
        q = rotate(rms_norm(split_heads(qk[0], heads), block.q_norm, kQkNormEps));
        write_slot(cache.keys[layer], positions,
                   rotate(rms_norm(split_heads(qk[1], heads), block.k_norm, kQkNormEps)));
      }
      write_slot(cache.values[layer], positions, split_heads(block.c_v(h), heads));
      const at::Tensor a =
          merge_heads(attention(q, cache.keys[layer], cache.values[layer], single_mask));
      x = x + block.c_proj(a);
      x = x + block.mlp(layer_norm(x, eps));
      ++layer;
    }
  }
  return logits(x).squeeze(1);
}

}  // namespace cube3d
