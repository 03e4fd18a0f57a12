#include "cube3d/engine/engine.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <spdlog/spdlog.h>

#include <optional>

#include "cube3d/core/clock.h"
#include "cube3d/core/error.h"
#include "cube3d/engine/triton_decode.h"
#include "cube3d/model/weights.h"

namespace cube3d {

at::Device parse_device(const std::string& text) {
  if (text == "cpu") return at::kCPU;
  if (text == "cuda" || text.rfind("cuda:", 0) == 0) {
    int index = 0;
    if (text.size() > 5) {
      const std::string digits = text.substr(5);
      if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos ||
          digits.size() > 3) {
        throw invalid_argument("device '" + text + "' is not cpu, cuda or cuda:N");
      }
      index = std::stoi(digits);
    }
    if (!at::hasCUDA()) {
      throw failed_precondition("device '" + text +
                                "' requested but this machine has no usable CUDA device");
    }
    return at::Device(at::kCUDA, static_cast<at::DeviceIndex>(index));
  }
  throw invalid_argument("device '" + text + "' is not cpu, cuda or cuda:N");
}

namespace {

void choose_attention_backends() {
  // scaled_dot_product_attention on CUDA: flash attention where no mask is given (prefill of
  // the shape decoder), the memory-efficient kernel for masked calls (every decode step), math
  // as the fallback. cuDNN stays off: with torch 2.11 + cuDNN 9 on sm90 it builds an execution
  // plan per new sequence length (0.1-0.4 s each), which the no-cache path meets at every step,
  // and it has not been measured faster at our fixed decode shapes (bench/README.md).
  at::Context& context = at::globalContext();
  context.setSDPUseCuDNN(false);
  context.setSDPUseFlash(true);
  context.setSDPUseMemEfficient(true);
  context.setSDPUseMath(true);
  spdlog::info("attention on CUDA: flash / memory-efficient / math (cuDNN off)");
}

}  // namespace

at::ScalarType parse_dtype(const std::string& text) {
  if (text == "float32") return at::kFloat;
  if (text == "bfloat16") return at::kBFloat16;
  throw invalid_argument("dtype '" + text + "' is not float32 or bfloat16");
}

