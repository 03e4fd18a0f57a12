// Continuous (iteration-level) decoding: a running batch of slots, one token per step() for
// every active slot; requests join free slots between steps (admit) and leave as soon as their
// tokens are done (release). The scheduler decides who joins and when; this class executes.
//
// Layout. Slot i always owns KV-cache row i (its conditional row); with guidance its
// unconditional row is B + i, where B is the bucket of the current layout, exactly as a static
// batch of B lays out [cond (B) ; uncond (B)]. Each step runs the decode runner (and, in a graph
// mode, the captured graph) of the smallest prepared bucket that holds the active slots, guided
// when any active request has guidance. Active slots are kept compact (0..n-1): a slot that
// leaves from the middle is replaced by the last one (its KV rows and runner state are moved),
// and a change of bucket or guidance moves the unconditional rows and the runner state to the
// new layout. Rows past the active slots step as padding at the scratch position and are never
// read.
//
// Parity. Every per-row input of a step (position, RoPE, masks, the CFG gamma schedule, the
// random draw) comes from that row's own position, so a request's tokens are those it would get
// alone, whatever it joined and whenever. The unconditional prefix (the empty prompt's
// condition stream and BOS) is the same for every request: computed once here and copied into
// a joining slot's unconditional row instead of being prefilled per request.
//
// Not thread-safe, and it shares the generator's KV cache and runners: do not run
// Generator::generate while slots are active.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "cube3d/engine/generator.h"

namespace cube3d {

struct ContinuousDecodeOptions {
  // The decode buckets (strictly increasing); empty: the generator's max_batch alone. In a graph
  // mode each must have been prepared (captured) for the variants the requests need.
  std::vector<int64_t> buckets;
  SingleStreamDecode single_stream_decode = SingleStreamDecode::kCausal;
  bool record_logits = false;  // keep each slot's guided logits (tests, dumps)
};

class ContinuousDecoder {
 public:
  using SlotId = uint64_t;

  // uncond_hidden: the empty prompt's text hidden state [S_text, Dt] (CLIP), whose condition
  // prefix every guided slot shares; requests with guidance must carry the same one (or none).
  ContinuousDecoder(Generator& generator, const at::Tensor& uncond_hidden,
                    ContinuousDecodeOptions options);

  const ContinuousDecodeOptions& options() const { return options_; }
  int64_t capacity() const { return buckets_.back(); }  // slots: the largest bucket
  int64_t active() const { return static_cast<int64_t>(slots_.size()); }
  int64_t bucket() const { return layout_.bucket; }  // of the last step; 0 when idle
  bool guided() const { return layout_.cfg; }
  int64_t total_tokens() const { return total_tokens_; }
  int64_t steps() const { return steps_; }  // decode steps run so far

  // Validates, encodes and prefills `requests` into free slots and chooses their first token.
  // Returns one id per request, in order. invalid_argument for a bad request (nothing is
  // admitted then), resource_exhausted when they do not fit the free slots.
  std::vector<SlotId> admit(const std::vector<GenerationRequest>& requests);

  // One token for every active slot. A slot whose tokens are done keeps its tokens but steps
  // as padding until released.
  void step();

  // The active slots, in slot order.
  std::vector<SlotId> slots() const;
  bool holds(SlotId id) const;
  int64_t tokens_done(SlotId id) const;
  bool done(SlotId id) const { return tokens_done(id) >= total_tokens_; }
  // [T] int64 on the CPU (a copy; tokens past tokens_done are meaningless) and, with
  // record_logits, [T, C] float32.
  at::Tensor ids(SlotId id);
  at::Tensor logits(SlotId id);

  // Waits until the device has done the steps queued so far (progress that follows completed
  // work); returns at once on the CPU.
  void synchronize() const;

  // Frees the slot (done, cancelled or failed). Unknown ids are not_found.
  void release(SlotId id);
  void release_all();

 private:
  struct Slot {
    SlotId id = 0;
    int64_t tokens_done = 0;
    bool guided = false;    // guidance > 0
    bool sampling = false;  // top-p
  };
  struct Layout {
    int64_t bucket = 0;
    bool cfg = false;
    bool operator==(const Layout&) const = default;
  };

  size_t index_of(SlotId id) const;
  Layout layout_for(int64_t slots, bool cfg) const;
  DecodeRunner& runner(const Layout& layout);
  // Moves the active slots' unconditional rows and runner state to `target`.
  void relayout(const Layout& target);
  // Moves slot `from` (KV rows and runner state) to slot `to` in the current layout.
  void move_slot(int64_t from, int64_t to);
  void copy_prefix_to_uncond_rows(int64_t first_slot, int64_t count);
  int64_t filled_dual(int64_t tokens) const { return cond_len_ + tokens; }
  void refresh_plan();

  Generator& generator_;
  ContinuousDecodeOptions options_;
  std::vector<int64_t> buckets_;
  int64_t total_tokens_ = 0;
  int64_t cond_len_ = 0;
  int64_t dual_layers_ = 0;
  at::Tensor uncond_hidden_;  // CPU float32, for comparing requests' own
  // The unconditional prefix: per layer the keys/values of its filled slots (dual: S + 1,
  // single: 1), [1, H, len, hd], and its logits at BOS [1, C + 3].
  std::vector<at::Tensor> prefix_keys_, prefix_values_;
  at::Tensor prefix_logits_;

  std::vector<Slot> slots_;  // slot i = index i
  Layout layout_;
  SlotId next_id_ = 1;
  int64_t steps_ = 0;
};

}  // namespace cube3d
