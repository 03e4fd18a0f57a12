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
          t.linear(prefix + ".down_proj"), Linear{}};  // gate_up: packed later
}

PostAttentionWeights post(const WeightLookup& t, const std::string& prefix) {
  return {t.linear(prefix + ".c_proj"), swiglu(t, prefix + ".mlp")};
}

// One stream's packed projection (PreAttentionWeights::qkv) of x [R, L, D], as heads
// [R, n, L, hd] (views of one GEMM's output): `qk` the q and k heads [R, 2H, L, hd] (k alone,
// [R, H, L, hd], without query), `v` [R, H, L, hd]; `out` the output itself [R, L, n * hd].
struct Projection {
  at::Tensor out, qk, v;
};

Projection project_heads(const Linear& qkv, const at::Tensor& x, int64_t heads) {
  Projection p;
  p.out = qkv(x);
  const int64_t head_dim = qkv.weight.size(1) / heads;
  const int64_t all_heads = p.out.size(-1) / head_dim;
  const std::vector<at::Tensor> parts = p.out.unflatten(-1, {all_heads, head_dim})
                                            .transpose(1, 2)
                                            .split_with_sizes({all_heads - heads, heads}, 1);
  p.qk = parts[0];
  p.v = parts[1];
  return p;
}

// The q/k RMSNorms of q and k heads [R, 2H, L, hd]. On the CPU one multiply by the per-head
// weights qk_norm [2H, 1, hd] (elementwise the same as two norms); on CUDA each half through the
// fused kernel with its own weight, as before the packing, then joined for one rotation.
at::Tensor norm_qk(const at::Tensor& qk, const at::Tensor& q_norm, const at::Tensor& k_norm,
                   const at::Tensor& qk_norm) {
  if (!qk.is_cuda()) return rms_norm(qk, qk_norm, kQkNormEps);
  const std::vector<at::Tensor> halves = qk.chunk(2, 1);
  return at::cat({rms_norm(halves[0], q_norm, kQkNormEps), rms_norm(halves[1], k_norm, kQkNormEps)},
                 1);
}

// q, k, v of one stream, heads split, q/k normalised (no RoPE yet): `qk` [R, 2H, L, hd] holds
// q then k; without query it is k alone [R, H, L, hd].
struct Qkv {
  at::Tensor qk, v;
};

Qkv pre_attention(const PreAttentionWeights& w, const at::Tensor& x, int64_t heads) {
  const Projection p = project_heads(w.qkv, x, heads);
  return {w.has_query() ? norm_qk(p.qk, w.q_norm, w.k_norm, w.qk_norm)
                        : rms_norm(p.qk, w.k_norm, kQkNormEps),
          p.v};
}

