// The engine: a loaded Cube 3D model (shape GPT + shape decoder + CLIP) with its generator, behind
// one facade. Builds without gRPC.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cube3d/core/constants.h"
#include "cube3d/core/model_config.h"
#include "cube3d/engine/continuous_decoder.h"
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
  int64_t text_tokens = kClipContextLength;  // CLIP positions per condition
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
  // torch: libtorch's ops (the reference); triton: the Triton kernels of kernels/, compiled into
  // the CUDA build (bf16 on a CUDA device; load fails naming decode_kernels elsewhere).
  DecodeKernels decode_kernels = DecodeKernels::kTorch;
  // The decode variants prepared at load; in a graph mode the only ones generate() accepts.
  // Its empty bucket list means max_batch alone.
  CapturePlan capture;
};

// Parses "cpu", "cuda", "cuda:N"; throws failed_precondition when CUDA is asked for and there
// is no device, invalid_argument for anything else.
at::Device parse_device(const std::string& text);
at::ScalarType parse_dtype(const std::string& text);

// The facade every front end drives (server, cube3d-generate, cube3d-bench): text in, tokens,
// latents and occupancy out. Its parts (shape GPT, generator, shape decoder, text encoder) stay
// inside; what a caller may learn about them is read-only.
class Engine {
 public:
  // Loads the weights, builds the KV cache for options.max_batch requests and prepares (in a
  // graph mode, captures) every decode variant of options.capture, before any request.
  static std::unique_ptr<Engine> load(const ModelConfig& config, const EngineOptions& options);

  // --- what was loaded ------------------------------------------------------------------------
  const ModelConfig& config() const { return config_; }
  const EngineOptions& options() const { return options_; }
  at::Device device() const { return device_; }
  double load_ms() const { return load_ms_; }
  // T: the tokens of one shape (shape_model.num_encoder_latents).
  int64_t tokens_per_shape() const { return config_.shape.num_encoder_latents; }
  // How decode steps run here: options.cuda_graphs, with kOn read as kOff off CUDA.
  GraphMode graph_mode() const { return generator_->graph_mode(); }
  // The KV cache and the shape GPT, read-only: their sizes for the bench's memory and traffic
  // model, and the model for the engine's own component tests.
  const KvCache& kv_cache() const { return generator_->cache(); }
  const ShapeGpt& gpt() const { return *gpt_; }

  // --- text -> conditions ---------------------------------------------------------------------
  // Null when the engine runs on precomputed text embeddings only.
  const TextEncoder* text_encoder() const { return text_encoder_.get(); }

  // --- conditions -> tokens -------------------------------------------------------------------
  // One batch; not thread-safe (one generation at a time, like the KV cache it owns).
  GenerationResult generate(const std::vector<GenerationRequest>& requests,
                            const GenerationOptions& options) {
    return generator_->generate(requests, options);
  }
  // Prepares (captures) more decode variants after load. Safe between batches and from a
  // progress callback; generate() in a graph mode accepts only prepared variants.
  void prepare(const CapturePlan& plan) { generator_->prepare(plan); }
  // Continuous decoding on this engine's generator and KV cache (continuous_decoder.h); while
  // it holds active slots, generate() must not run. The shared unconditional condition is the
  // text encoder's empty prompt, or `uncond_hidden` [S_text, Dt] (required without a text
  // encoder).
  std::unique_ptr<ContinuousDecoder> continuous_decoder(const ContinuousDecodeOptions& options,
                                                        const at::Tensor& uncond_hidden = {});

  // --- tokens -> shape ------------------------------------------------------------------------
  // Latents [n, T, W] on the engine's device for token ids [n, T] (on any device).
  at::Tensor decode_latents(const at::Tensor& ids) const;
  // Occupancy logits [N, N, N] float32 on the CPU (N = 2^r + 1) for one shape's latents
  // [1, T, W]; see ShapeDecoder::occupancy_grid for chunking and `should_stop`. Thread-safe.
  at::Tensor occupancy_grid(const at::Tensor& latents, int64_t resolution_base,
                            int64_t chunk_points = 0,
                            const std::function<bool()>& should_stop = {}) const;

  // The pieces of that evaluation, for callers that choose their own points (coarse-to-fine):
  // the latents' cross-attention keys and values, computed once per shape; the occupancy
  // logits [1, P] float32 on the device of points [1, P, 3] on the device; the grid's axis
  // coordinates [N] on the device, exactly as the dense grid uses them. Thread-safe.
  ShapeDecoder::LatentKv occupancy_context(const at::Tensor& latents) const;
  at::Tensor occupancy(const ShapeDecoder::LatentKv& context, const at::Tensor& points) const;
  at::Tensor grid_axis(int64_t points_per_axis) const;
  // Points per occupancy call: bounded by memory on a GPU; on the CPU also by work (a chunk of
  // about a quarter of a second on one core), so that cancellation and progress between chunks
  // stay prompt. Depends only on the model and the device, so a shape's numbers never depend on
  // timing.
  int64_t occupancy_chunk_points() const;

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
