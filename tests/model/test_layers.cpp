// Tests of the functional building blocks against independent reference formulas: RoPE against
// a complex-number rotation, the rotary tables against double precision, the norms, attention
// with a mask, head splitting and the two MLPs.
#include "cube3d/model/layers.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace cube3d {
namespace test_layers {

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// --- RoPE ----------------------------------------------------------------------------------------

// The official rotation: interleaved pairs as complex numbers times e^(i*angle).
at::Tensor complex_rope_reference(const at::Tensor& x, const at::Tensor& angles) {
  const at::Tensor xc = at::view_as_complex(x.unflatten(-1, {x.size(-1) / 2, 2}).contiguous());
  const at::Tensor rotation = at::polar(at::ones_like(angles), angles);
  return at::view_as_real(xc * rotation).flatten(-2);
}

TEST(LayersRope, ApplyRopeMatchesComplexRotation) {
  at::manual_seed(1);
  const int64_t batch = 2, heads = 3, len = 5, head_dim = 8;
  const at::Tensor x = at::randn({batch, heads, len, head_dim});
  // Arbitrary angles per (batch, position, pair), broadcast over heads.
  const at::Tensor angles = at::rand({batch, 1, len, head_dim / 2}) * 20.0 - 10.0;
  const at::Tensor out = apply_rope(x, angles.cos(), angles.sin());
  ASSERT_EQ(out.sizes(), x.sizes());
  EXPECT_EQ(out.scalar_type(), at::kFloat);
  EXPECT_LE(max_abs_diff(out, complex_rope_reference(x, angles)), 1e-6);
}

TEST(LayersRope, ApplyRopeWithTablesMatchesComplexRotation) {
  at::manual_seed(2);
  const int64_t len = 7, head_dim = 16;
  const double theta = 10000.0;
  const at::Tensor x = at::randn({1, 2, len, head_dim});
  const RopeTables tables = make_rope_tables(head_dim, len, theta);
  const at::Tensor freqs =
      at::reciprocal(at::pow(theta, at::arange(0, head_dim, 2, at::kFloat) / double(head_dim)));
  const at::Tensor angles = at::outer(at::arange(len, at::kFloat), freqs);
  const at::Tensor out = apply_rope(x, tables.cos, tables.sin);
  EXPECT_LE(max_abs_diff(out, complex_rope_reference(x, angles)), 1e-6);
}

TEST(LayersRope, PairTablesGiveApplyRopeBitForBit) {
  at::manual_seed(4);
  const int64_t batch = 2, heads = 6, len = 3, head_dim = 16;
  // Values of every magnitude and both signs, zeros and negative zeros among them.
  at::Tensor x = at::randn({batch, heads, len, head_dim}) * at::exp(at::randn({1}) * 10.0);
  x.index_put_({0, 0, 0}, at::zeros({head_dim}));
  x.index_put_({0, 0, 1}, -at::zeros({head_dim}));
  const at::Tensor angles = at::rand({batch, 1, len, head_dim / 2}) * 200.0 - 100.0;
  const at::Tensor cos = angles.cos(), sin = angles.sin();
  const at::Tensor expected = apply_rope(x, cos, sin);
  const at::Tensor out = apply_rope_pairs(x, rope_pair_tables(cos, sin));
  ASSERT_EQ(out.sizes(), expected.sizes());
  EXPECT_TRUE(at::equal(out, expected));
  // Sign bits too (at::equal calls -0 and +0 equal).
  EXPECT_TRUE(at::equal(at::signbit(out), at::signbit(expected)));
  // The q and k heads of a joint tensor rotate as each would alone.
  const at::Tensor half = x.narrow(1, 0, heads / 2);
  EXPECT_TRUE(at::equal(apply_rope_pairs(half, rope_pair_tables(cos, sin)),
                        expected.narrow(1, 0, heads / 2)));
}

TEST(LayersRope, PositionZeroIsTheIdentity) {
  at::manual_seed(3);
  const RopeTables tables = make_rope_tables(16, 4, 10000.0);
  const at::Tensor x = at::randn({2, 3, 1, 16});
  const at::Tensor cos0 = tables.cos.slice(0, 0, 1);
  const at::Tensor sin0 = tables.sin.slice(0, 0, 1);
  EXPECT_TRUE(at::equal(apply_rope(x, cos0, sin0), x));
}

TEST(LayersRope, Bf16InputIsRotatedInFloat32AndReturnedAsBf16) {
  at::manual_seed(4);
  const at::Tensor x = at::randn({1, 2, 6, 8}).to(at::kBFloat16);
  const RopeTables tables = make_rope_tables(8, 6, 10000.0);
  const at::Tensor out = apply_rope(x, tables.cos, tables.sin);
  EXPECT_EQ(out.scalar_type(), at::kBFloat16);
  const at::Tensor expected = apply_rope(x.to(at::kFloat), tables.cos, tables.sin);
  EXPECT_TRUE(at::equal(out, expected.to(at::kBFloat16)));
}

TEST(LayersRope, TablesMatchDoublePrecision) {
  const int64_t head_dim = 16, positions = 40;
  const double theta = 10000.0;
  const RopeTables tables = make_rope_tables(head_dim, positions, theta);
  const std::vector<int64_t> expected_shape = {positions, head_dim / 2};
  EXPECT_EQ(tables.cos.sizes().vec(), expected_shape);
  EXPECT_EQ(tables.sin.sizes().vec(), expected_shape);
  EXPECT_EQ(tables.cos.scalar_type(), at::kFloat);
  EXPECT_EQ(tables.sin.scalar_type(), at::kFloat);
  for (const int64_t pos : {0, 1, 5, 17, 39}) {
    for (const int64_t i : {0, 1, 3, 7}) {
      SCOPED_TRACE("pos " + std::to_string(pos) + " pair " + std::to_string(i));
      const double angle =
          static_cast<double>(pos) * std::pow(theta, -2.0 * static_cast<double>(i) / head_dim);
      EXPECT_NEAR(tables.cos[pos][i].item<double>(), std::cos(angle), 1e-5);
      EXPECT_NEAR(tables.sin[pos][i].item<double>(), std::sin(angle), 1e-5);
    }
  }
}

// --- norms ---------------------------------------------------------------------------------------

TEST(LayersNorm, RmsNormMatchesFormula) {
  at::manual_seed(5);
  const double eps = 1e-5;
  const at::Tensor x = at::randn({3, 4, 32}) * 3.0;
  const at::Tensor w = at::randn({32});
  const at::Tensor expected = x / at::sqrt((x * x).mean(-1, /*keepdim=*/true) + eps) * w;
  const at::Tensor out = rms_norm(x, w, eps);
  EXPECT_EQ(out.scalar_type(), at::kFloat);
  EXPECT_LE(max_abs_diff(out, expected), 1e-5);
}

TEST(LayersNorm, RmsNormUsesEps) {
  // A zero row stays finite only because of eps; a tiny row is damped by it.
  const at::Tensor x = at::zeros({1, 8});
  EXPECT_TRUE(at::equal(rms_norm(x, at::ones({8}), 1e-5), x));
  const at::Tensor small = at::full({1, 4}, 1e-3);
  const double expected = 1e-3 / std::sqrt(1e-6 + 1e-2);
  EXPECT_NEAR(rms_norm(small, at::ones({4}), 1e-2)[0][0].item<double>(), expected, 1e-7);
}

TEST(LayersNorm, LayerNormWithoutAffineNormalisesRows) {
  at::manual_seed(6);
  const at::Tensor x = at::randn({5, 64}) * 4.0 + 2.0;
  const at::Tensor out = layer_norm(x, 1e-6);
  EXPECT_EQ(out.sizes(), x.sizes());
  EXPECT_LE(out.mean(-1).abs().max().item<double>(), 1e-5);
  const at::Tensor variance = out.var(-1, /*unbiased=*/false);
  EXPECT_LE((variance - 1.0).abs().max().item<double>(), 1e-4);
}

TEST(LayersNorm, LayerNormWithAffineMatchesAten) {
  at::manual_seed(7);
  const at::Tensor x = at::randn({2, 3, 48});
  const at::Tensor w = at::randn({48});
  const at::Tensor b = at::randn({48});
  const at::Tensor expected = at::layer_norm(x, {48}, w, b, 1e-6);
  EXPECT_LE(max_abs_diff(layer_norm(x, w, b, 1e-6), expected), 1e-6);
  // And the affine part is really applied (not the plain normalisation).
  EXPECT_GT(max_abs_diff(layer_norm(x, w, b, 1e-6), layer_norm(x, 1e-6)), 0.1);
}

TEST(LayersNorm, Bf16InputsAreNormalisedInFloat32) {
  // Computing in bf16 would round every intermediate; the result must instead be the float32
  // result rounded once. Norm weights are float32 (they stay float32 in a bf16 model).
  at::manual_seed(8);
  const at::Tensor x = (at::randn({16, 64}) * 5.0 + 3.0).to(at::kBFloat16);
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor w = at::randn({64});
  const at::Tensor b = at::randn({64});

  const at::Tensor rms = rms_norm(x, w, 1e-5);
  EXPECT_EQ(rms.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(rms, rms_norm(xf, w, 1e-5).to(at::kBFloat16)));

  const at::Tensor plain = layer_norm(x, 1e-6);
  EXPECT_EQ(plain.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(plain, layer_norm(xf, 1e-6).to(at::kBFloat16)));

  const at::Tensor affine = layer_norm(x, w.to(at::kBFloat16), b.to(at::kBFloat16), 1e-6);
  EXPECT_EQ(affine.scalar_type(), at::kBFloat16);
  const at::Tensor affine_f32 = layer_norm(xf, w.to(at::kBFloat16), b.to(at::kBFloat16), 1e-6);
  EXPECT_EQ(affine_f32.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(affine, affine_f32.to(at::kBFloat16)));
}

// --- attention -----------------------------------------------------------------------------------

at::Tensor manual_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& mask) {
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(q.size(-1)));
  if (mask.defined()) {
    scores = scores.masked_fill(mask.logical_not(), -std::numeric_limits<float>::infinity());
  }
  return at::matmul(at::softmax(scores, -1), v);
}

