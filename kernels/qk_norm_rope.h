// Fused q/k path of one decode step (one attention block, one new token per row): from the
// c_qk projection, RMSNorm of every q and k head with its weight, rounding to bf16, the RoPE
// rotation of interleaved pairs, rounding to bf16 again (the official autocast numerics), then q
// to a contiguous output and k straight into its KV-cache slot. One launch replaces about 15
// small kernels of the unfused step.
//
// Raw pointers and a stream, no libtorch (docs/architecture.md: kernels know nothing of it).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace cube3d::kernels {

struct QkNormRopeArgs {
  const __nv_bfloat16* qk = nullptr;  // [rows, 2 * heads * head_dim]: q heads, then k heads
  int64_t qk_row_stride = 0;          // elements between rows of qk
  int64_t rows = 0;
  int heads = 0;
  int head_dim = 0;                 // even, at most 256, a multiple of 64
  const float* q_weight = nullptr;  // [head_dim] RMSNorm weights, float32
  const float* k_weight = nullptr;
  float eps = 1e-5f;
  const float* cos = nullptr;  // [rows, head_dim / 2] rotation of each row's position
  const float* sin = nullptr;
  __nv_bfloat16* q_out = nullptr;  // [rows, heads, head_dim] contiguous
  __nv_bfloat16* key_cache =
      nullptr;                   // k of (row, head) goes to key_cache + row * cache_row_stride
  int64_t cache_row_stride = 0;  //   + head * cache_head_stride + slot[row] * cache_slot_stride
  int64_t cache_head_stride = 0;
  int64_t cache_slot_stride = 0;
  const int64_t* slots = nullptr;  // [rows], device memory
};

// Enqueues the kernel on `stream`; returns the launch error (cudaSuccess when queued).
// cudaErrorInvalidValue for arguments it does not support (a null pointer, head_dim).
cudaError_t qk_norm_rope(const QkNormRopeArgs& args, cudaStream_t stream);

}  // namespace cube3d::kernels
