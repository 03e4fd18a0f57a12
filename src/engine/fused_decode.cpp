#include "cube3d/engine/fused_decode.h"

#include <ATen/ATen.h>

#include "cube3d/core/error.h"

#ifdef CUBE3D_WITH_KERNELS
#include <c10/cuda/CUDAStream.h>

#include "qk_norm_rope.h"
#endif

namespace cube3d {

#ifdef CUBE3D_WITH_KERNELS
namespace {

void require_shape(bool ok, const char* what) {
  if (!ok) throw internal_error(std::string("fused q/k norm + RoPE: ") + what);
}

at::Tensor qk_norm_rope_store(const at::Tensor& qk, const at::Tensor& q_norm,
                              const at::Tensor& k_norm, const at::Tensor& cos,
                              const at::Tensor& sin, at::Tensor& keys, const at::Tensor& slots) {
  const int64_t rows = qk.size(0);
  const int64_t heads = keys.size(1);
  const int64_t head_dim = keys.size(3);
  require_shape(qk.is_cuda() && qk.scalar_type() == at::kBFloat16 && qk.dim() == 3 &&
                    qk.size(1) == 1 && qk.size(2) == 2 * heads * head_dim && qk.stride(2) == 1,
                "qk must be bf16 [R, 1, 2D] on CUDA, contiguous in its last dim");
  require_shape(keys.scalar_type() == at::kBFloat16 && keys.size(0) == rows && keys.stride(3) == 1,
                "keys must be bf16 [R, H, L, hd] with contiguous heads");
  const at::Tensor qw = q_norm.to(at::kFloat).contiguous();
  const at::Tensor kw = k_norm.to(at::kFloat).contiguous();
  const at::Tensor c = cos.to(at::kFloat).contiguous();
  const at::Tensor s = sin.to(at::kFloat).contiguous();
  const at::Tensor slot = slots.to(at::kLong).contiguous();
  require_shape(c.numel() == rows * head_dim / 2 && s.numel() == c.numel() && slot.numel() == rows,
                "cos / sin must hold hd/2 angles per row, slots one per row");
  at::Tensor q = at::empty({rows, heads, 1, head_dim}, qk.options());
  kernels::QkNormRopeArgs args;
  args.qk = reinterpret_cast<const __nv_bfloat16*>(qk.data_ptr());
  args.qk_row_stride = qk.stride(0);
  args.rows = rows;
  args.heads = static_cast<int>(heads);
  args.head_dim = static_cast<int>(head_dim);
  args.q_weight = qw.data_ptr<float>();
  args.k_weight = kw.data_ptr<float>();
  args.eps = static_cast<float>(kQkNormEps);
  args.cos = c.data_ptr<float>();
  args.sin = s.data_ptr<float>();
  args.q_out = reinterpret_cast<__nv_bfloat16*>(q.data_ptr());
  args.key_cache = reinterpret_cast<__nv_bfloat16*>(keys.data_ptr());
  args.cache_row_stride = keys.stride(0);
  args.cache_head_stride = keys.stride(1);
  args.cache_slot_stride = keys.stride(2);
  args.slots = slot.data_ptr<int64_t>();
  const cudaError_t status =
      kernels::qk_norm_rope(args, c10::cuda::getCurrentCUDAStream(qk.device().index()).stream());
  require_shape(status == cudaSuccess, cudaGetErrorString(status));
  return q;
}

}  // namespace

bool fused_kernels_compiled() { return true; }

DecodeStepFusions decode_step_fusions(const ShapeGpt& gpt) {
  DecodeStepFusions fusions;
  const at::Tensor& wte = gpt.weights().wte;
  const int64_t head_dim = gpt.config().head_dim();
  const bool head_dim_supported = head_dim == 64 || head_dim == 128 || head_dim == 256;
  if (wte.is_cuda() && wte.scalar_type() == at::kBFloat16 && head_dim_supported) {
    fusions.qk_norm_rope_store = qk_norm_rope_store;
  }
  return fusions;
}

#else  // no nvcc at build time

bool fused_kernels_compiled() { return false; }

DecodeStepFusions decode_step_fusions(const ShapeGpt&) { return {}; }

#endif

}  // namespace cube3d
