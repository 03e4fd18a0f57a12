#include "cube3d/model/shape_decoder.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <utility>

#include "cube3d/core/constants.h"
#include "cube3d/core/error.h"

namespace cube3d {
namespace {

// The occupancy decoder's cross-attention layer is built with the default eps, not the config's.
constexpr double kCrossAttentionEps = 1e-6;

GeluMlp gelu_mlp(const WeightLookup& t, const std::string& prefix) {
  return {t.linear(prefix + ".up_proj"), t.linear(prefix + ".down_proj")};
}

}  // namespace

ShapeDecoderWeights ShapeDecoderWeights::from_tensors(const ShapeModelConfig& config,
                                                      const TensorMap& tensors) {
  const WeightLookup t(tensors, "shape tokenizer");
  ShapeDecoderWeights w;
  w.codebook = t.tensor("bottleneck.block.codebook.weight");
  w.cb_weight = t.tensor("bottleneck.block.cb_weight");
  w.cb_bias = t.tensor("bottleneck.block.cb_bias");
  w.norm_weight = t.tensor("bottleneck.block.norm.weight");
  w.c_out = t.linear("bottleneck.block.c_out");
  w.positional_encodings = t.tensor("decoder.positional_encodings");
  for (int64_t i = 0; i < config.num_decoder_layers; ++i) {
    const std::string p = "decoder.blocks." + std::to_string(i);
    w.blocks.push_back({t.linear(p + ".attn.c_qk"), t.linear(p + ".attn.c_v"),
                        t.linear(p + ".attn.c_proj"), t.tensor(p + ".attn.q_norm.weight"),
                        t.tensor(p + ".attn.k_norm.weight"), gelu_mlp(t, p + ".mlp")});
  }
  const std::string o = "occupancy_decoder";
  w.fourier_weight = t.tensor(o + ".embedder.weight");
  w.query_in = t.linear(o + ".query_in.in_layer");
  w.query_out = t.linear(o + ".query_in.out_layer");
  w.c_q = t.linear(o + ".attn_out.attn.c_q");
  w.c_k = t.linear(o + ".attn_out.attn.c_k");
  w.c_v = t.linear(o + ".attn_out.attn.c_v");
  w.c_proj = t.linear(o + ".attn_out.attn.c_proj");
  w.mlp = gelu_mlp(t, o + ".attn_out.mlp");
  w.ln_f_weight = t.tensor(o + ".ln_f.weight");
  w.ln_f_bias = t.tensor(o + ".ln_f.bias");
  w.c_head = t.linear(o + ".c_head");
  return w;
}

int64_t occupancy_grid_size(int64_t resolution_base) {
  if (resolution_base < 1 || resolution_base > kMaxResolutionBase) {
    throw invalid_argument("resolution_base " + std::to_string(resolution_base) +
                           " is outside the supported range [1, " +
                           std::to_string(kMaxResolutionBase) + "]");
  }
  return grid_points_per_axis_unchecked(resolution_base);
}

at::Tensor grid_axis(int64_t n) {
  // numpy.linspace: start + i * step in float64, the last point set to stop, then float32.
  std::vector<float> values(static_cast<size_t>(n));
  const double step = (kGridBoundMax - kGridBoundMin) / static_cast<double>(n - 1);
  for (int64_t i = 0; i < n; ++i) {
    values[static_cast<size_t>(i)] =
        static_cast<float>(static_cast<double>(i) * step + kGridBoundMin);
  }
  values.back() = static_cast<float>(kGridBoundMax);
  return at::tensor(values, at::TensorOptions().dtype(at::kFloat));
}

ShapeDecoder::ShapeDecoder(ShapeModelConfig config, ShapeDecoderWeights weights)
    : config_(std::move(config)), weights_(std::move(weights)) {
  const at::Tensor regularized =
      weights_.codebook.to(at::kFloat) * weights_.cb_weight + weights_.cb_bias;
  codebook_ = rms_norm(regularized, weights_.norm_weight, kQkNormEps);

  // carrier = ((F/8)^linspace(1, 0, F) + linspace(0, 1, F)) * 2 * pi, in float32 like the
  // official buffer (it is not stored in checkpoints).
  const int64_t f = config_.num_freqs;
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  const at::Tensor base = at::pow(static_cast<double>(f) / 8.0, at::linspace(1.0, 0.0, f, f32));
  carrier_ = ((base + at::linspace(0.0, 1.0, f, f32)) * 2.0 * std::numbers::pi)
                 .to(weights_.fourier_weight.device());
}

at::Tensor ShapeDecoder::latents(const at::Tensor& ids) const {
  const int64_t t = ids.size(1);
  if (t > weights_.positional_encodings.size(0)) {
    throw invalid_argument("shape decoder: " + std::to_string(t) + " tokens exceed the " +
                           std::to_string(weights_.positional_encodings.size(0)) +
                           " positional encodings");
  }
  const at::ScalarType dtype = weights_.c_out.weight.scalar_type();
  const at::Tensor codes = ids.clamp(0, config_.num_codes - 1);
  const at::Tensor z = weights_.c_out(at::embedding(codebook_, codes).to(dtype));
  at::Tensor h = z + weights_.positional_encodings.narrow(0, 0, t).unsqueeze(0);
  const int64_t heads = config_.num_heads;
  const double eps = config_.eps;
  for (const auto& block : weights_.blocks) {
    const at::Tensor x = layer_norm(h, eps);
    const auto qk = block.c_qk(x).chunk(2, -1);
    const at::Tensor q = rms_norm(split_heads(qk[0], heads), block.q_norm, kQkNormEps);
    const at::Tensor k = rms_norm(split_heads(qk[1], heads), block.k_norm, kQkNormEps);
    const at::Tensor v = split_heads(block.c_v(x), heads);
    h = h + block.c_proj(merge_heads(attention(q, k, v, at::Tensor())));
    h = h + block.mlp(layer_norm(h, eps));
  }
  return h;
}

at::Tensor ShapeDecoder::fourier_embed(const at::Tensor& points) const {
  const at::Tensor x = points.to(at::kFloat);
  const at::Tensor m = x.unsqueeze(-1);  // [..., 3, 1]
  const at::Tensor fm = (m * weights_.fourier_weight).flatten(-2);
  const at::Tensor pm = (m * 0.5 * std::numbers::pi + carrier_).flatten(-2);
  return at::cat({x, fm.cos() + pm.cos(), fm.sin() + pm.sin()}, -1);
}

ShapeDecoder::LatentKv ShapeDecoder::latent_kv(const at::Tensor& latents) const {
  const at::Tensor c = layer_norm(latents, kCrossAttentionEps);
  return {split_heads(weights_.c_k(c), config_.num_heads),
          split_heads(weights_.c_v(c), config_.num_heads)};
}

at::Tensor ShapeDecoder::occupancy(const LatentKv& kv, const at::Tensor& points) const {
  const at::ScalarType dtype = weights_.query_in.weight.scalar_type();
  const at::Tensor e = fourier_embed(points).to(dtype);
  at::Tensor q = weights_.query_out(at::silu(weights_.query_in(e)));
  const at::Tensor qh =
      split_heads(weights_.c_q(layer_norm(q, kCrossAttentionEps)), config_.num_heads);
  q = q + weights_.c_proj(merge_heads(attention(qh, kv.k, kv.v, at::Tensor())));
  q = q + weights_.mlp(layer_norm(q, kCrossAttentionEps));
  const at::Tensor out =
      weights_.c_head(layer_norm(q, weights_.ln_f_weight, weights_.ln_f_bias, config_.eps));
  return out.squeeze(-1).to(at::kFloat);
}

int64_t ShapeDecoder::query_flops_per_point() const {
  const int64_t w = config_.width;
  const int64_t t = config_.num_encoder_latents;
  // query_in + query_out, c_q, c_proj, the 4W MLP (two matrices), scores and values, the head.
  return 2 * (config_.fourier_dim() * w + w * w + w * w + w * w + 8 * w * w + 2 * t * w + w);
}

int64_t ShapeDecoder::default_chunk_points(int64_t budget_bytes) const {
  // Per point: the Fourier features, a few width-sized activations, the 4W MLP hidden layer and
  // one row of attention scores per head, in float32.
  const int64_t w = config_.width;
  const int64_t per_point =
      4 * (config_.fourier_dim() + 8 * w + config_.num_heads * config_.num_encoder_latents);
  return std::clamp<int64_t>(budget_bytes / per_point, 1024, 1 << 18);
}

at::Tensor ShapeDecoder::occupancy_grid(const at::Tensor& latents, int64_t resolution_base,
                                        int64_t chunk_points,
                                        const std::function<bool()>& should_stop) const {
  if (latents.dim() != 3 || latents.size(0) != 1) {
    throw invalid_argument("occupancy_grid expects the latents of one shape [1, T, W]");
  }
  const int64_t n = occupancy_grid_size(resolution_base);
  const int64_t total = n * n * n;
  const int64_t chunk = chunk_points > 0 ? chunk_points : default_chunk_points();
  const at::Device device = latents.device();
  const at::Tensor axis = grid_axis(n).to(device);
  const LatentKv kv = latent_kv(latents);
  at::Tensor grid = at::empty({total}, at::TensorOptions().dtype(at::kFloat));
  const auto long_opts = at::TensorOptions().dtype(at::kLong).device(device);
  for (int64_t start = 0; start < total; start += chunk) {
    if (should_stop && should_stop()) throw cancelled("occupancy grid evaluation stopped");
    const int64_t count = std::min(chunk, total - start);
    // Point index -> (i, j, k) with x-major order: index = (i * n + j) * n + k.
    const at::Tensor idx = at::arange(start, start + count, long_opts);
    const at::Tensor points =
        at::stack({axis.index({idx.div(n * n, "floor")}), axis.index({idx.div(n, "floor") % n}),
                   axis.index({idx % n})},
                  -1)
            .unsqueeze(0);
    grid.narrow(0, start, count).copy_(occupancy(kv, points).squeeze(0));
  }
  return grid.view({n, n, n});
}

}  // namespace cube3d
