#include "cube3d/engine/continuous_decoder.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <string>

#include "cube3d/core/error.h"
#include "cube3d/engine/random_stream.h"
#include "cube3d/engine/sampler.h"

namespace cube3d {
namespace {

std::vector<int64_t> checked_buckets(std::vector<int64_t> buckets, int64_t max_batch) {
  if (buckets.empty()) buckets.push_back(max_batch);
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (buckets[i] < 1 || buckets[i] > max_batch || (i > 0 && buckets[i] <= buckets[i - 1])) {
      throw invalid_argument("continuous decoding: buckets must be strictly increasing in 1.." +
                             std::to_string(max_batch) + " (the generator's max_batch); got " +
                             std::to_string(buckets[i]) + " at index " + std::to_string(i));
    }
  }
  return buckets;
}

// Copies rows [from, from + count) of `tensor` to rows [to, to + count), through a temporary
// when the ranges overlap (a bucket change can shift the unconditional rows by less than their
// count).
void move_rows(const at::Tensor& tensor, int64_t from, int64_t to, int64_t count) {
  if (from == to || count == 0) return;
  const at::Tensor source = tensor.narrow(0, from, count);
  const bool overlap = from < to + count && to < from + count;
  tensor.narrow(0, to, count).copy_(overlap ? source.clone() : source);
}

}  // namespace

ContinuousDecoder::ContinuousDecoder(Generator& generator, const at::Tensor& uncond_hidden,
                                     ContinuousDecodeOptions options)
    : generator_(generator),
      options_(std::move(options)),
      buckets_(checked_buckets(options_.buckets, generator.max_batch())),
      total_tokens_(generator.total_tokens()),
      cond_len_(generator.cache().cond_len()),
      dual_layers_(generator.gpt().config().n_layer) {
  const ShapeGpt& gpt = generator_.gpt();
  GenerationRequest empty;
  empty.text_hidden = uncond_hidden;
  empty.guidance_scale = 0;
  try {
    generator_.validate_request(empty, 0);
  } catch (const Error& e) {
    throw invalid_argument(std::string("continuous decoding: the empty prompt's condition: ") +
                           e.what());
  }
  uncond_hidden_ = uncond_hidden.to(at::kCPU, at::kFloat, /*non_blocking=*/false, /*copy=*/true);

  // The unconditional prefix, prefilled once into a cache of exactly its filled length: the
  // same forward a static batch runs for its unconditional rows.
  const KvState& pool = generator_.cache().pool();
  KvState prefix;
  prefix.cond_len = cond_len_;
  for (size_t layer = 0; layer < pool.keys.size(); ++layer) {
    const at::Tensor& like = pool.keys[layer];
    const int64_t len = static_cast<int64_t>(layer) < dual_layers_ ? cond_len_ + 1 : 1;
    prefix.keys.push_back(at::zeros({1, like.size(1), len, like.size(3)}, like.options()));
    prefix.values.push_back(at::zeros({1, like.size(1), len, like.size(3)}, like.options()));
  }
  const at::Tensor cond = generator_.encode_conditions({empty}, 1, /*cfg=*/false);
  const at::Tensor bos =
      gpt.embed(at::full({1}, gpt.config().bos_id(),
                         at::TensorOptions().dtype(at::kLong).device(gpt.weights().wte.device())));
  prefix_logits_ = gpt.forward(cond, bos.unsqueeze(1), &prefix).select(1, 0);
  prefix_keys_ = std::move(prefix.keys);
  prefix_values_ = std::move(prefix.values);
}

size_t ContinuousDecoder::index_of(SlotId id) const {
  const auto it =
      std::find_if(slots_.begin(), slots_.end(), [id](const Slot& s) { return s.id == id; });
  if (it == slots_.end()) {
    throw not_found("continuous decoding: no active slot " + std::to_string(id));
  }
  return static_cast<size_t>(it - slots_.begin());
}

