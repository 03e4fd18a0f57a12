#include "cube3d/engine/sampler.h"

#include <ATen/ATen.h>

namespace cube3d {

at::Tensor guided_logits(const at::Tensor& logits, const at::Tensor& steps,
                         const SamplingBuffers& buffers, const SamplingPlan& plan) {
  const int64_t b = buffers.guidance.size(0);
  const at::Tensor codes = logits.narrow(-1, 0, plan.codes).to(at::kFloat);
  if (!plan.cfg) return codes;
  const at::Tensor cond = codes.narrow(0, 0, b);
  const at::Tensor uncond = codes.narrow(0, b, b);
  // The schedule in float64, then one rounding to float32, as the official code's Python
  // float scalars are.
  const double total = static_cast<double>(plan.total_tokens);
  const at::Tensor gamma64 = buffers.guidance * (total - steps.to(at::kDouble)) / total;
  const at::Tensor gamma = gamma64.to(at::kFloat).unsqueeze(1);
  const at::Tensor one_plus_gamma = (gamma64 + 1.0).to(at::kFloat).unsqueeze(1);
  return one_plus_gamma * cond - gamma * uncond;
}

at::Tensor choose_tokens(const at::Tensor& mixed, const at::Tensor& steps,
                         const SamplingBuffers& buffers, const SamplingPlan& plan) {
  const at::Tensor argmax = mixed.argmax(-1);
  if (!plan.any_sampling) return argmax;

  const auto sorted = mixed.sort(-1, /*descending=*/true);
  const at::Tensor& sorted_logits = std::get<0>(sorted);
  const at::Tensor& sorted_index = std::get<1>(sorted);
  const at::Tensor probs = sorted_logits.softmax(-1);
  const at::Tensor top_p = buffers.top_p.unsqueeze(1);
  // Drop tokens once the inclusive cumulative mass exceeds top_p; top_p >= 1 drops nothing
  // (the official code skips the filter there, and rounding could push the sum past 1).
  at::Tensor drop = probs.cumsum(-1).gt(top_p).logical_and(top_p.lt(1.0));
  drop.select(-1, 0).fill_(false);
  const at::Tensor kept = probs.masked_fill(drop, 0.0);
  const at::Tensor cdf = kept.cumsum(-1);
  const at::Tensor u = buffers.uniforms.gather(1, steps.view({-1, 1}));  // [b, 1]
  const at::Tensor threshold = u * cdf.narrow(-1, cdf.size(-1) - 1, 1);
  // Kept tokens are a prefix of the sorted order and u < 1, so this index lands inside it.
  const at::Tensor rank = cdf.le(threshold).sum(-1, /*keepdim=*/true).clamp_max(cdf.size(-1) - 1);
  const at::Tensor sampled = sorted_index.gather(1, rank).squeeze(1);
  return at::where(buffers.greedy, argmax, sampled);
}

}  // namespace cube3d