std::unique_ptr<Engine> Engine::load(const ModelConfig& config, const EngineOptions& options) {
  const auto start = SteadyClock::now();
  validate_model_config(config);
  if (options.max_batch < 1) throw invalid_argument("max_batch must be >= 1");
  std::unique_ptr<Engine> engine(new Engine());  // private constructor: make_unique cannot
  engine->config_ = config;
  engine->options_ = options;
  engine->device_ = parse_device(options.device);
  const at::ScalarType dtype = parse_dtype(options.dtype);
  if (engine->device_.is_cpu() && dtype != at::kFloat) {
    throw invalid_argument("dtype " + options.dtype + " is only supported on CUDA; use float32");
  }
  // Before the (possibly long) weight load.
  if (options.decode_kernels == DecodeKernels::kTriton) {
    if (const std::optional<std::string> why =
            triton_decode_unavailable(config.gpt, dtype, engine->device_, options.max_batch)) {
      throw failed_precondition("decode_kernels: triton: " + *why + "; use decode_kernels: torch");
    }
  }

  ModelWeights weights = load_model_weights(config, options.gpt_weights, options.shape_weights,
                                            {dtype, engine->device_});
  engine->decoder_ = std::make_unique<ShapeDecoder>(
      config.shape, ShapeDecoderWeights::from_tensors(config.shape, weights.shape));
  const int64_t tokens = config.shape.num_encoder_latents;
  engine->gpt_ = std::make_unique<ShapeGpt>(
      config.gpt,
      // Moved in: the tensors it packs into others are dropped (and their pages released).
      GptWeights::from_tensors(config.gpt, std::move(weights.gpt),
                               engine->decoder_->normalized_codebook(), weights.release_gpt),
      tokens + 1);
  if (engine->device_.is_cuda()) choose_attention_backends();
  // "on" means CUDA graphs where there is CUDA; the CPU then decodes eagerly.
  const GraphMode graphs = options.cuda_graphs == GraphMode::kOn && !engine->device_.is_cuda()
                               ? GraphMode::kOff
                               : options.cuda_graphs;
  engine->generator_ = std::make_unique<Generator>(*engine->gpt_, options.max_batch, tokens,
                                                   config.cond_len(options.text_tokens), graphs,
                                                   options.fused_kernels, options.decode_kernels);
  // The one place where decode runners are made ahead and graphs are captured: at load,
  // before any request, for every variant the configuration can use.
  engine->generator_->prepare(options.capture);
  if (options.load_text_encoder) {
    const int64_t text_dim = config.gpt.text_model_embed_dim;
    std::optional<ClipTextModel> clip;
    if (!options.clip_model.empty()) {
      clip = ClipTextModel::load(options.clip_model, engine->device_);
    } else if (config.random_weights_seed && options.gpt_weights.empty()) {
      // The demo model's CLIP: small, random, with the real vocabulary so it tokenizes text.
      ClipTextConfig small;
      small.hidden_size = text_dim;
      small.intermediate_size = 4 * text_dim;
      small.num_hidden_layers = 2;
      small.num_attention_heads = text_dim % 16 == 0 ? text_dim / 16 : 1;
      clip = ClipTextModel::random(small, *config.random_weights_seed + 2, engine->device_);
    }
    if (clip) {
      if (clip->config().hidden_size != text_dim) {
        throw invalid_argument("CLIP model " + options.clip_model + " has hidden size " +
                               std::to_string(clip->config().hidden_size) + " but " +
                               config.source + " expects gpt_model.text_model_embed_dim " +
                               std::to_string(text_dim));
      }
      ClipTokenizer tokenizer =
          ClipTokenizer::load(TextEncoder::resolve_vocab(options.clip_vocab, options.clip_model));
      engine->text_encoder_ = std::make_unique<TextEncoder>(std::move(tokenizer), std::move(*clip));
    }
  }
  engine->load_ms_ = ms_since(start);
  spdlog::info(
      "loaded {} on {} ({}) in {:.0f} ms; KV cache {:.1f} MiB for {} requests; decode graphs "
      "{}",
      config.source, options.device, options.dtype, engine->load_ms_,
      static_cast<double>(engine->generator_->cache().bytes()) / (1 << 20), options.max_batch,
      to_string(graphs));
  return engine;
}

std::unique_ptr<ContinuousDecoder> Engine::continuous_decoder(
    const ContinuousDecodeOptions& options, const at::Tensor& uncond_hidden) {
  at::Tensor uncond = uncond_hidden;
  if (!uncond.defined()) {
    if (!text_encoder_) {
      throw failed_precondition(
          "continuous decoding needs the empty prompt's condition: this engine has no text "
          "encoder, so pass uncond_hidden");
    }
    uncond = text_encoder_->empty_prompt();
  }
  return std::make_unique<ContinuousDecoder>(*generator_, uncond, options);
}

at::Tensor Engine::decode_latents(const at::Tensor& ids) const {
  return decoder_->latents(ids.to(device_));
}

at::Tensor Engine::occupancy_grid(const at::Tensor& latents, int64_t resolution_base,
                                  int64_t chunk_points,
                                  const std::function<bool()>& should_stop) const {
  return decoder_->occupancy_grid(latents, resolution_base, chunk_points, should_stop);
}

ShapeDecoder::LatentKv Engine::occupancy_context(const at::Tensor& latents) const {
  return decoder_->latent_kv(latents);
}

at::Tensor Engine::occupancy(const ShapeDecoder::LatentKv& context,
                             const at::Tensor& points) const {
  return decoder_->occupancy(context, points);
}

at::Tensor Engine::grid_axis(int64_t points_per_axis) const {
  return cube3d::grid_axis(points_per_axis).to(device_);
}

int64_t Engine::occupancy_chunk_points() const {
  if (device_.is_cuda()) return decoder_->default_chunk_points(int64_t{1} << 30);
  // About 4 GFLOP per chunk: 0.1-0.3 s on one CPU core at the 15-40 GFLOP/s we measured.
  constexpr int64_t kCpuChunkFlops = int64_t{4} << 30;
  const int64_t by_work =
      std::max<int64_t>(256, kCpuChunkFlops / decoder_->query_flops_per_point());
  // And about 32 MiB of activations: larger chunks spill the caches and run several times
  // slower per point on a CPU.
  return std::min(by_work, decoder_->default_chunk_points(int64_t{32} << 20));
}

}  // namespace cube3d
