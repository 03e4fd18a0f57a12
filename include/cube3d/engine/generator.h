// The generation loop: condition encoding, prefill of [cond ; BOS] into the KV cache, then
// T - 1 decode steps through the batch's decode runner. One batch of independent requests;
// padding rows never influence real ones.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "cube3d/engine/decode_runner.h"
#include "cube3d/engine/kv_cache.h"
#include "cube3d/model/shape_gpt.h"

namespace cube3d {

struct GenerationRequest {
  at::Tensor text_hidden;    // [77, Dt]: CLIP last hidden state of the prompt
  at::Tensor uncond_hidden;  // [77, Dt]: of the empty prompt (used when guidance > 0)
  at::Tensor bbox;           // [3] normalised bounding box (use_bbox models) or undefined
  double guidance_scale = 3.0;
  std::optional<double> top_p;  // unset: greedy
  uint64_t seed = 0;
};

struct GenerationOptions {
  SingleStreamDecode single_stream_decode = SingleStreamDecode::kCausal;
  // false: recompute the whole sequence every step (training semantics, no cache; the bench's
  // eager-nocache mode and the reference the KV path is tested against).
  bool use_kv_cache = true;
  bool record_logits = false;  // keep the guided logits of every step
  int64_t bucket = 0;          // pad the batch to this many requests (0: no padding)
  // Called after the first token and then every `progress_interval` tokens with the number of
  // tokens done (reading it costs one host sync, so keep the interval coarse on a GPU).
  // Returning false stops the batch early (every request in it was cancelled).
  std::function<bool(int64_t tokens_done)> on_progress;
  int64_t progress_interval = 0;  // 0: only after the first and the last token
};

struct GenerationResult {
  at::Tensor ids;             // [n, T] int64, CPU (padding rows removed)
  at::Tensor step_logits;     // [n, T, C] float32, CPU, when recorded
  at::Tensor cond;            // [rows, S, D]: conditions, rows [cond (b) ; uncond (b)]
  at::Tensor prefill_logits;  // [rows, C + 3]: raw logits at BOS
  int64_t tokens = 0;
  bool stopped = false;   // on_progress asked to stop; ids past the stop are meaningless
  double prefill_ms = 0;  // condition encoding, prefill and the first token
  double decode_ms = 0;   // the remaining T - 1 tokens
  double tpot_ms() const { return tokens > 1 ? decode_ms / static_cast<double>(tokens - 1) : 0; }
};

class Generator {
 public:
  // Preallocates the KV cache for max_batch requests (2x rows with guidance) once.
  // cuda_graphs: decode through one captured CUDA graph per batch shape (CUDA models only).
  Generator(const ShapeGpt& gpt, int64_t max_batch, int64_t total_tokens, int64_t cond_len,
            bool cuda_graphs = false);

  int64_t max_batch() const { return max_batch_; }
  bool cuda_graphs() const { return cuda_graphs_; }
  int64_t total_tokens() const { return total_tokens_; }
  const KvCache& cache() const { return cache_; }

  GenerationResult generate(const std::vector<GenerationRequest>& requests,
                            const GenerationOptions& options);

  // Creates the decode runner of a batch shape ahead of time (at start, for every bucket), so
  // that no request pays for it and its buffers exist before any graph capture.
  void prepare(int64_t batch, bool cfg);

 private:
  DecodeRunner& runner(int64_t batch, bool cfg, bool record_logits);
  void load_requests(DecodeRunner& runner, const std::vector<GenerationRequest>& requests);
  at::Tensor conditions(const std::vector<GenerationRequest>& requests, int64_t batch,
                        bool cfg) const;

  const ShapeGpt& gpt_;
  int64_t max_batch_;
  int64_t total_tokens_;
  KvCache cache_;
  bool cuda_graphs_;
  // One runner per batch shape, created on first use and reused: its buffers never move.
  std::map<std::tuple<int64_t, bool, bool>, std::unique_ptr<DecodeRunner>> runners_;
};

}  // namespace cube3d
