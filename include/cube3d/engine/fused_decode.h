// The engine's fused decode-step kernels (kernels/), wrapped for the model's DecodeStepFusions
// hooks: the model stays pure forward math, the kernels know nothing of libtorch, and this file
// is where the two meet.
#pragma once

#include "cube3d/model/shape_gpt.h"

namespace cube3d {

// True when this build compiled the CUDA kernels (nvcc found at build time).
bool fused_kernels_compiled();

// The fusions that apply to `gpt` here: the kernels take bf16 weights on a CUDA device; anything
// else (the CPU, float32 on CUDA, a build without nvcc) gets none, so the unfused ops run.
DecodeStepFusions decode_step_fusions(const ShapeGpt& gpt);

}  // namespace cube3d