TEST(LayersAttention, BooleanMaskMatchesManualSoftmax) {
  at::manual_seed(9);
  const int64_t batch = 2, heads = 3, lq = 5, lk = 7, hd = 16;
  const at::Tensor q = at::randn({batch, heads, lq, hd});
  const at::Tensor k = at::randn({batch, heads, lk, hd});
  const at::Tensor v = at::randn({batch, heads, lk, hd});
  // Random per-batch mask broadcast over heads; key 0 always visible so no row is empty.
  at::Tensor mask = at::rand({batch, 1, lq, lk}) > 0.5;
  mask.select(-1, 0).fill_(true);
  ASSERT_FALSE(mask.all().item<bool>());  // the mask must actually hide something

  const at::Tensor out = attention(q, k, v, mask);
  ASSERT_EQ(out.sizes(), q.sizes());
  EXPECT_LE(max_abs_diff(out, manual_attention(q, k, v, mask)), 1e-5);
  // The mask changes the result (true means attend, not hide).
  EXPECT_GT(max_abs_diff(out, manual_attention(q, k, v, at::Tensor())), 1e-3);
}

TEST(LayersAttention, UndefinedMaskAttendsEverywhere) {
  at::manual_seed(10);
  const at::Tensor q = at::randn({1, 2, 4, 8});
  const at::Tensor k = at::randn({1, 2, 6, 8});
  const at::Tensor v = at::randn({1, 2, 6, 8});
  EXPECT_LE(max_abs_diff(attention(q, k, v, at::Tensor()), manual_attention(q, k, v, {})), 1e-5);
}

