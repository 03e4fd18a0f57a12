// The engine: a loaded Cube 3D model (shape GPT + shape decoder) with its generator. What the
// CLI, the bench and the server drive. Builds without gRPC.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "cube3d/core/model_config.h"
#include "cube3d/engine/generator.h"
#include "cube3d/engine/text_encoder.h"
#include "cube3d/model/shape_decoder.h"
#include "cube3d/model/shape_gpt.h"

namespace cube3d {

struct EngineOptions {
  std::string gpt_weights;        // shape_gpt.safetensors (empty: random weights from the config)
  std::string shape_weights;      // shape_tokenizer.safetensors
  std::string device = "cpu";     // cpu | cuda | cuda:N
  std::string dtype = "float32";  // float32 | bfloat16
  int64_t max_batch = 1;          // requests per batch the KV cache is sized for
  int64_t text_tokens = 77;       // CLIP positions per condition
  // CLIP: a Hugging Face folder (config.json + model.safetensors). Empty: a small random CLIP
  // for random-weight models, no text encoder otherwise (precomputed embeddings only).
  std::string clip_model;
  std::string clip_vocab;  // see TextEncoder::resolve_vocab
  bool load_text_encoder = true;
  // kOn: one captured CUDA graph per decode variant on CUDA (the CPU runs eagerly);
  // kEmulate: the graph runner's lifecycle with eager replays, on any device; kOff: eager.
  GraphMode cuda_graphs = GraphMode::kOn;
  // The fused CUDA kernels of kernels/ in the decode step, where they apply (bf16 on CUDA).
  bool fused_kernels = true;
  // The decode variants prepared at load; in a graph mode the only ones generate() accepts.
  // Its empty bucket list means max_batch alone.
  CapturePlan capture;
};

// Parses "cpu", "cuda", "cuda:N"; throws failed_precondition when CUDA is asked for and there
// is no device, invalid_argument for anything else.
at::Device parse_device(const std::string& text);
at::ScalarType parse_dtype(const std::string& text);

class Engine {
 public:
  static std::unique_ptr<Engine> load(const ModelConfig& config, const EngineOptions& options);

  const ModelConfig& config() const { return config_; }
  const EngineOptions& options() const { return options_; }
  at::Device device() const { return device_; }
  const ShapeGpt& gpt() const { return *gpt_; }
  const ShapeDecoder& decoder() const { return *decoder_; }
  Generator& generator() { return *generator_; }
  // Null when the engine runs on precomputed text embeddings only.
  const TextEncoder* text_encoder() const { return text_encoder_.get(); }
  double load_ms() const { return load_ms_; }

  GenerationResult generate(const std::vector<GenerationRequest>& requests,
                            const GenerationOptions& options) {
    return generator_->generate(requests, options);
  }

 private:
  Engine() = default;

  ModelConfig config_;
  EngineOptions options_;
  at::Device device_ = at::kCPU;
  std::unique_ptr<ShapeGpt> gpt_;
  std::unique_ptr<ShapeDecoder> decoder_;
  std::unique_ptr<Generator> generator_;
  std::unique_ptr<TextEncoder> text_encoder_;
  double load_ms_ = 0;
};

}  // namespace cube3d
