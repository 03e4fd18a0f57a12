#include "cube3d/engine/generator.h"

#include <ATen/ATen.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>

#include <ATen/DeviceAccelerator.h>
#include <c10/core/Event.h>

#include "cube3d/core/clock.h"
#include "cube3d/core/error.h"
#include "cube3d/engine/graph_runner.h"
#include "cube3d/engine/random_stream.h"
#include "cube3d/engine/triton_decode.h"

namespace cube3d {

void wait_for_queued_work(const at::Device& device) {
  if (device.is_cpu()) return;
  c10::Event done(device.type());
  done.record(at::accelerator::getCurrentStream(device.index()));
  done.synchronize();
}

namespace {

std::string describe(const RunnerKey& key) {
  return "batch " + std::to_string(key.batch) + (key.cfg ? " with guidance" : " without guidance") +
         (key.record_logits ? ", recording logits" : "");
}

// Graph modes run only what Engine::load captured; anything else is the caller's mistake.
Error not_captured(const RunnerKey& key, const std::string& mode, GraphMode graphs) {
  return failed_precondition("no decode graph was captured for " + describe(key) + mode +
                             " (cuda_graphs: " + to_string(graphs) +
                             "); graphs are captured at engine start for the variants and modes "
                             "in EngineOptions.capture");
}

void check_request_fields(const GenerationRequest& r, size_t index, int64_t text_tokens,
                          int64_t text_dim) {
  const std::string who = "request " + std::to_string(index) + ": ";
  // The KV cache is laid out for exactly this many condition tokens; any other count would
  // decode against a misplaced cache.
  if (!r.text_hidden.defined() || r.text_hidden.dim() != 2 ||
      r.text_hidden.size(0) != text_tokens || r.text_hidden.size(1) != text_dim) {
    throw invalid_argument(who + "text_hidden must be [" + std::to_string(text_tokens) + ", " +
                           std::to_string(text_dim) + "]");
  }
  if (!std::isfinite(r.guidance_scale) || r.guidance_scale < 0) {
    throw invalid_argument(who + "guidance_scale must be finite and >= 0");
  }
  if (r.guidance_scale > 0 &&
      (!r.uncond_hidden.defined() || r.uncond_hidden.sizes() != r.text_hidden.sizes())) {
    throw invalid_argument(who + "uncond_hidden must match text_hidden when guidance_scale > 0");
  }
  if (r.top_p && (!std::isfinite(*r.top_p) || *r.top_p <= 0 || *r.top_p > 1)) {
    throw invalid_argument(who + "top_p must be in (0, 1]");
  }
  if (r.bbox.defined() && r.bbox.numel() != 3) {
    throw invalid_argument(who + "bbox must hold 3 values");
  }
}

}  // namespace

Generator::Generator(const ShapeGpt& gpt, int64_t max_batch, int64_t total_tokens, int64_t cond_len,
                     GraphMode graphs, bool fused_kernels, DecodeKernels decode_kernels)
    : gpt_(gpt),
      max_batch_(max_batch),
      total_tokens_(total_tokens),
      cache_(gpt.config(), 2 * max_batch, cond_len, total_tokens, gpt.weights().wte.scalar_type(),
             gpt.weights().wte.device()),
      graphs_(graphs),
      fused_kernels_(fused_kernels),
      decode_kernels_(decode_kernels) {
  if (graphs == GraphMode::kOn && !gpt.weights().wte.is_cuda()) {
    throw invalid_argument("cuda_graphs: on needs the model on a CUDA device (use emulate or off)");
  }
  if (decode_kernels == DecodeKernels::kTriton) {
    if (const std::optional<std::string> why = triton_decode_unavailable(
            gpt.config(), gpt.weights().wte.scalar_type(), gpt.weights().wte.device(), max_batch)) {
      throw failed_precondition("decode_kernels: triton: " + *why + "; use decode_kernels: torch");
    }
  }
  // Positions 0..T-1 for tokens and T for the runners' scratch position.
  if (total_tokens + 1 > gpt.max_shape_positions()) {
    throw invalid_argument("generator: " + std::to_string(total_tokens) +
                           " tokens exceed the shape GPT's RoPE table");
  }
}

void Generator::prepare(const CapturePlan& plan) {
  std::vector<int64_t> buckets = plan.buckets;
  if (buckets.empty()) buckets.push_back(max_batch_);
  if (plan.modes.empty()) throw invalid_argument("capture plan: no single_stream_decode mode");
  for (const int64_t batch : buckets) {
    if (batch < 1 || batch > max_batch_) {
      throw invalid_argument("capture plan: bucket " + std::to_string(batch) + " outside 1.." +
                             std::to_string(max_batch_));
    }
    for (const bool cfg : {true, false}) {
      if ((cfg && !plan.guided) || (!cfg && !plan.unguided)) continue;
      const RunnerKey key{batch, cfg, plan.record_logits};
      auto& slot = runners_[key];
      if (!slot) {
        const int64_t rows = cfg ? 2 * batch : batch;
        slot = make_decode_runner(
            graphs_, gpt_, cache_.view(rows),
            {batch, cfg, total_tokens_, plan.record_logits, fused_kernels_, decode_kernels_});
      }
      for (const SingleStreamDecode mode : plan.modes) slot->capture(mode);
    }
  }
}

void Generator::validate_request(const GenerationRequest& request, size_t index) const {
  const int64_t text_tokens = cache_.cond_len() - (gpt_.config().use_bbox ? 1 : 0);
  check_request_fields(request, index, text_tokens, gpt_.config().text_model_embed_dim);
}

DecodeRunner& Generator::decode_runner(const RunnerKey& key) {
  auto it = runners_.find(key);
  if (it != runners_.end()) return *it->second;
  if (graphs_ != GraphMode::kOff) {
    throw not_captured(key, "", graphs_);
  }
  // Eager runners hold no recording: creating one on first use is safe.
  const int64_t rows = key.cfg ? 2 * key.batch : key.batch;
  auto& slot = runners_[key];
  slot = std::make_unique<DecodeRunner>(
      gpt_, cache_.view(rows),
      DecodeRunnerConfig{key.batch, key.cfg, total_tokens_, key.record_logits, fused_kernels_,
                         decode_kernels_});
  return *slot;
}

at::Tensor Generator::encode_conditions(const std::vector<GenerationRequest>& requests,
                                        int64_t batch, bool cfg) const {
  const at::Device device = gpt_.weights().wte.device();
  const auto& ref = requests.front().text_hidden;
  const at::Tensor zeros_hidden = at::zeros(ref.sizes(), ref.options().dtype(at::kFloat));
  std::vector<at::Tensor> text, uncond, bbox, uncond_bbox;
  const bool use_bbox = gpt_.config().use_bbox;
  for (int64_t i = 0; i < batch; ++i) {
    // Padding rows get zero conditions; rows never mix, so their values do not matter.
    const bool real = i < static_cast<int64_t>(requests.size());
    const GenerationRequest* r = real ? &requests[static_cast<size_t>(i)] : nullptr;
    text.push_back(real ? r->text_hidden.to(at::kFloat) : zeros_hidden);
    if (cfg) {
      const bool has_uncond = real && r->uncond_hidden.defined();
      uncond.push_back(has_uncond ? r->uncond_hidden.to(at::kFloat) : zeros_hidden);
    }
    if (use_bbox) {
      const at::Tensor box = real && r->bbox.defined() ? r->bbox.to(at::kFloat).reshape({3})
                                                       : at::zeros({3}, at::kFloat);
      bbox.push_back(box);
      uncond_bbox.push_back(at::zeros({3}, at::kFloat));
    }
  }
  const auto stacked = [&](const std::vector<at::Tensor>& v) {
    return v.empty() ? at::Tensor() : at::stack(v).to(device);
  };
  at::Tensor cond = gpt_.encode_condition(stacked(text), stacked(bbox));
  if (cfg) cond = at::cat({cond, gpt_.encode_condition(stacked(uncond), stacked(uncond_bbox))});
  return cond;
}

void Generator::load_requests(DecodeRunner& r, const std::vector<GenerationRequest>& requests) {
  const int64_t b = r.config().batch;
  const int64_t t = total_tokens_;
  at::Tensor guidance = at::zeros({b}, at::kDouble);
  at::Tensor top_p = at::ones({b}, at::kFloat);
  at::Tensor greedy = at::ones({b}, at::kBool);
  at::Tensor uniforms = at::zeros({b, t + 1}, at::kFloat);  // column T: the scratch position
  bool any_sampling = false;
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto& q = requests[i];
    const int64_t row = static_cast<int64_t>(i);
    guidance[row] = q.guidance_scale;
    if (q.top_p) {
      any_sampling = true;
      greedy[row] = false;
      top_p[row] = static_cast<float>(*q.top_p);
      uniforms[row].narrow(0, 0, t).copy_(uniform_stream(q.seed, t));
    }
  }
  // Copies into the runner's static buffers: their addresses never change.
  r.sampling().guidance.copy_(guidance);
  r.sampling().top_p.copy_(top_p);
  r.sampling().greedy.copy_(greedy);
  r.sampling().uniforms.copy_(uniforms);
  r.plan().any_sampling = any_sampling;
  r.positions().zero_();
  r.token_ids().fill_(gpt_.config().bos_id());
}