bool ContinuousDecoder::holds(SlotId id) const {
  return std::any_of(slots_.begin(), slots_.end(), [id](const Slot& s) { return s.id == id; });
}

std::vector<ContinuousDecoder::SlotId> ContinuousDecoder::slots() const {
  std::vector<SlotId> ids;
  ids.reserve(slots_.size());
  for (const Slot& s : slots_) ids.push_back(s.id);
  return ids;
}

int64_t ContinuousDecoder::tokens_done(SlotId id) const { return slots_[index_of(id)].tokens_done; }

ContinuousDecoder::Layout ContinuousDecoder::layout_for(int64_t slots, bool cfg) const {
  const auto it = std::lower_bound(buckets_.begin(), buckets_.end(), slots);
  if (it == buckets_.end()) {
    throw resource_exhausted("continuous decoding: " + std::to_string(slots) +
                             " slots exceed the largest bucket " + std::to_string(capacity()));
  }
  return {*it, cfg};
}

DecodeRunner& ContinuousDecoder::runner(const Layout& layout) {
  return generator_.decode_runner({layout.bucket, layout.cfg, options_.record_logits});
}

void ContinuousDecoder::refresh_plan() {
  if (slots_.empty()) return;
  // Eager runners skip the top-p work when no slot samples; a recording has it always on.
  runner(layout_).plan().any_sampling =
      std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.sampling; });
}

void ContinuousDecoder::copy_prefix_to_uncond_rows(int64_t first_slot, int64_t count) {
  const KvState& pool = generator_.cache().pool();
  const int64_t first_row = layout_.bucket + first_slot;
  for (size_t layer = 0; layer < pool.keys.size(); ++layer) {
    const int64_t len = prefix_keys_[layer].size(2);
    pool.keys[layer]
        .narrow(0, first_row, count)
        .narrow(2, 0, len)
        .copy_(prefix_keys_[layer].expand({count, -1, -1, -1}));
    pool.values[layer]
        .narrow(0, first_row, count)
        .narrow(2, 0, len)
        .copy_(prefix_values_[layer].expand({count, -1, -1, -1}));
  }
}

void ContinuousDecoder::relayout(const Layout& target) {
  if (target == layout_) return;
  if (slots_.empty()) {
    layout_ = target;
    return;
  }
  const auto n = static_cast<int64_t>(slots_.size());
  const Layout old = layout_;
  DecodeRunner& from = runner(old);
  DecodeRunner& to = runner(target);  // throws (in a graph mode) before anything moved

  if (target.cfg) {
    if (old.cfg) {
      // Only the filled key/value slots need to move.
      int64_t most = 0;
      for (const Slot& s : slots_) most = std::max(most, s.tokens_done);
      const KvState& pool = generator_.cache().pool();
      for (size_t layer = 0; layer < pool.keys.size(); ++layer) {
        const int64_t len = static_cast<int64_t>(layer) < dual_layers_ ? filled_dual(most) : most;
        move_rows(pool.keys[layer].narrow(2, 0, len), old.bucket, target.bucket, n);
        move_rows(pool.values[layer].narrow(2, 0, len), old.bucket, target.bucket, n);
      }
      layout_ = target;
    } else {
      // Unguided slots gain unconditional rows: the shared prefix, weighted 0 by their gamma
      // (the rest of each row holds finite values of earlier requests, masked or weighted 0).
      layout_ = target;
      copy_prefix_to_uncond_rows(0, n);
    }
  } else {
    layout_ = target;  // the conditional rows never move
  }

  if (&from != &to) {
    const auto copy_rows = [n](const at::Tensor& dst, const at::Tensor& src) {
      dst.narrow(0, 0, n).copy_(src.narrow(0, 0, n));
    };
    copy_rows(to.token_ids(), from.token_ids());
    copy_rows(to.positions(), from.positions());
    copy_rows(to.sampling().guidance, from.sampling().guidance);
    copy_rows(to.sampling().top_p, from.sampling().top_p);
    copy_rows(to.sampling().greedy, from.sampling().greedy);
    copy_rows(to.sampling().uniforms, from.sampling().uniforms);
    copy_rows(to.output_ids(), from.output_ids());
    if (options_.record_logits) copy_rows(to.output_logits(), from.output_logits());
  }
  refresh_plan();
}

