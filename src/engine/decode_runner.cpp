#include "cube3d/engine/decode_runner.h"

#include <ATen/ATen.h>

#include <utility>

#include "cube3d/engine/fused_decode.h"

#ifdef CUBE3D_WITH_CUDA
#include <nvtx3/nvToolsExt.h>
#endif

namespace cube3d {

DecodeRunner::DecodeRunner(const ShapeGpt& gpt, KvState cache, DecodeRunnerConfig config)
    : gpt_(gpt), cache_(std::move(cache)), config_(config) {
  const at::Device device = gpt.weights().wte.device();
  const auto opts = at::TensorOptions().device(device);
  const int64_t b = config_.batch;
  const int64_t t = config_.total_tokens;
  const int64_t codes = gpt.config().shape_model_vocab_size;
  sampling_.guidance = at::zeros({b}, opts.dtype(at::kDouble));
  sampling_.top_p = at::ones({b}, opts.dtype(at::kFloat));
  sampling_.greedy = at::ones({b}, opts.dtype(at::kBool));
  // T + 1 columns: the scratch position draws from the last one.
  sampling_.uniforms = at::zeros({b, t + 1}, opts.dtype(at::kFloat));
  plan_ = {config_.cfg, false, codes, t};
  token_ids_ = at::zeros({b}, opts.dtype(at::kLong));
  positions_ = at::zeros({b}, opts.dtype(at::kLong));
  output_ids_ = at::zeros({b, t + 1}, opts.dtype(at::kLong));
  if (config_.record_logits) {
    output_logits_ = at::zeros({b, t + 1, codes}, opts.dtype(at::kFloat));
  }
  if (config_.fused_kernels) fusions_ = decode_step_fusions(gpt);
  if (config_.decode_kernels == DecodeKernels::kTriton) {
    // After the static buffers: the kernels read them where they are.
    triton_ = std::make_unique<TritonDecodeStep>(
        gpt, cache_, TritonDecodeInputs{token_ids_, positions_, sampling_.guidance}, b, config_.cfg,
        t, config_.record_launches);
  }
}

at::Tensor DecodeRunner::output_ids() const {
  return output_ids_.narrow(1, 0, config_.total_tokens);
}

at::Tensor DecodeRunner::output_logits() const {
  return output_logits_.defined() ? output_logits_.narrow(1, 0, config_.total_tokens)
                                  : at::Tensor();
}

void DecodeRunner::accept_logits(const at::Tensor& logits, const SamplingPlan& plan) {
  accept_guided(guided_logits(logits, positions_, sampling_, plan), plan);
}

void DecodeRunner::accept_guided(const at::Tensor& mixed, const SamplingPlan& plan) {
  const at::Tensor next = choose_tokens(mixed, positions_, sampling_, plan);
  const at::Tensor slot = positions_.view({-1, 1});
  output_ids_.scatter_(1, slot, next.view({-1, 1}));
  if (output_logits_.defined()) {
    output_logits_.scatter_(1, slot.view({-1, 1, 1}).expand({-1, 1, mixed.size(-1)}),
                            mixed.unsqueeze(1));
  }
  token_ids_.copy_(next);
  // Stops at the scratch position T: a row that is done (or an idle slot of a continuous batch,
  // stepping as padding) keeps writing only there, never past the buffers.
  positions_.add_(1).clamp_max_(config_.total_tokens);
}

namespace {

// A named range around each decode step for profilers (scripts/gpu_check.sh: ncu
// --nvtx-include "cube3d.decode_step/"); nearly free when no tool is attached.
struct ProfilerRange {
#ifdef CUBE3D_WITH_CUDA
  explicit ProfilerRange(const char* name) { nvtxRangePushA(name); }
  ~ProfilerRange() { nvtxRangePop(); }
#else
  explicit ProfilerRange(const char*) {}
#endif
  ProfilerRange(const ProfilerRange&) = delete;
  ProfilerRange& operator=(const ProfilerRange&) = delete;
};

}  // namespace

void DecodeRunner::eager_step(SingleStreamDecode mode, const SamplingPlan& plan) {
  const ProfilerRange range("cube3d.decode_step");
  if (triton_) {
    // The kernels embed the fed token, run every block and mix the guided logits themselves.
    accept_guided(triton_->run(mode), plan);
    return;
  }
  const at::Tensor embeds = gpt_.embed(token_ids_);
  // The chosen token feeds both guidance rows of its request.
  const at::Tensor rows = config_.cfg ? at::cat({embeds, embeds}, 0) : embeds;
  const at::Tensor row_positions = config_.cfg ? at::cat({positions_, positions_}, 0) : positions_;
  accept_logits(gpt_.decode_step(rows, row_positions, cache_, mode, fusions_), plan);
}

}  // namespace cube3d
