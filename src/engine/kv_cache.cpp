#include "cube3d/engine/kv_cache.h"

#include <ATen/ATen.h>

#include "cube3d/core/error.h"

namespace cube3d {

KvCache::KvCache(const GptConfig& config, int64_t max_rows, int64_t cond_len,
                 int64_t max_shape_tokens, at::ScalarType dtype, at::Device device)
    : max_rows_(max_rows) {
  if (max_rows <= 0 || cond_len <= 0 || max_shape_tokens <= 0) {
    throw invalid_argument("KV cache: rows, condition length and tokens must be positive (got " +
                           std::to_string(max_rows) + ", " + std::to_string(cond_len) + ", " +
                           std::to_string(max_shape_tokens) + ")");
  }
  const auto options = at::TensorOptions().dtype(dtype).device(device);
  const int64_t heads = config.n_head;
  const int64_t hd = config.head_dim();
  // BOS and the T - 1 tokens fed after it use shape slots 0..T-1; slot T is the decode
  // runners' scratch position (graph capture steps write there, no real step reads it).
  dual_len_ = cond_len + 1 + max_shape_tokens;
  single_len_ = 1 + max_shape_tokens;
  state_.cond_len = cond_len;
  for (int64_t i = 0; i < config.n_layer + config.n_single_layer; ++i) {
    const int64_t len = i < config.n_layer ? dual_len_ : single_len_;
    // Zero-filled so that masked-out slots never hold NaN garbage (0 * NaN would poison the
    // attention output even with a zero weight).
    state_.keys.push_back(at::zeros({max_rows, heads, len, hd}, options));
    state_.values.push_back(at::zeros({max_rows, heads, len, hd}, options));
  }
}

int64_t KvCache::bytes() const {
  int64_t total = 0;
  for (size_t i = 0; i < state_.keys.size(); ++i) {
    total += state_.keys[i].nbytes() + state_.values[i].nbytes();
  }
  return static_cast<int64_t>(total);
}

KvState KvCache::rows_view(int64_t first, int64_t count) const {
  if (first < 0 || count <= 0 || first + count > max_rows_) {
    throw invalid_argument("KV cache view of rows [" + std::to_string(first) + ", " +
                           std::to_string(first + count) + "); the pool holds rows [0, " +
                           std::to_string(max_rows_) + ")");
  }
  KvState out;
  out.cond_len = state_.cond_len;
  for (size_t i = 0; i < state_.keys.size(); ++i) {
    out.keys.push_back(state_.keys[i].narrow(0, first, count));
    out.values.push_back(state_.values[i].narrow(0, first, count));
  }
  return out;
}

}  // namespace cube3d
