// The generation loop: condition encoding, prefill of [cond ; BOS] into the KV cache, then
// T - 1 decode steps through the batch's decode runner. One batch of independent requests;
// padding rows never influence real ones.
#pragma once

#include <ATen/core/Tensor.h>

#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "cube3d/core/constants.h"
#include "cube3d/engine/decode_runner.h"
#include "cube3d/engine/graph_mode.h"
#include "cube3d/engine/kv_cache.h"
#include "cube3d/model/shape_gpt.h"

namespace cube3d {

struct GenerationRequest {
  at::Tensor text_hidden;    // [S_text, Dt] (CLIP: 77): last hidden state of the prompt
  at::Tensor uncond_hidden;  // [S_text, Dt]: of the empty prompt (used when guidance > 0)
  at::Tensor bbox;           // [3] normalised bounding box (use_bbox models) or undefined
  double guidance_scale = kDefaultGuidanceScale;
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
  // tokens done, once the device has finished them (on a GPU each report waits for the work
  // queued so far, so keep the interval coarse there). Returning false stops the batch early
  // (every request in it was cancelled).
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

// One decode runner per variant: batch size, guidance rows, logits recording.
struct RunnerKey {
  int64_t batch = 1;
  bool cfg = true;
  bool record_logits = false;
  auto operator<=>(const RunnerKey&) const = default;
};

// The decode variants a configuration can use, prepared (and, in a graph mode, captured) at
// engine start: every bucket x {guided, unguided as asked} x every mode.
struct CapturePlan {
  std::vector<int64_t> buckets;  // empty: the generator's max_batch only
  bool guided = true;            // batches where some request has guidance > 0 (2 rows each)
  bool unguided = false;         // batches where every request has guidance 0
  std::vector<SingleStreamDecode> modes = {SingleStreamDecode::kCausal};
  bool record_logits = false;  // runners that keep every step's logits (--dump, tests)
};

// Progress and cancellation must follow completed work, not queued work: on a GPU the host
// runs ahead of the device, so this waits on an event recorded after the last queued work of
// the current stream. Returns at once on the CPU.
void wait_for_queued_work(const at::Device& device);

class Generator {
 public:
  // Preallocates the KV cache for max_batch requests (2x rows with guidance) once.
  // graphs: how decode steps run (kOn needs the model on a CUDA device).
  // fused_kernels: decode steps use the fused CUDA kernels where they apply (bf16 on CUDA).
  // decode_kernels: kTriton runs decode steps through the Triton kernels (failed_precondition
  // when this build, device or dtype cannot: triton_decode_unavailable).
  Generator(const ShapeGpt& gpt, int64_t max_batch, int64_t total_tokens, int64_t cond_len,
            GraphMode graphs = GraphMode::kOff, bool fused_kernels = true,
            DecodeKernels decode_kernels = DecodeKernels::kTorch);

  int64_t max_batch() const { return max_batch_; }
  GraphMode graph_mode() const { return graphs_; }
  bool fused_kernels() const { return fused_kernels_; }
  DecodeKernels decode_kernels() const { return decode_kernels_; }
  int64_t total_tokens() const { return total_tokens_; }
  const KvCache& cache() const { return cache_; }

  GenerationResult generate(const std::vector<GenerationRequest>& requests,
                            const GenerationOptions& options);

  // Creates the decode runner of every variant in `plan` and, in a graph mode, captures each
  // of its modes: the one place where graphs are captured (Engine::load calls it). In a graph
  // mode, generate() refuses a variant or mode that was not prepared.
  void prepare(const CapturePlan& plan);

  // --- the pieces continuous decoding (continuous_decoder.h) drives --------------------------
  const ShapeGpt& gpt() const { return gpt_; }
  // The runner of a variant: prepared by prepare(), or (eager only) created on first use. In a
  // graph mode an unprepared variant is failed_precondition.
  DecodeRunner& decode_runner(const RunnerKey& key);
  // invalid_argument naming the request (by `index`) and the field at fault.
  void validate_request(const GenerationRequest& request, size_t index) const;
  // Encoded conditions [rows, S, D] on the device for `batch` rows of requests (padding rows
  // zero): [cond (batch) ; uncond (batch)] with cfg, [cond (batch)] without.
  at::Tensor encode_conditions(const std::vector<GenerationRequest>& requests, int64_t batch,
                               bool cfg) const;

 private:
  void load_requests(DecodeRunner& runner, const std::vector<GenerationRequest>& requests);

  const ShapeGpt& gpt_;
  int64_t max_batch_;
  int64_t total_tokens_;
  KvCache cache_;
  GraphMode graphs_;
  bool fused_kernels_;
  DecodeKernels decode_kernels_;
  // One runner per variant, reused: its buffers never move. Eager runners may also be created
  // on first use; graph runners only by prepare().
  std::map<RunnerKey, std::unique_ptr<DecodeRunner>> runners_;
};

}  // namespace cube3d
