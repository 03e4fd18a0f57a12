// Shared fixtures of the engine tests: a tiny random-weight model (built in milliseconds from an
// inline config), seeded random prompts, and small tensor helpers.
#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cube3d/core/model_config.h"
#include "cube3d/engine/decode_runner.h"
#include "cube3d/engine/engine.h"
#include "cube3d/engine/generator.h"
#include "golden_model.h"

namespace cube3d::test {

// Condition positions per prompt (CLIP has 77; fewer keeps every forward cheap).
inline constexpr int64_t kTextTokens = 6;
// Seed of the shared "empty prompt" embedding every guided request uses as uncond_hidden.
inline constexpr uint64_t kUncondSeed = 999;

// D 32 (or n_embd), 2 heads, 2 dual blocks + `single_layers` single blocks, C 32 codes, T 12
// tokens.
inline std::string tiny_yaml(int64_t single_layers, uint64_t weights_seed, int64_t n_embd = 32) {
  return "random_weights_seed: " + std::to_string(weights_seed) + R"(
gpt_model:
  n_layer: 2
  n_single_layer: )" +
         std::to_string(single_layers) +
         R"(
  rope_theta: 10000
  n_head: 2
  n_embd: )" +
         std::to_string(n_embd) +
         R"(
  bias: true
  eps: 1.e-6
  shape_model_vocab_size: 32
  text_model_embed_dim: 16
  use_pooled_text_embed: false
  shape_model_embed_dim: 8
  encoder_with_cls_token: true
  use_bbox: false
shape_model:
  encoder_with_cls_token: true
  num_encoder_latents: 12
  num_decoder_latents: 0
  embed_dim: 8
  width: 32
  num_heads: 2
  out_dim: 1
  eps: 1.e-6
  num_freqs: 4
  point_feats: 3
  embed_point_feats: false
  num_encoder_layers: 1
  encoder_cross_attention_levels: [0]
  num_decoder_layers: 1
  num_codes: 32
)";
}

inline ModelConfig tiny_config(int64_t single_layers = 1, uint64_t weights_seed = 1234) {
  return parse_model_config(tiny_yaml(single_layers, weights_seed), "tiny_engine.yaml");
}

inline std::unique_ptr<Engine> tiny_engine(int64_t max_batch, int64_t single_layers = 1,
                                           uint64_t weights_seed = 1234) {
  EngineOptions options;
  options.max_batch = max_batch;
  options.text_tokens = kTextTokens;
  return Engine::load(tiny_config(single_layers, weights_seed), options);
}

inline at::Tensor seeded_randn(std::vector<int64_t> shape, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn(shape, gen, at::TensorOptions().dtype(at::kFloat));
}

// A request whose prompt embedding is drawn from `prompt_seed`; top_p unset means greedy.
inline GenerationRequest make_request(const Engine& engine, uint64_t prompt_seed,
                                      double guidance = 3.0,
                                      std::optional<double> top_p = std::nullopt,
                                      uint64_t seed = 0) {
  const int64_t dt = engine.config().gpt.text_model_embed_dim;
  GenerationRequest r;
  r.text_hidden = seeded_randn({kTextTokens, dt}, prompt_seed);
  r.uncond_hidden = seeded_randn({kTextTokens, dt}, kUncondSeed);
  r.guidance_scale = guidance;
  r.top_p = top_p;
  r.seed = seed;
  return r;
}

// What a generate call returned, copied out at once (so a later call cannot change it).
struct Outcome {
  at::Tensor ids;     // [n, T]
  at::Tensor logits;  // [n, T, C] or undefined
};

inline Outcome run(Engine& engine, const std::vector<GenerationRequest>& requests,
                   const GenerationOptions& options) {
  const GenerationResult r = engine.generate(requests, options);
  return {r.ids.clone(), r.step_logits.defined() ? r.step_logits.clone() : at::Tensor()};
}

inline GenerationOptions options_with(bool record_logits, int64_t bucket = 0,
                                      bool use_kv_cache = true,
                                      SingleStreamDecode mode = SingleStreamDecode::kCausal) {
  GenerationOptions o;
  o.record_logits = record_logits;
  o.bucket = bucket;
  o.use_kv_cache = use_kv_cache;
  o.single_stream_decode = mode;
  return o;
}

// Loads one guided, greedy request into a runner's static buffers and runs its prefill into the
// runner's cache, as the generator's KV path does; the first token is then chosen.
inline void prefill(DecodeRunner& runner, const ShapeGpt& gpt, const GenerationRequest& q) {
  runner.sampling().guidance.fill_(q.guidance_scale);
  runner.sampling().greedy.fill_(true);
  runner.plan().any_sampling = false;
  runner.positions().zero_();
  runner.token_ids().fill_(gpt.config().bos_id());
  const at::Tensor cond =
      at::cat({gpt.encode_condition(q.text_hidden.unsqueeze(0), at::Tensor()),
               gpt.encode_condition(q.uncond_hidden.unsqueeze(0), at::Tensor())});
  const at::Tensor bos = gpt.embed(runner.token_ids());
  runner.accept_logits(
      gpt.forward(cond, at::cat({bos, bos}).unsqueeze(1), &runner.cache()).squeeze(1));
}

using testing::max_abs_diff;

// Distinct values in an int64 tensor: guards tests against a degenerate model that emits one
// token for everything (which would make equality checks vacuous).
inline int64_t distinct(const at::Tensor& ids) { return std::get<0>(at::_unique(ids)).numel(); }

}  // namespace cube3d::test