TEST(LayersAttention, SplitAndMergeHeadsRoundTrip) {
  const int64_t batch = 2, len = 3, heads = 4, hd = 5;
  const at::Tensor x = at::arange(batch * len * heads * hd, at::kFloat).reshape({batch, len, -1});
  const at::Tensor split = split_heads(x, heads);
  ASSERT_EQ(split.sizes().vec(), (std::vector<int64_t>{batch, heads, len, hd}));
  // Head h holds channels h*hd .. h*hd+hd-1 of each position.
  EXPECT_EQ(split[1][2][0][3].item<float>(), x[1][0][2 * hd + 3].item<float>());
  EXPECT_EQ(split[0][3][2][0].item<float>(), x[0][2][3 * hd].item<float>());
  const at::Tensor merged = merge_heads(split);
  EXPECT_EQ(merged.sizes(), x.sizes());
  EXPECT_TRUE(at::equal(merged, x));
}

// --- MLPs ----------------------------------------------------------------------------------------

Linear random_linear(int64_t in, int64_t out, bool bias) {
  return {at::randn({out, in}) / std::sqrt(double(in)), bias ? at::randn({out}) : at::Tensor()};
}

// x @ W^T + b, written out.
at::Tensor manual_linear(const Linear& l, const at::Tensor& x) {
  at::Tensor y = at::matmul(x, l.weight.t());
  return l.bias.defined() ? y + l.bias : y;
}

