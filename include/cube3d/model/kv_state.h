// The key/value tensors one batch of rows attends to. The engine owns and preallocates them
// (engine/kv_cache.h); the model only reads and writes them in place, so a decode step never
// allocates a cache and can be captured as a CUDA graph.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace cube3d {

struct KvState {
  // One entry per block: the dual blocks first ([rows, H, S + 1 + T, hd], condition tokens at
  // 0..S-1, shape token p at S + p), then the single blocks ([rows, H, 1 + T, hd], shape token p
  // at p). Keys are stored after their RMSNorm and RoPE.
  std::vector<at::Tensor> keys;
  std::vector<at::Tensor> values;
  int64_t cond_len = 0;  // S
};

}  // namespace cube3d
