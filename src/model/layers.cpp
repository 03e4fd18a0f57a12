#include "cube3d/model/layers.h"

#include <ATen/ATen.h>

#include "cube3d/core/error.h"

namespace cube3d {

at::Tensor Linear::operator()(const at::Tensor& x) const {
  return bias.defined() ? at::linear(x, weight, bias) : at::linear(x, weight);
}

// On CUDA a reduced-precision input goes to the fused kernels as it is: they read it into
// float32, compute in float32 and round the output once, which is what the casts around a
// float32 call do in three kernels instead of one. A decode step of a few rows is bound by its
// kernel count, not by arithmetic. The CPU keeps the float32 path that the golden tests pin.
bool fused_in_input_dtype(const at::Tensor& x) {
  return x.is_cuda() && x.scalar_type() != at::kFloat;
}

at::Tensor layer_norm(const at::Tensor& x, double eps) {
  if (fused_in_input_dtype(x)) return at::layer_norm(x, {x.size(-1)}, {}, {}, eps);
  return at::layer_norm(x.to(at::kFloat), {x.size(-1)}, {}, {}, eps).to(x.scalar_type());
}

at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                      double eps) {
  return at::layer_norm(x.to(at::kFloat), {x.size(-1)}, weight.to(at::kFloat), bias.to(at::kFloat),
                        eps)
      .to(x.scalar_type());
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor xf = x.to(at::kFloat);
  if (x.is_cuda()) {
    // One fused float32 kernel (weight float32 too) instead of six elementwise ones.
    return at::rms_norm(xf, {x.size(-1)}, weight.to(at::kFloat), eps).to(x.scalar_type());
  }
  const at::Tensor inv_rms = at::rsqrt((xf * xf).mean(-1, /*keepdim=*/true).add_(eps));
  return ((xf * inv_rms) * weight).to(x.scalar_type());
}

RopeTables make_rope_tables(int64_t head_dim, int64_t max_positions, double theta) {
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  // freqs = 1 / theta^(arange(0, hd, 2) / hd), all in float32 as in the official code.
  const at::Tensor exponents = at::arange(0, head_dim, 2, f32) / static_cast<double>(head_dim);
  const at::Tensor freqs = at::reciprocal(at::pow(theta, exponents));
  const at::Tensor angles = at::outer(at::arange(max_positions, f32), freqs);
  return {angles.cos().contiguous(), angles.sin().contiguous()};
}

at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const auto sizes = x.sizes();
  const at::Tensor pairs = x.to(at::kFloat).unflatten(-1, {sizes.back() / 2, 2});
  const at::Tensor even = pairs.select(-1, 0);
  const at::Tensor odd = pairs.select(-1, 1);
  // (even + i*odd) * (cos + i*sin), the official complex multiply written out.
  const at::Tensor rotated =
      at::stack({even * cos - odd * sin, even * sin + odd * cos}, -1).flatten(-2);
  return rotated.to(x.scalar_type());
}

RopePairTables rope_pair_tables(const at::Tensor& cos, const at::Tensor& sin) {
  return {at::stack({cos, cos}, -1).flatten(-2), at::stack({-sin, sin}, -1).flatten(-2)};
}

at::Tensor apply_rope_pairs(const at::Tensor& x, const RopePairTables& tables) {
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor swapped = xf.unflatten(-1, {x.size(-1) / 2, 2}).flip(-1).flatten(-2);
  return (xf * tables.cos2 + swapped * tables.sin2).to(x.scalar_type());
}

at::Tensor rope_cis(const at::Tensor& cos, const at::Tensor& sin) { return at::complex(cos, sin); }

at::Tensor apply_rope_complex(const at::Tensor& x, const at::Tensor& cis) {
  const auto sizes = x.sizes();
  const at::Tensor pairs = x.to(at::kFloat).unflatten(-1, {sizes.back() / 2, 2});
  // view_as_complex needs pairs adjacent in memory, which a float copy or a dense view has.
  const at::Tensor z = at::view_as_complex(pairs.stride(-1) == 1 ? pairs : pairs.contiguous());
  return at::view_as_real(z * cis).flatten(-2).to(x.scalar_type());
}

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& mask) {
  return at::scaled_dot_product_attention(q, k, v,
                                          mask.defined() ? std::optional(mask) : std::nullopt);
}

at::Tensor split_heads(const at::Tensor& x, int64_t num_heads) {
  return x.unflatten(-1, {num_heads, x.size(-1) / num_heads}).transpose(1, 2);
}

at::Tensor merge_heads(const at::Tensor& x) { return x.transpose(1, 2).flatten(2); }

at::Tensor SwiGluMlp::operator()(const at::Tensor& x) const {
  if (gate_up.weight.defined()) {
    const std::vector<at::Tensor> halves = gate_up(x).chunk(2, -1);
    return down(at::silu(halves[0]) * halves[1]);
  }
  return down(at::silu(gate(x)) * up(x));
}

Linear pack_linears(const std::vector<Linear*>& parts, const std::string& what) {
  if (parts.empty()) throw internal_error(what + ": nothing to pack");
  const at::Tensor& first = parts.front()->weight;
  at::TensorOptions bias_options;
  bool any_bias = false;
  for (const Linear* part : parts) {
    const at::Tensor& w = part->weight;
    if (w.dim() != 2 || w.size(1) != first.size(1) || w.scalar_type() != first.scalar_type() ||
        w.device() != first.device()) {
      throw internal_error(what + ": the linears to pack differ in input size, dtype or device");
    }
    if (part->bias.defined()) {
      any_bias = true;
      bias_options = part->bias.options();
    }
  }
  std::vector<at::Tensor> weights, biases;
  for (const Linear* part : parts) {
    weights.push_back(part->weight);
    if (any_bias) {
      biases.push_back(part->bias.defined() ? part->bias
                                            : at::zeros({part->out_features()}, bias_options));
    }
  }
  Linear packed{at::cat(weights, 0), any_bias ? at::cat(biases, 0) : at::Tensor()};
  int64_t row = 0;
  for (Linear* part : parts) {
    const int64_t rows = part->out_features();
    part->weight = packed.weight.narrow(0, row, rows);
    if (part->bias.defined()) part->bias = packed.bias.narrow(0, row, rows);
    row += rows;
  }
  return packed;
}

at::Tensor GeluMlp::operator()(const at::Tensor& x) const { return down(at::gelu(up(x))); }

}  // namespace cube3d
