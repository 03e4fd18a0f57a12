// The bytes-per-step model of cube3d-bench (traffic_model.h; bench/README.md describes it).
#include "traffic_model.h"

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>

#include "cube3d/engine/engine.h"
#include "cube3d/model/kv_state.h"
#include "cube3d/model/layers.h"
#include "cube3d/model/shape_gpt.h"

namespace cube3d::bench {
namespace {

// Bytes (or, with kElements, elements) of the weights a module reads. c_qk, c_v (c_k), gate and
// up are views of the projections packed at load (GptWeights::from_tensors): each counted once,
// through its view; the zeros the packed bias holds for c_qk (2D values a block) are left out.
enum class Unit { kBytes, kElements };
int64_t size_of(const at::Tensor& t, Unit u = Unit::kBytes) {
  if (!t.defined()) return 0;
  return u == Unit::kBytes ? t.numel() * t.element_size() : t.numel();
}
int64_t size_of(const Linear& l, Unit u = Unit::kBytes) {
  return size_of(l.weight, u) + size_of(l.bias, u);
}
int64_t size_of(const SwiGluMlp& m, Unit u = Unit::kBytes) {
  return size_of(m.gate, u) + size_of(m.up, u) + size_of(m.down, u);
}
int64_t size_of(const PreAttentionWeights& p, Unit u = Unit::kBytes) {
  return size_of(p.c_qk, u) + size_of(p.c_k, u) + size_of(p.c_v, u) + size_of(p.q_norm, u) +
         size_of(p.k_norm, u);
}
int64_t size_of(const PostAttentionWeights& p, Unit u = Unit::kBytes) {
  return size_of(p.c_proj, u) + size_of(p.mlp, u);
}
int64_t size_of(const SingleBlockWeights& s, Unit u = Unit::kBytes) {
  return size_of(s.c_qk, u) + size_of(s.c_v, u) + size_of(s.c_proj, u) + size_of(s.q_norm, u) +
         size_of(s.k_norm, u) + size_of(s.mlp, u);
}
int64_t size_of(const GptWeights& w, Unit u) {
  int64_t total = size_of(w.text_proj, u) + size_of(w.shape_proj, u) + size_of(w.bbox_proj, u) +
                  size_of(w.wte, u) + size_of(w.lm_head, u);
  for (const DualBlockWeights& b : w.dual_blocks) {
    total +=
        size_of(b.pre_x, u) + size_of(b.pre_c, u) + size_of(b.post_x, u) + size_of(b.post_c, u);
  }
  for (const SingleBlockWeights& s : w.single_blocks) total += size_of(s, u);
  return total;
}

}  // namespace

TrafficModel TrafficModel::from(Engine& engine) {
  const GptWeights& w = engine.gpt().weights();
  TrafficModel t;
  for (const DualBlockWeights& b : w.dual_blocks) {
    t.shape_stream_bytes += size_of(b.pre_x) + size_of(b.post_x);
    t.cond_stream_bytes += size_of(b.pre_c) + size_of(b.post_c);
  }
  for (const SingleBlockWeights& s : w.single_blocks) t.shape_stream_bytes += size_of(s);
  t.shape_stream_bytes += size_of(w.lm_head);
  t.wte_row_bytes = w.wte.size(1) * w.wte.element_size();
  const KvState kv = engine.kv_cache().view(1);
  const size_t dual = w.dual_blocks.size();
  for (size_t i = 0; i < kv.keys.size(); ++i) {
    const at::Tensor& k = kv.keys[i];  // [rows, H, len, hd]
    const int64_t bytes = 2 * k.size(1) * k.size(3) * k.element_size();
    (i < dual ? t.kv_dual_position_bytes : t.kv_single_position_bytes) += bytes;
    (i < dual ? t.kv_dual_len : t.kv_single_len) = k.size(2);
  }
  t.gpt_bytes = size_of(w, Unit::kBytes);
  t.gpt_params = size_of(w, Unit::kElements);
  return t;
}

int64_t TrafficModel::bytes_per_step(Mode mode, int64_t bucket, int64_t rows) const {
  const int64_t weights = shape_stream_bytes + bucket * wte_row_bytes;
  if (mode == Mode::kEagerNoCache) return weights + cond_stream_bytes;
  const int64_t kv =
      rows * (kv_dual_position_bytes * kv_dual_len + kv_single_position_bytes * kv_single_len);
  return weights + kv;
}

}  // namespace cube3d::bench
