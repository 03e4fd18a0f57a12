// Small functional building blocks shared by the shape GPT, the shape decoder and CLIP's text
// encoder. Pure math on libtorch tensors; norms, RoPE and softmax run in float32 whatever the
// activation dtype, like the official autocast code.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace cube3d {

// nn.Linear's parameters; `bias` is undefined when the layer has none.
struct Linear {
  at::Tensor weight;  // [out, in]
  at::Tensor bias;    // [out] or undefined

  at::Tensor operator()(const at::Tensor& x) const;
  int64_t out_features() const { return weight.size(0); }
  int64_t in_features() const { return weight.size(1); }
};

// LayerNorm over the last dim without affine parameters, computed in float32.
at::Tensor layer_norm(const at::Tensor& x, double eps);
// LayerNorm with affine parameters, computed in float32.
at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                      double eps);
// RMSNorm over the last dim with a weight, computed in float32 (the official fused_rms_norm).
// The weight is [hd]; on the CPU anything that broadcasts against x (one weight per head).
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// The q/k RMSNorms of every attention block use this eps, not the config's.
inline constexpr double kQkNormEps = 1e-5;

// Rotary tables for positions 0..max_positions-1: cos and sin, each [max_positions, head_dim/2],
// float32, computed exactly as the official precompute_freqs_cis.
struct RopeTables {
  at::Tensor cos;
  at::Tensor sin;
};
RopeTables make_rope_tables(int64_t head_dim, int64_t max_positions, double theta);

// Rotates interleaved pairs of x [B, H, L, hd] by the angles in cos/sin, which broadcast as
// [B or 1, 1, L, hd/2]. Computed in float32, returned in x's dtype.
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// The same rotation with its tables interleaved per pair, made once for many tensors (a decode
// step's q and k of every layer): cos2 = [c0, c0, c1, c1, ...], sin2 = [-s0, s0, -s1, s1, ...]
// (float32, [..., hd]); x * cos2 + (x with each pair swapped) * sin2. Bit for bit apply_rope:
// each output is the same two products and one sum (a - b s is a + b (-s) in IEEE arithmetic,
// and a sum does not depend on its order), in 4 kernels instead of 7.
struct RopePairTables {
  at::Tensor cos2;
  at::Tensor sin2;
};
RopePairTables rope_pair_tables(const at::Tensor& cos, const at::Tensor& sin);
at::Tensor apply_rope_pairs(const at::Tensor& x, const RopePairTables& tables);

// The same rotation as one complex multiply by cis = cos + i sin (complex64, from rope_cis), as
// the official code writes it: three kernels instead of ten, which the CUDA decode step uses.
// Equal to apply_rope up to float32 rounding (a fused multiply-add may round once less).
at::Tensor rope_cis(const at::Tensor& cos, const at::Tensor& sin);
at::Tensor apply_rope_complex(const at::Tensor& x, const at::Tensor& cis);

// Multi-head attention: q [B, H, Lq, hd], k/v [B, H, Lk, hd]; `mask` (bool, true = attend, or
// additive in q's dtype: 0 to attend, -inf not)
// broadcasts to [B, H, Lq, Lk] or is undefined (attend everywhere).
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& mask);

// [B, L, H*hd] <-> [B, H, L, hd]
at::Tensor split_heads(const at::Tensor& x, int64_t num_heads);
at::Tensor merge_heads(const at::Tensor& x);

// SwiGLU MLP: down(silu(gate(x)) * up(x)). With gate_up ([gate ; up] packed into one linear,
// gate and up views of it), gate and up are one GEMM whose output is split.
struct SwiGluMlp {
  Linear gate, up, down;
  Linear gate_up;  // optional
  at::Tensor operator()(const at::Tensor& x) const;
};

// Packs linears that read the same input into one: their weights stacked [sum of outs, in], and
// their biases, with zeros for a part without one when another has one (none when none has).
// Every part is rebound to a view of the packed tensors, so nothing is held twice once the
// caller drops the originals. Throws internal_error naming `what` when the parts disagree in
// input size, dtype or device.
Linear pack_linears(const std::vector<Linear*>& parts, const std::string& what);

// GELU MLP (exact erf GELU): down(gelu(up(x))).
struct GeluMlp {
  Linear up, down;
  at::Tensor operator()(const at::Tensor& x) const;
};

}  // namespace cube3d
