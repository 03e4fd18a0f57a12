#include "cube3d/engine/triton_decode.h"

#include <ATen/ATen.h>

#include <array>
#include <stdexcept>
#include <utility>
#include <vector>

#include "cube3d/core/error.h"
#include "decode_plan.h"
#include "kernel_launch.h"
#include "triton_launcher.h"

#ifdef CUBE3D_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace cube3d {
namespace {

constexpr std::array<SingleStreamDecode, 2> kTritonModes = {SingleStreamDecode::kCausal,
                                                            SingleStreamDecode::kReference};

size_t mode_index(SingleStreamDecode mode) { return mode == SingleStreamDecode::kCausal ? 0 : 1; }

kernels::DecodeShape shape_of(const GptConfig& config, at::ScalarType dtype, int64_t batch,
                              bool cfg, int64_t cond_len, int64_t total_tokens) {
  kernels::DecodeShape s;
  s.embed = config.n_embd;
  s.heads = config.n_head;
  s.codes = config.shape_model_vocab_size;
  s.cond_len = cond_len;
  s.tokens = total_tokens;
  s.dual_blocks = config.n_layer;
  s.single_blocks = config.n_single_layer;
  s.eps = config.eps;
  s.batch = batch;
  s.cfg = cfg;
  s.dtype =
      dtype == at::kBFloat16 ? kernels::ElementType::kBFloat16 : kernels::ElementType::kFloat32;
  return s;
}

DecodeLaunchCount to_count(const kernels::LaunchCount& c) {
  DecodeLaunchCount out;
  out.launches = c.launches;
  out.bytes_read = c.bytes_read;
  out.bytes_written = c.bytes_written;
  for (const auto& [name, k] : c.by_kernel) {
    out.by_kernel[name] = {k.launches, k.bytes_read, k.bytes_written};
  }
  return out;
}

}  // namespace

bool triton_kernels_compiled() { return kernels::triton_cubins_compiled(); }

std::optional<std::string> triton_decode_unavailable(const GptConfig& config, at::ScalarType dtype,
                                                     const at::Device& device, int64_t max_batch) {
  if (!triton_kernels_compiled()) {
    return "this build has no Triton kernels (they are compiled into the CUDA build, with "
           "triton in its Python)";
  }
  if (!device.is_cuda()) return "the Triton kernels run on a CUDA device, not " + device.str();
  if (dtype != at::kBFloat16) return "the compiled Triton kernels take bfloat16 (dtype)";
  // Guidance doubles the rows: the largest batch must fit with it.
  const std::string why = kernels::unsupported(shape_of(config, dtype, max_batch, true, 1, 1));
  if (!why.empty()) return why;
  return std::nullopt;
}

struct TritonDecodeStep::Impl {
  bool record = false;
  at::Device device = at::kCPU;
  // Everything an address in the plans points to, kept alive here: the workspace, and copies
  // of weights that were not contiguous, aligned or in the activation dtype (zeros for a bias
  // the checkpoint lacks).
  std::vector<at::Tensor> held;
  at::Tensor logits;
  std::array<std::vector<kernels::KernelLaunch>, 2> plans;
  std::array<std::unique_ptr<kernels::LaunchSequence>, 2> sequences;

  const void* address(const at::Tensor& t, at::ScalarType dtype) {
    at::Tensor ready = t.to(dtype);
    if (!ready.is_contiguous() || reinterpret_cast<uintptr_t>(ready.data_ptr()) % 16 != 0) {
      ready = ready.clone(at::MemoryFormat::Contiguous);
    }
    if (ready.data_ptr() != t.data_ptr()) held.push_back(ready);
    return ready.data_ptr();
  }
  const void* bias(const at::Tensor& b, int64_t n, at::ScalarType dtype) {
    if (b.defined()) return address(b, dtype);
    held.push_back(at::zeros({n}, at::TensorOptions().dtype(dtype).device(device)));
    return held.back().data_ptr();
  }
  void* workspace(int64_t bytes) {
    held.push_back(at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(device)));
    return held.back().data_ptr();
  }
};

TritonDecodeStep::TritonDecodeStep(const ShapeGpt& gpt, const KvState& cache,
                                   TritonDecodeInputs inputs, int64_t batch, bool cfg,
                                   int64_t total_tokens, bool record)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  const GptWeights& w = gpt.weights();
  const GptConfig& config = gpt.config();
  const at::ScalarType dtype = w.wte.scalar_type();
  m.record = record;
  m.device = w.wte.device();
  if (!record) {
    if (const std::optional<std::string> why =
            triton_decode_unavailable(config, dtype, m.device, batch)) {
      throw failed_precondition("decode_kernels: triton: " + *why + "; use decode_kernels: torch");
    }
  }
  if (dtype != at::kBFloat16 && dtype != at::kFloat) {
    throw invalid_argument("decode_kernels: triton: the kernels take bfloat16 or float32 weights");
  }
  kernels::DecodeShape shape = shape_of(config, dtype, batch, cfg, cache.cond_len, total_tokens);
#ifdef CUBE3D_WITH_CUDA
  if (!record) shape.multiprocessors = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
