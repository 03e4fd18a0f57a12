// A decode runner owns one decode variant's static buffers (the token fed, its position, the
// sampling inputs, the outputs) and runs one decode step on them in place: embed the previous
// token, the shape GPT step against the KV cache, CFG mix, token choice, record, advance.
//
// Only the buffers' contents change between steps and batches, never their addresses or
// shapes: this eager runner runs the ops directly; a graph runner (graph_runner.h) records the
// same step once per single-stream mode, at engine start, and replays it.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>

#include "cube3d/engine/decode_kernels.h"
#include "cube3d/engine/sampler.h"
#include "cube3d/engine/triton_decode.h"
#include "cube3d/model/kv_state.h"
#include "cube3d/model/shape_gpt.h"

namespace cube3d {

struct DecodeRunnerConfig {
  int64_t batch = 1;  // requests (b); rows are 2b with guidance
  bool cfg = true;
  int64_t total_tokens = 0;    // T
  bool record_logits = false;  // keep the guided logits of every step [b, T, C]
  bool fused_kernels = false;  // use the fused CUDA kernels where they apply (fused_decode.h)
  // kTriton: the step through the Triton kernels (triton_decode.h) instead of libtorch's ops.
  DecodeKernels decode_kernels = DecodeKernels::kTorch;
  // With kTriton: the recording mode, which counts the kernels' launches instead of running them
  // (any device; count_decode_step_launches).
  bool record_launches = false;
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

  // Static inputs, written in place (copy_, fill_) by the generator before a batch's first
  // step. Assigning a new tensor to one of them breaks a recorded step, which throws.
  SamplingBuffers& sampling() { return sampling_; }
  SamplingPlan& plan() { return plan_; }

  // Consumes raw logits [rows, V] for the token at `positions` (per request): guidance, choice,
  // record, then feeds the chosen token at the next position. Used by the prefill (eager) and
  // inside every step.
  void accept_logits(const at::Tensor& logits) { accept_logits(logits, plan_); }

  // Capture lifecycle. Eager runners have nothing to capture: every mode is ready.
  virtual void capture(SingleStreamDecode /*mode*/) {}
  virtual bool captured(SingleStreamDecode /*mode*/) const { return true; }
  virtual const char* kind() const { return "eager"; }

  // One decode step in `mode`: feeds token_ids at positions through the model, then
  // accept_logits. A graph runner replays what it recorded for `mode` and never records here.
  virtual void step(SingleStreamDecode mode) { eager_step(mode, plan_); }

  at::Tensor& token_ids() { return token_ids_; }  // [b] int64: the token to feed next
  at::Tensor& positions() { return positions_; }  // [b] int64: its shape position
  // [b, T] int64 and [b, T, C] float32 (undefined unless record_logits): views of the
  // buffers' first T columns.
  at::Tensor output_ids() const;
  at::Tensor output_logits() const;

  // Whether the fused kernels run in this runner's steps.
  bool fused() const { return static_cast<bool>(fusions_.qk_norm_rope_store); }
  // The Triton step (decode_kernels: triton), else null.
  const TritonDecodeStep* triton() const { return triton_.get(); }

  // Position T, one past the last token: the capture steps feed it, so that they write their
  // key/value slot, output column and random draw where no real step reads (every real step's
  // attention mask stops at its own position, at most T - 1).
  int64_t scratch_position() const { return config_.total_tokens; }

 protected:
  // The decode step on the static buffers, as a graph records it. `plan` is explicit because a
  // recording freezes the host-side choices it was made with.
  void eager_step(SingleStreamDecode mode, const SamplingPlan& plan);
  void accept_logits(const at::Tensor& logits, const SamplingPlan& plan);
  // The rest of accept_logits, from the guided logits [b, C] float32 on.
  void accept_guided(const at::Tensor& mixed, const SamplingPlan& plan);

  const ShapeGpt& gpt_;
  KvState cache_;
  DecodeRunnerConfig config_;
  SamplingBuffers sampling_;
  SamplingPlan plan_;
  DecodeStepFusions fusions_;  // empty unless config.fused_kernels and the kernels apply
  std::unique_ptr<TritonDecodeStep> triton_;  // decode_kernels: triton
  // Output buffers hold T + 1 columns: the last one is the scratch position's.
  at::Tensor token_ids_, positions_, output_ids_, output_logits_;
};

}  // namespace cube3d
