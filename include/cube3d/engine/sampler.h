// Classifier-free guidance and token choice for one decode step, as pure tensor ops on the
// device: no host sync, fixed shapes, so the step stays capturable as a CUDA graph.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace cube3d {

// Per-request sampling inputs of one batch of b requests (a runner's static buffers).
struct SamplingBuffers {
  at::Tensor guidance;  // [b] float64: guidance scale g (0 = no guidance for this request)
  at::Tensor top_p;     // [b] float32: nucleus mass; >= 1 keeps every token
  at::Tensor greedy;    // [b] bool: argmax instead of sampling
  at::Tensor uniforms;  // [b, T + 1] float32: the request's random stream, one draw per token
                        // (column T: the runner's scratch position, never a real token)
};

// Host-side facts about a batch, fixed for all its steps.
struct SamplingPlan {
  bool cfg = true;            // logits rows are [cond (b) ; uncond (b)]
  bool any_sampling = false;  // skip the top-p work when every request is greedy
  int64_t codes = 0;          // C: only the code logits are candidates
  int64_t total_tokens = 0;   // T, for the guidance schedule
};

// CFG mix of raw logits [rows, >= C] for token index `steps` [b] (int64):
// gamma = g (T - i) / T, (1 + gamma) l_cond - gamma l_uncond. Returns [b, C] float32.
at::Tensor guided_logits(const at::Tensor& logits, const at::Tensor& steps,
                         const SamplingBuffers& buffers, const SamplingPlan& plan);

// Greedy argmax, or top-p sampling with the draw uniforms[:, step]: the smallest set of most
// likely tokens whose cumulative probability stays within top_p (the most likely token always
// kept) is renormalised and sampled by inverse CDF. Returns [b] int64.
at::Tensor choose_tokens(const at::Tensor& mixed, const at::Tensor& steps,
                         const SamplingBuffers& buffers, const SamplingPlan& plan);

}  // namespace cube3d