#endif
  if (const std::string why = kernels::unsupported(shape); !why.empty()) {
    throw invalid_argument("decode_kernels: triton: " + why);
  }

  kernels::DecodeBuffers b;
  b.wte = m.address(w.wte, dtype);
  b.lm_head = m.address(w.lm_head, dtype);
  b.rope_cos = m.address(gpt.rope().cos, at::kFloat);
  b.rope_sin = m.address(gpt.rope().sin, at::kFloat);
  b.token_ids = inputs.token_ids.data_ptr();
  b.positions = inputs.positions.data_ptr();
  b.guidance = inputs.guidance.data_ptr();
  const int64_t d = config.n_embd;
  const auto add_block = [&](const Linear& qkv, const at::Tensor& q_norm, const at::Tensor& k_norm,
                             const Linear& proj, const SwiGluMlp& mlp, size_t layer) {
    kernels::BlockBuffers block;
    block.qkv_weight = m.address(qkv.weight, dtype);
    block.qkv_bias = m.bias(qkv.bias, 3 * d, dtype);
    block.q_norm = m.address(q_norm, dtype);
    block.k_norm = m.address(k_norm, dtype);
    block.proj_weight = m.address(proj.weight, dtype);
    block.proj_bias = m.bias(proj.bias, d, dtype);
    if (!mlp.gate_up.weight.defined()) {
      throw internal_error("decode_kernels: triton: block " + std::to_string(layer) +
                           " has no packed gate_up (GptWeights::from_tensors packs it)");
    }
    block.gate_up_weight = m.address(mlp.gate_up.weight, dtype);
    block.gate_up_bias = m.bias(mlp.gate_up.bias, 8 * d, dtype);
    block.down_weight = m.address(mlp.down.weight, dtype);
    block.down_bias = m.bias(mlp.down.bias, d, dtype);
    const at::Tensor& keys = cache.keys.at(layer);
    const at::Tensor& values = cache.values.at(layer);
    if (keys.scalar_type() != dtype || keys.stride(3) != 1 || keys.stride(2) != keys.size(3) ||
        keys.strides() != values.strides() || keys.size(0) < shape.rows()) {
      throw internal_error("decode_kernels: triton: the KV cache of block " +
                           std::to_string(layer) + " is not [rows, H, len, hd] with dense slots");
    }
    block.keys = keys.data_ptr();
    block.values = values.data_ptr();
    block.cache_row_stride = keys.stride(0);
    block.cache_head_stride = keys.stride(1);
    b.blocks.push_back(block);
  };
  size_t layer = 0;
  for (const DualBlockWeights& block : w.dual_blocks) {
    add_block(block.pre_x.qkv, block.pre_x.q_norm, block.pre_x.k_norm, block.post_x.c_proj,
              block.post_x.mlp, layer++);
  }
  for (const SingleBlockWeights& block : w.single_blocks) {
    add_block(block.qkv, block.q_norm, block.k_norm, block.c_proj, block.mlp, layer++);
  }
  const kernels::WorkspaceBytes bytes = kernels::workspace_bytes(shape);
  b.x = m.workspace(bytes.x);
  b.qkv = m.workspace(bytes.qkv);
  b.attention = m.workspace(bytes.attention);
  b.hidden = m.workspace(bytes.hidden);
  b.partial_out = m.workspace(bytes.partial_out);
  b.partial_stats = m.workspace(bytes.partial_stats);
  m.logits = at::zeros({batch, config.shape_model_vocab_size},
                       at::TensorOptions().dtype(at::kFloat).device(m.device));
  b.logits = m.logits.data_ptr();

  for (const SingleStreamDecode mode : kTritonModes) {
    shape.first_key_only = mode == SingleStreamDecode::kReference;
    try {
      m.plans[mode_index(mode)] = kernels::plan_decode_step(shape, b);
    } catch (const std::invalid_argument& e) {
      throw invalid_argument(std::string("decode_kernels: triton: ") + e.what());
    }
    if (record) {
      m.sequences[mode_index(mode)] =
          std::make_unique<kernels::RecordedLaunches>(m.plans[mode_index(mode)]);
    }
  }
}

TritonDecodeStep::~TritonDecodeStep() = default;

const at::Tensor& TritonDecodeStep::run(SingleStreamDecode mode) {
  Impl& m = *impl_;
  std::unique_ptr<kernels::LaunchSequence>& sequence = m.sequences[mode_index(mode)];
  void* stream = nullptr;
  try {
    if (!sequence) sequence = kernels::load_launches(m.plans[mode_index(mode)]);
#ifdef CUBE3D_WITH_CUDA
    if (!m.record) stream = c10::cuda::getCurrentCUDAStream(m.device.index()).stream();
#endif
    sequence->run(stream);
  } catch (const std::runtime_error& e) {
    throw internal_error(std::string("decode_kernels: triton: ") + e.what());
  }
  return m.logits;
}

DecodeLaunchCount TritonDecodeStep::count(SingleStreamDecode mode) const {
  return to_count(kernels::count_launches(impl_->plans[mode_index(mode)]));
}

int64_t TritonDecodeStep::recorded_runs() const {
  int64_t runs = 0;
  for (const auto& sequence : impl_->sequences) {
    if (const auto* recorded = dynamic_cast<const kernels::RecordedLaunches*>(sequence.get())) {
      runs += recorded->runs();
    }
  }
  return runs;
}

}  // namespace cube3d