void ContinuousDecoder::move_slot(int64_t from, int64_t to) {
  const int64_t tokens = slots_[static_cast<size_t>(from)].tokens_done;
  const KvState& pool = generator_.cache().pool();
  for (size_t layer = 0; layer < pool.keys.size(); ++layer) {
    const int64_t len = static_cast<int64_t>(layer) < dual_layers_ ? filled_dual(tokens) : tokens;
    for (const at::Tensor* t : {&pool.keys[layer], &pool.values[layer]}) {
      const at::Tensor filled = t->narrow(2, 0, len);
      move_rows(filled, from, to, 1);
      if (layout_.cfg) move_rows(filled, layout_.bucket + from, layout_.bucket + to, 1);
    }
  }
  DecodeRunner& r = runner(layout_);
  for (const at::Tensor& t :
       {r.token_ids(), r.positions(), r.sampling().guidance, r.sampling().top_p,
        r.sampling().greedy, r.sampling().uniforms, r.output_ids()}) {
    move_rows(t, from, to, 1);
  }
  if (options_.record_logits) move_rows(r.output_logits(), from, to, 1);
}

std::vector<ContinuousDecoder::SlotId> ContinuousDecoder::admit(
    const std::vector<GenerationRequest>& requests) {
  if (requests.empty()) throw invalid_argument("continuous decoding: admit of no requests");
  const auto k = static_cast<int64_t>(requests.size());
  const auto n = static_cast<int64_t>(slots_.size());
  if (n + k > capacity()) {
    throw resource_exhausted("continuous decoding: " + std::to_string(k) + " requests do not fit " +
                             std::to_string(capacity() - n) + " free slots");
  }
  bool cfg = std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.guided; });
  bool any_sampling = false;
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerationRequest& r = requests[i];
    generator_.validate_request(r, i);
    if (r.guidance_scale > 0 && r.uncond_hidden.defined() &&
        !at::equal(r.uncond_hidden.to(at::kCPU, at::kFloat), uncond_hidden_)) {
      throw invalid_argument("request " + std::to_string(i) +
                             ": uncond_hidden differs from the empty-prompt condition this "
                             "continuous decoder shares between all requests");
    }
    cfg = cfg || r.guidance_scale > 0;
    any_sampling = any_sampling || r.top_p.has_value();
  }
  relayout(layout_for(n + k, cfg));

  const ShapeGpt& gpt = generator_.gpt();
  const at::Device device = gpt.weights().wte.device();
  const auto on_device = at::TensorOptions().device(device);
  // The joiners' conditional rows are n..n+k-1 of the pool: prefill straight into them.
  const at::Tensor cond = generator_.encode_conditions(requests, k, /*cfg=*/false);
  const at::Tensor bos =
      gpt.embed(at::full({k}, gpt.config().bos_id(), on_device.dtype(at::kLong)));
  KvState rows = generator_.cache().rows_view(n, k);
  at::Tensor logits = gpt.forward(cond, bos.unsqueeze(1), &rows).select(1, 0);
  if (layout_.cfg) {
    copy_prefix_to_uncond_rows(n, k);
    logits = at::cat({logits, prefix_logits_.expand({k, -1})});
  }

  // The first token, as a runner's accept_logits chooses it, for the joiners only.
  const int64_t t = total_tokens_;
  at::Tensor guidance = at::zeros({k}, at::kDouble);
  at::Tensor top_p = at::ones({k}, at::kFloat);
  at::Tensor greedy = at::ones({k}, at::kBool);
  at::Tensor uniforms = at::zeros({k, t + 1}, at::kFloat);
  for (int64_t i = 0; i < k; ++i) {
    const GenerationRequest& q = requests[static_cast<size_t>(i)];
    guidance[i] = q.guidance_scale;
    if (q.top_p) {
      greedy[i] = false;
      top_p[i] = static_cast<float>(*q.top_p);
      uniforms[i].narrow(0, 0, t).copy_(uniform_stream(q.seed, t));
    }
  }
  SamplingBuffers joiners{guidance.to(device), top_p.to(device), greedy.to(device),
                          uniforms.to(device)};
  const SamplingPlan plan{layout_.cfg, any_sampling, gpt.config().shape_model_vocab_size, t};
  const at::Tensor first_step = at::zeros({k}, on_device.dtype(at::kLong));
  const at::Tensor mixed = guided_logits(logits, first_step, joiners, plan);
  const at::Tensor next = choose_tokens(mixed, first_step, joiners, plan);

  DecodeRunner& r = runner(layout_);
  r.sampling().guidance.narrow(0, n, k).copy_(joiners.guidance);
  r.sampling().top_p.narrow(0, n, k).copy_(joiners.top_p);
  r.sampling().greedy.narrow(0, n, k).copy_(joiners.greedy);
  r.sampling().uniforms.narrow(0, n, k).copy_(joiners.uniforms);
  const at::Tensor out = r.output_ids().narrow(0, n, k);
  out.zero_();
  out.select(1, 0).copy_(next);
  if (options_.record_logits) {
    const at::Tensor out_logits = r.output_logits().narrow(0, n, k);
    out_logits.zero_();
    out_logits.select(1, 0).copy_(mixed);
  }
  r.token_ids().narrow(0, n, k).copy_(next);
  r.positions().narrow(0, n, k).fill_(1);

  std::vector<SlotId> ids;
  ids.reserve(requests.size());
  for (const GenerationRequest& q : requests) {
    const SlotId id = next_id_++;
    slots_.push_back({id, 1, q.guidance_scale > 0, q.top_p.has_value()});
    ids.push_back(id);
  }
  refresh_plan();
  return ids;
}

