// A decode runner owns one batch shape's static buffers (the token fed, its position, the
// sampling inputs, the outputs) and runs one decode step on them in place: embed the previous
// token, the shape GPT step against the KV cache, CFG mix, token choice, record, advance.
//
// Only the buffers' contents change between steps and batches, never their addresses or
// shapes: the eager runner here runs the ops directly; a CUDA-graph runner captures the same
// step once per batch bucket and replays it.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "cube3d/engine/sampler.h"
#include "cube3d/model/kv_state.h"
#include "cube3d/model/shape_gpt.h"

namespace cube3d {

struct DecodeRunnerConfig {
  int64_t batch = 1;  // requests (b); rows are 2b with guidance
  bool cfg = true;
  int64_t total_tokens = 0;    // T
  bool record_logits = false;  // keep the guided logits of every step [b, T, C]
};

class DecodeRunner {
 public:
  DecodeRunner(const ShapeGpt& gpt, KvState cache, DecodeRunnerConfig config);
  virtual ~DecodeRunner() = default;
  DecodeRunner(const DecodeRunner&) = delete;
  DecodeRunner& operator=(const DecodeRunner&) = delete;

  const DecodeRunnerConfig& config() const { return config_; }
  int64_t rows() const { return config_.cfg ? 2 * config_.batch : config_.batch; }
  KvState& cache() { return cache_; }

  // Static inputs, written by the generator before the first step of a batch.
  SamplingBuffers& sampling() { return sampling_; }
  SamplingPlan& plan() { return plan_; }
  SingleStreamDecode& single_stream_decode() { return mode_; }

  // Consumes raw logits [rows, V] for the token at `positions` (per request): guidance, choice,
  // record, then feeds the chosen token at the next position. Shared by prefill and step().
  void accept_logits(const at::Tensor& logits);

  // One decode step: feeds token_ids at positions through the model, then accept_logits.
  virtual void step();
  // Makes the first step cheap (a graph runner captures here); nothing to do when eager.
  virtual void prepare() {}

  at::Tensor& token_ids() { return token_ids_; }                // [b] int64: the token to feed next
  at::Tensor& positions() { return positions_; }                // [b] int64: its shape position
  const at::Tensor& output_ids() const { return output_ids_; }  // [b, T] int64
  const at::Tensor& output_logits() const { return output_logits_; }  // [b, T, C] or undefined

 protected:
  const ShapeGpt& gpt_;
  KvState cache_;
  DecodeRunnerConfig config_;
  SamplingBuffers sampling_;
  SamplingPlan plan_;
  SingleStreamDecode mode_ = SingleStreamDecode::kCausal;
  at::Tensor token_ids_, positions_, output_ids_, output_logits_;
};

}  // namespace cube3d
