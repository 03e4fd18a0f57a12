// Which kernels run a decode step on CUDA: libtorch's ops (the reference, and the only path on
// the CPU) or the Triton kernels of kernels/decode_kernels.py, compiled ahead of time into the
// CUDA build (engine/triton_decode.h). The `decode_kernels: torch | triton` of the server's config
// and cube3d-bench's --decode-kernels.
#pragma once

#include <string>

namespace cube3d {

enum class DecodeKernels {
  kTorch,   // libtorch's ops (with kernels/qk_norm_rope where fused_kernels applies)
  kTriton,  // one launch per fused kernel: a few per block (bf16 on a CUDA device only)
};

// "torch" | "triton"; throws invalid_argument naming `field` otherwise.
DecodeKernels parse_decode_kernels(const std::string& text,
                                   const std::string& field = "decode_kernels");
std::string to_string(DecodeKernels kernels);

}  // namespace cube3d
