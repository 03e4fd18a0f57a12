// Small functional building blocks shared by the shape GPT, the shape decoder and CLIP's text
// encoder. Pure math on libtorch tensors; norms, RoPE and softmax run in float32 whatever the
// activation dtype, like the official autocast code.
#pragma once

#include <ATen/core/Tensor.h>

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

// SwiGLU MLP: down(silu(gate(x)) * up(x)).
struct SwiGluMlp {
  Linear gate, up, down;
  at::Tensor operator()(const at::Tensor& x) const;
};

// GELU MLP (exact erf GELU): down(gelu(up(x))).
struct GeluMlp {
  Linear up, down;
  at::Tensor operator()(const at::Tensor& x) const;
};

}  // namespace cube3d
