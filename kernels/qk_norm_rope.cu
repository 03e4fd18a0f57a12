#include "qk_norm_rope.h"

namespace cube3d::kernels {
namespace {

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 4;

// One warp per (row, head, q or k). Each lane holds head_dim / 32 consecutive elements, an even
// number, so a RoPE pair never straddles two lanes.
template <int kPerLane>
__global__ void __launch_bounds__(kWarp* kWarpsPerBlock)
    qk_norm_rope_kernel(const QkNormRopeArgs a) {
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  const int64_t per_row = 2LL * a.heads;
  if (warp >= a.rows * per_row) return;
  const int64_t row = warp / per_row;
  const int which = static_cast<int>(warp % per_row);  // 0..H-1: q heads, H..2H-1: k heads
  const bool is_key = which >= a.heads;
  const int head = is_key ? which - a.heads : which;
  const int first = lane * kPerLane;

  const __nv_bfloat16* src =
      a.qk + row * a.qk_row_stride + static_cast<int64_t>(which) * a.head_dim + first;
  float x[kPerLane];
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    x[i] = __bfloat162float(src[i]);
    sum += x[i] * x[i];
  }
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  }
  const float rstd = rsqrtf(sum / static_cast<float>(a.head_dim) + a.eps);
  const float* weight = is_key ? a.k_weight : a.q_weight;
  // RMSNorm, then the bf16 rounding the unfused path has between the norm and the rotation.
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    x[i] = __bfloat162float(__float2bfloat16(x[i] * rstd * weight[first + i]));
  }
  const float* cos = a.cos + row * (a.head_dim / 2) + first / 2;
  const float* sin = a.sin + row * (a.head_dim / 2) + first / 2;
  __nv_bfloat16 out[kPerLane];
#pragma unroll
  for (int p = 0; p < kPerLane / 2; ++p) {
    const float even = x[2 * p], odd = x[2 * p + 1];
    out[2 * p] = __float2bfloat16(even * cos[p] - odd * sin[p]);
    out[2 * p + 1] = __float2bfloat16(even * sin[p] + odd * cos[p]);
  }
  __nv_bfloat16* dst =
      is_key ? a.key_cache + row * a.cache_row_stride + head * a.cache_head_stride +
                   a.slots[row] * a.cache_slot_stride + first
             : a.q_out + (row * a.heads + head) * static_cast<int64_t>(a.head_dim) + first;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) dst[i] = out[i];
}

}  // namespace

cudaError_t qk_norm_rope(const QkNormRopeArgs& a, cudaStream_t stream) {
  if (a.qk == nullptr || a.q_weight == nullptr || a.k_weight == nullptr || a.cos == nullptr ||
      a.sin == nullptr || a.q_out == nullptr || a.key_cache == nullptr || a.slots == nullptr ||
      a.rows < 0 || a.heads <= 0) {
    return cudaErrorInvalidValue;
  }
  if (a.rows == 0) return cudaSuccess;
  const int64_t warps = a.rows * 2 * a.heads;
  const dim3 grid(static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock));
  const dim3 block(kWarp * kWarpsPerBlock);
  switch (a.head_dim) {
    case 64:
      qk_norm_rope_kernel<2><<<grid, block, 0, stream>>>(a);
      break;
    case 128:
      qk_norm_rope_kernel<4><<<grid, block, 0, stream>>>(a);
      break;
    case 256:
      qk_norm_rope_kernel<8><<<grid, block, 0, stream>>>(a);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace cube3d::kernels