GenerationResult Generator::generate(const std::vector<GenerationRequest>& requests,
                                     const GenerationOptions& options) {
  if (requests.empty()) throw invalid_argument("generate: no requests");
  const int64_t n = static_cast<int64_t>(requests.size());
  const int64_t batch = options.bucket > 0 ? options.bucket : n;
  if (batch < n || batch > max_batch_) {
    throw invalid_argument("generate: " + std::to_string(n) + " requests in a batch of " +
                           std::to_string(batch) + "; this generator holds 1.." +
                           std::to_string(max_batch_));
  }
  bool cfg = false;
  for (size_t i = 0; i < requests.size(); ++i) {
    validate_request(requests[i], i);
    cfg = cfg || requests[i].guidance_scale > 0;
  }

  // Progress after the first token, every interval and after the last, once the device has
  // done them; false = stop.
  const at::Device device = gpt_.weights().wte.device();
  const auto report = [&](int64_t done) {
    if (!options.on_progress) return true;
    const bool due = done == 1 || done == total_tokens_ ||
                     (options.progress_interval > 0 && done % options.progress_interval == 0);
    if (!due) return true;
    wait_for_queued_work(device);
    return options.on_progress(done);
  };
  const auto start = SteadyClock::now();
  DecodeRunner& r = decode_runner({batch, cfg, options.record_logits});
  const SingleStreamDecode mode = options.single_stream_decode;
  if (options.use_kv_cache && !r.captured(mode)) {
    throw not_captured({batch, cfg, options.record_logits}, " in mode " + to_string(mode), graphs_);
  }
  load_requests(r, requests);
  GenerationResult result;
  result.tokens = total_tokens_;
  result.cond = encode_conditions(requests, batch, cfg);
  const at::Tensor bos = gpt_.embed(r.token_ids());  // [b, D]
  const at::Tensor bos_rows = (cfg ? at::cat({bos, bos}) : bos).unsqueeze(1);

  if (options.use_kv_cache) {
    result.prefill_logits = gpt_.forward(result.cond, bos_rows, &r.cache()).squeeze(1);
    r.accept_logits(result.prefill_logits);
    (void)r.output_ids().cpu();  // the first token is out: that is the prefill's end
    result.prefill_ms = ms_since(start);
    const auto decode_start = SteadyClock::now();
    if (!report(1)) result.stopped = true;
    for (int64_t i = 1; i < total_tokens_ && !result.stopped; ++i) {
      r.step(mode);
      if (!report(i + 1)) result.stopped = true;
    }
    // Copies: the runner's buffers are reused by the next batch.
    result.ids = r.output_ids().narrow(0, 0, n).to(at::kCPU, /*non_blocking=*/false, /*copy=*/true);
    result.decode_ms = ms_since(decode_start);
  } else {
    // Training semantics: every step runs the full causal forward over [BOS, tokens so far].
    at::Tensor sequence = bos_rows;
    result.prefill_logits = gpt_.forward(result.cond, sequence).select(1, 0);
    r.accept_logits(result.prefill_logits);
    (void)r.output_ids().cpu();
    result.prefill_ms = ms_since(start);
    const auto decode_start = SteadyClock::now();
    if (!report(1)) result.stopped = true;
    for (int64_t i = 1; i < total_tokens_ && !result.stopped; ++i) {
      const at::Tensor e = gpt_.embed(r.token_ids());
      sequence = at::cat({sequence, (cfg ? at::cat({e, e}) : e).unsqueeze(1)}, 1);
      r.accept_logits(gpt_.forward(result.cond, sequence).select(1, i));
      if (!report(i + 1)) result.stopped = true;
    }
    result.ids = r.output_ids().narrow(0, 0, n).to(at::kCPU, /*non_blocking=*/false, /*copy=*/true);
    result.decode_ms = ms_since(decode_start);
  }
  if (options.record_logits) {
    result.step_logits =
        r.output_logits().narrow(0, 0, n).to(at::kCPU, /*non_blocking=*/false, /*copy=*/true);
  }
  spdlog::debug(
      "generated {} x {} tokens (bucket {}, cfg {}, {}): prefill {:.1f} ms, "
      "TPOT {:.3f} ms",
      n, total_tokens_, batch, cfg, options.use_kv_cache ? "kv" : "no-cache", result.prefill_ms,
      result.tpot_ms());
  return result;
}

}  // namespace cube3d
