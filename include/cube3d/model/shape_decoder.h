// The decode side of the shape tokenizer (official OneDAutoEncoder): codebook lookup, decoder
// blocks, the phase-modulated Fourier embedder and the occupancy query, plus the dense grid the
// mesh stage extracts a surface from. Pure forward math.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "cube3d/core/model_config.h"
#include "cube3d/model/layers.h"
#include "cube3d/model/weights.h"

namespace cube3d {

struct DecoderBlockWeights {
  Linear c_qk, c_v, c_proj;  // all with bias
  at::Tensor q_norm, k_norm;
  GeluMlp mlp;
};

struct ShapeDecoderWeights {
  // Bottleneck (SphericalVectorQuantizer with KL codebook regularisation).
  at::Tensor codebook, cb_weight, cb_bias, norm_weight;
  Linear c_out;
  at::Tensor positional_encodings;  // [T, W]
  std::vector<DecoderBlockWeights> blocks;
  // Occupancy decoder.
  at::Tensor fourier_weight;  // [3, F]
  Linear query_in, query_out;
  Linear c_q, c_k, c_v, c_proj;
  GeluMlp mlp;
  at::Tensor ln_f_weight, ln_f_bias;
  Linear c_head;

  static ShapeDecoderWeights from_tensors(const ShapeModelConfig& config, const TensorMap& tensors);
};

// Points per axis of the grid for a resolution base: 2^r + 1.
int64_t occupancy_grid_size(int64_t resolution_base);
// Axis coordinates exactly as numpy.linspace(min, max, n, dtype=float32) computes them.
at::Tensor grid_axis(int64_t points_per_axis);

class ShapeDecoder {
 public:
  ShapeDecoder(ShapeModelConfig config, ShapeDecoderWeights weights);

  const ShapeModelConfig& config() const { return config_; }

  // rmsnorm(codebook * cb_weight + cb_bias) * norm.weight, eps 1e-5: [C, E] float32.
  const at::Tensor& normalized_codebook() const { return codebook_; }

  // Shape token ids [B, T] (clamped to the codebook) -> decoder output latents [B, T, W].
  at::Tensor latents(const at::Tensor& ids) const;

  // Fourier embedding of points [..., 3] -> [..., 3 (2F + 1)].
  at::Tensor fourier_embed(const at::Tensor& points) const;

  // The latents' cross-attention keys and values, computed once per shape and reused by every
  // chunk of query points.
  struct LatentKv {
    at::Tensor k, v;  // [B, H, T, hd]
  };
  LatentKv latent_kv(const at::Tensor& latents) const;

  // Occupancy logits of points [B, N, 3] -> [B, N] (positive = inside).
  at::Tensor occupancy(const LatentKv& kv, const at::Tensor& points) const;

  // Logits on the (2^r + 1)^3 grid over [-1.05, 1.05]^3, x-major, for one shape's latents
  // [1, T, W]: [N, N, N] float32 on the CPU. Points are evaluated in chunks of at most
  // `chunk_points` so memory stays bounded whatever the resolution (0 = pick from the size).
  // `should_stop`, when set, is asked between chunks; when it answers true the evaluation stops
  // with ErrorCode::kCancelled (a 257^3 grid takes a while, and its client may be gone).
  at::Tensor occupancy_grid(const at::Tensor& latents, int64_t resolution_base,
                            int64_t chunk_points = 0,
                            const std::function<bool()>& should_stop = {}) const;

  // Multiply-adds x 2 of one occupancy query (the Fourier embedding, query MLP, cross-attention
  // over T latents, MLP, head): about 14 M for the v0.1 decoder.
  int64_t query_flops_per_point() const;

  // A chunk size that keeps one chunk's activations near `budget_bytes`.
  int64_t default_chunk_points(int64_t budget_bytes = int64_t{256} << 20) const;

 private:
  ShapeModelConfig config_;
  ShapeDecoderWeights weights_;
  at::Tensor codebook_;  // normalised
  at::Tensor carrier_;   // [F] float32, computed as the official embedder does
};

}  // namespace cube3d