TEST(LayersMlp, LinearWithAndWithoutBias) {
  at::manual_seed(11);
  const at::Tensor x = at::randn({2, 3, 8});
  const Linear with_bias = random_linear(8, 6, true);
  const Linear without_bias = random_linear(8, 6, false);
  EXPECT_EQ(with_bias.in_features(), 8);
  EXPECT_EQ(with_bias.out_features(), 6);
  EXPECT_LE(max_abs_diff(with_bias(x), manual_linear(with_bias, x)), 1e-5);
  EXPECT_LE(max_abs_diff(without_bias(x), manual_linear(without_bias, x)), 1e-5);
}

TEST(LayersMlp, SwiGluMatchesFormula) {
  at::manual_seed(12);
  const int64_t d = 16;
  const SwiGluMlp mlp{random_linear(d, 4 * d, true), random_linear(d, 4 * d, true),
                      random_linear(4 * d, d, true), Linear{}};
  const at::Tensor x = at::randn({2, 5, d}) * 2.0;
  const at::Tensor g = manual_linear(mlp.gate, x);
  const at::Tensor silu = g / (1.0 + at::exp(-g));
  const at::Tensor expected = manual_linear(mlp.down, silu * manual_linear(mlp.up, x));
  EXPECT_LE(max_abs_diff(mlp(x), expected), 1e-5);
  // Packed, gate and up are one GEMM whose output is split: the same MLP.
  SwiGluMlp packed = mlp;
  packed.gate_up = pack_linears({&packed.gate, &packed.up}, "mlp");
  EXPECT_LE(max_abs_diff(packed(x), expected), 1e-5);
}

TEST(LayersMlp, GeluIsTheExactErfForm) {
  at::manual_seed(13);
  const int64_t d = 16;
  const GeluMlp mlp{random_linear(d, 4 * d, true), random_linear(4 * d, d, true)};
  const at::Tensor x = at::randn({2, 5, d}) * 2.0;
  const at::Tensor h = manual_linear(mlp.up, x);
  const at::Tensor gelu = h * 0.5 * (1.0 + at::erf(h / std::sqrt(2.0)));
  const at::Tensor expected = manual_linear(mlp.down, gelu);
  EXPECT_LE(max_abs_diff(mlp(x), expected), 1e-5);
  // The tanh approximation differs by more than the tolerance, so the check above can tell.
  const at::Tensor tanh_form = manual_linear(mlp.down, at::gelu(h, "tanh"));
  EXPECT_GT(max_abs_diff(tanh_form, expected), 1e-5);
}

TEST(Layers, ComplexRopeIsTheSameRotation) {
  // The CUDA decode step rotates by one complex multiply; it must be the written-out rotation
  // up to float32 rounding, at per-row positions as the decode step gathers them.
  const RopeTables tables = make_rope_tables(16, 9, 10000.0);
  const at::Tensor x = at::randn({3, 2, 1, 16});
  const at::Tensor positions = at::tensor({1, 8, 4}, at::kLong).view({-1, 1});
  const at::Tensor cos = tables.cos.index({positions}).unsqueeze(1);
  const at::Tensor sin = tables.sin.index({positions}).unsqueeze(1);
  const at::Tensor expected = apply_rope(x, cos, sin);
  const at::Tensor complex = apply_rope_complex(x, rope_cis(cos, sin));
  EXPECT_EQ(complex.sizes(), x.sizes());
  EXPECT_LT((complex - expected).abs().max().item<double>(), 1e-6);
  EXPECT_GT((expected - x).abs().max().item<double>(), 1e-2);  // it did rotate
  // A strided (head-split) bf16 view, as the model passes it.
  const at::Tensor wide = at::randn({3, 1, 32}).to(at::kBFloat16);
  const at::Tensor heads = wide.unflatten(-1, {2, 16}).transpose(1, 2);
  EXPECT_LT((apply_rope_complex(heads, rope_cis(cos, sin)).to(at::kFloat) -
             apply_rope(heads, cos, sin).to(at::kFloat))
                .abs()
                .max()
                .item<double>(),
            2e-2);
}

}  // namespace test_layers
}  // namespace cube3d
