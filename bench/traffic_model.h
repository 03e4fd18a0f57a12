// The bytes a decode step has to read at least (the weights of the streams it runs and the KV
// cache), measured on the loaded tensors; achieved_gb_per_s divides them by the median step.
// Its own file because it is the model bench/README.md documents term by term, and it should be
// readable (and checked against that description) without the benchmark around it.
#pragma once

#include <cstdint>

#include "bench_options.h"

namespace cube3d {
class Engine;
}  // namespace cube3d

namespace cube3d::bench {

// What one decode step has to read from memory at least, from the loaded tensors themselves (so
// in the run dtype). Activations are small next to these and are left out.
struct TrafficModel {
  int64_t shape_stream_bytes = 0;  // dual blocks' pre_x + post_x, single blocks, lm_head
  int64_t cond_stream_bytes = 0;   // dual blocks' pre_c + post_c (re-read only without cache)
  int64_t wte_row_bytes = 0;       // one embedding row
  // Keys + values of one row at one position, summed over the dual / the single blocks.
  int64_t kv_dual_position_bytes = 0;
  int64_t kv_single_position_bytes = 0;
  // Positions per row of the preallocated cache: S + 1 + T (dual) and 1 + T (single). A decode
  // step attends over all of them (masked), so it reads the whole padded cache.
  int64_t kv_dual_len = 0;
  int64_t kv_single_len = 0;
  int64_t gpt_bytes = 0;  // every shape GPT tensor
  int64_t gpt_params = 0;

  // Reads the loaded shape GPT's tensors and the engine's preallocated KV cache.
  static TrafficModel from(Engine& engine);

  // eager-kv / graph-kv: the shape stream's weights once, one wte row per request, and every
  // row's whole preallocated cache: the step's attention runs over all S + 1 + T (dual) and
  // 1 + T (single) positions with a mask, so that its shapes never change and a graph holds
  // for every step; the masked positions are read all the same.
  // eager-nocache: both streams' weights once (it recomputes the condition stream too) and no
  // cache; its re-computed activations are not counted, so this is a lower bound.
  int64_t bytes_per_step(Mode mode, int64_t bucket, int64_t rows) const;
};

}  // namespace cube3d::bench