// [q ; k] heads [R, 2H, L, hd] -> q, k [R, H, L, hd] (views).
std::pair<at::Tensor, at::Tensor> split_qk(const at::Tensor& qk) {
  const std::vector<at::Tensor> halves = qk.chunk(2, 1);
  return {halves[0], halves[1]};
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
// arithmetic of the written-out formula that the golden tests pin, with its tables interleaved
// per pair once here (apply_rope_pairs: the same values in fewer operations per layer).
struct Rotation {
  at::Tensor cos, sin;   // broadcastable to [R, H, L, hd/2], float32
  at::Tensor cis;        // cos + i sin, complex64, on CUDA only
  RopePairTables pairs;  // on the CPU only

  Rotation(at::Tensor c, at::Tensor s) : cos(std::move(c)), sin(std::move(s)) {
    if (cos.is_cuda()) {
      cis = rope_cis(cos, sin);
    } else {
      pairs = rope_pair_tables(cos, sin);
    }
  }
  at::Tensor operator()(const at::Tensor& x) const {
    return cis.defined() ? apply_rope_complex(x, cis) : apply_rope_pairs(x, pairs);
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

// The scatter index that writes [R, H, 1, hd] into a cache [R, H, Lmax, hd] at per-row slots
// [R] (int64): made once per step, used by every layer's key and value writes.
at::Tensor slot_index(const at::Tensor& slots, int64_t heads, int64_t head_dim) {
  return slots.view({-1, 1, 1, 1}).expand({slots.size(0), heads, 1, head_dim});
}

// The names of a linear's tensors in `tensors` (weight, and bias when it has one).
void add_linear_names(const TensorMap& tensors, const std::string& prefix,
                      std::vector<std::string>& names) {
  names.push_back(prefix + ".weight");
  if (tensors.count(prefix + ".bias")) names.push_back(prefix + ".bias");
}

// [q_norm ; k_norm], one row per head: [2H, 1, hd], float32.
at::Tensor joint_qk_norm(const at::Tensor& q_norm, const at::Tensor& k_norm, int64_t heads) {
  const int64_t head_dim = q_norm.size(0);
  return at::cat({q_norm.expand({heads, head_dim}), k_norm.expand({heads, head_dim})})
      .unsqueeze(1)
      .to(at::kFloat)
      .contiguous();
}

// Packs every block's projections that read one input: [c_qk ; c_v] (or [c_k ; c_v]) and
// [gate ; up]. After each block it drops the tensors they were made from, so each weight is held
// once, and hands their names to `release` (a checkpoint's file pages go back): loading needs
// one block's packed copies on top of the weights, not a second model.
void pack_projections(const GptConfig& config, TensorMap& tensors, GptWeights& w,
                      const std::function<void(const std::string&)>& release) {
  const int64_t heads = config.n_head;
  std::vector<std::string> packed;
  // The block holds views of its packed tensors only: the map held the last references.
  const auto drop_packed = [&] {
    for (const std::string& name : packed) tensors.erase(name);
    if (release) {
      for (const std::string& name : packed) release(name);
    }
    packed.clear();
  };
  const auto pack_stream = [&](PreAttentionWeights& s, const std::string& prefix) {
    const bool query = s.has_query();
    Linear& first = query ? s.c_qk : s.c_k;
    s.qkv = pack_linears({&first, &s.c_v}, "shape GPT " + prefix);
    add_linear_names(tensors, prefix + (query ? ".c_qk" : ".c_k"), packed);
    add_linear_names(tensors, prefix + ".c_v", packed);
    if (query) s.qk_norm = joint_qk_norm(s.q_norm, s.k_norm, heads);
  };
  const auto pack_mlp = [&](SwiGluMlp& m, const std::string& prefix) {
    m.gate_up = pack_linears({&m.gate, &m.up}, "shape GPT " + prefix);
    add_linear_names(tensors, prefix + ".gate_proj", packed);
    add_linear_names(tensors, prefix + ".up_proj", packed);
  };
  for (size_t i = 0; i < w.dual_blocks.size(); ++i) {
    const std::string p = "transformer.dual_blocks." + std::to_string(i);
    DualBlockWeights& b = w.dual_blocks[i];
    pack_stream(b.pre_x, p + ".attn.pre_x");
    pack_stream(b.pre_c, p + ".attn.pre_c");
    pack_mlp(b.post_x.mlp, p + ".post_1.mlp");
    if (b.post_c.mlp.gate.weight.defined()) pack_mlp(b.post_c.mlp, p + ".post_2.mlp");
    drop_packed();
  }
  for (size_t i = 0; i < w.single_blocks.size(); ++i) {
    const std::string p = "transformer.single_blocks." + std::to_string(i);
    SingleBlockWeights& b = w.single_blocks[i];
    b.qkv = pack_linears({&b.c_qk, &b.c_v}, "shape GPT " + p + ".attn");
    add_linear_names(tensors, p + ".attn.c_qk", packed);
    add_linear_names(tensors, p + ".attn.c_v", packed);
    b.qk_norm = joint_qk_norm(b.q_norm, b.k_norm, heads);
    pack_mlp(b.mlp, p + ".mlp");
    drop_packed();
  }
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

GptWeights GptWeights::from_tensors(const GptConfig& config, TensorMap tensors,
                                    const at::Tensor& codebook,
                                    const std::function<void(const std::string&)>& release) {
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
  pack_projections(config, tensors, w, release);
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
    const auto [qxr, kx] = split_qk(rotate(qx.qk));
    const bool cond_queries = block.pre_c.has_query();
    at::Tensor q = qxr;
    at::Tensor kc = qc.qk;
    if (cond_queries) {
      const auto [qc_q, qc_k] = split_qk(qc.qk);
      q = at::cat({qc_q, qxr}, 2);
      kc = qc_k;
    }
    const at::Tensor k = at::cat({kc, kx}, 2);
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
    const Projection p = project_heads(block.qkv, layer_norm(x, eps), heads);
    const auto [q, k] = split_qk(rotate(norm_qk(p.qk, block.q_norm, block.k_norm, block.qk_norm)));
    const at::Tensor& v = p.v;
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
  // Every layer writes its new key and value at the same slots: one scatter index per step.
  const int64_t head_dim = config_.head_dim();
  const at::Tensor dual_index = slot_index(dual_slots, heads, head_dim);
  const int64_t qk_width = 2 * config_.n_embd;
  for (const auto& block : weights_.dual_blocks) {
    const Projection p = project_heads(block.pre_x.qkv, layer_norm(x, eps), heads);
    at::Tensor q;
    if (fusions.qk_norm_rope_store) {
      q = fusions.qk_norm_rope_store(p.out.narrow(-1, 0, qk_width), block.pre_x.q_norm,
                                     block.pre_x.k_norm, rotate.cos, rotate.sin, cache.keys[layer],
                                     dual_slots);
    } else {
      const auto [qr, kr] = split_qk(
          rotate(norm_qk(p.qk, block.pre_x.q_norm, block.pre_x.k_norm, block.pre_x.qk_norm)));
      q = qr;
      cache.keys[layer].scatter_(2, dual_index, kr);
    }
    cache.values[layer].scatter_(2, dual_index, p.v);
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
    const at::Tensor single_index = slot_index(positions, heads, head_dim);
    for (const auto& block : weights_.single_blocks) {
      const Projection p = project_heads(block.qkv, layer_norm(x, eps), heads);
      at::Tensor q;
      if (fusions.qk_norm_rope_store) {
        q = fusions.qk_norm_rope_store(p.out.narrow(-1, 0, qk_width), block.q_norm, block.k_norm,
                                       rotate.cos, rotate.sin, cache.keys[layer], positions);
      } else {
        const auto [qr, kr] =
            split_qk(rotate(norm_qk(p.qk, block.q_norm, block.k_norm, block.qk_norm)));
        q = qr;
        cache.keys[layer].scatter_(2, single_index, kr);
      }
      cache.values[layer].scatter_(2, single_index, p.v);
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
