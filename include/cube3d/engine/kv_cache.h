// The KV-cache pool: allocated once for the largest batch (rows = requests x 2 with guidance)
// and the full sequence (S + 1 + T), never reallocated. Smaller batches use views of its first
// rows, so every batch bucket shares one pool.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "cube3d/core/model_config.h"
#include "cube3d/model/kv_state.h"

namespace cube3d {

class KvCache {
 public:
  KvCache(const GptConfig& config, int64_t max_rows, int64_t cond_len, int64_t max_shape_tokens,
          at::ScalarType dtype, at::Device device);

  int64_t max_rows() const { return max_rows_; }
  int64_t cond_len() const { return state_.cond_len; }
  // Slots per dual block (S + 1 + T) and per single block (1 + T).
  int64_t dual_len() const { return dual_len_; }
  int64_t single_len() const { return single_len_; }
  int64_t bytes() const;

  // The first `rows` rows of every layer's cache (views, no copy). Throws if rows > max_rows.
  KvState view(int64_t rows) const { return rows_view(0, rows); }
  // Rows [first, first + count) of every layer's cache (views, no copy): one slot's or a few
  // joining slots' rows in continuous batching. Throws unless they lie inside the pool.
  KvState rows_view(int64_t first, int64_t count) const;
  // The pool itself (views of every row), for moving rows between slots in place.
  const KvState& pool() const { return state_; }

 private:
  int64_t max_rows_;
  int64_t dual_len_ = 0;
  int64_t single_len_ = 0;
  KvState state_;
};

}  // namespace cube3d