void ContinuousDecoder::step() {
  if (slots_.empty()) return;
  runner(layout_).step(options_.single_stream_decode);
  ++steps_;
  for (Slot& s : slots_) s.tokens_done = std::min(s.tokens_done + 1, total_tokens_);
}

at::Tensor ContinuousDecoder::ids(SlotId id) {
  const auto index = static_cast<int64_t>(index_of(id));
  DecodeRunner& r = runner(layout_);
  return r.output_ids().select(0, index).to(at::kCPU, /*non_blocking=*/false, /*copy=*/true);
}

at::Tensor ContinuousDecoder::logits(SlotId id) {
  const auto index = static_cast<int64_t>(index_of(id));
  if (!options_.record_logits) {
    throw failed_precondition("continuous decoding: logits are recorded only with record_logits");
  }
  DecodeRunner& r = runner(layout_);
  return r.output_logits().select(0, index).to(at::kCPU, /*non_blocking=*/false, /*copy=*/true);
}

void ContinuousDecoder::synchronize() const {
  wait_for_queued_work(generator_.gpt().weights().wte.device());
}

void ContinuousDecoder::release(SlotId id) {
  const auto index = static_cast<int64_t>(index_of(id));
  const auto last = static_cast<int64_t>(slots_.size()) - 1;
  if (index != last) {
    move_slot(last, index);
    slots_[static_cast<size_t>(index)] = slots_[static_cast<size_t>(last)];
  }
  slots_.pop_back();
  if (slots_.empty()) {
    layout_ = {};
    return;
  }
  const bool cfg =
      std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.guided; });
  relayout(layout_for(static_cast<int64_t>(slots_.size()), cfg));
}

void ContinuousDecoder::release_all() {
  slots_.clear();
  layout_ = {};
}

}  // namespace cube3d
