// The graph runner's capture lifecycle, shared by the CUDA graph runner and its CPU emulation.
//
// capture(mode), called only by Generator::prepare at engine start, for every decode variant
// the configuration can use:
//   1. a few eager warm-up steps and then the recorded step, all fed at the scratch position
//      (DecodeRunner::scratch_position), so they write only a key/value slot, an output column
//      and a random draw that no real step ever reads: a capture never touches live state, even
//      when another batch is in flight on the shared KV cache;
//   2. the recording freezes the host-side choices (the single-stream mode, the top-p path
//      always on: greedy rows take the argmax inside it, so one graph serves every mix);
//   3. the scratch key/value slot is zeroed again and the addresses of every static buffer
//      are noted.
// step(mode) replays; it never records. A mode that was not captured is failed_precondition,
// and a static buffer that was reassigned instead of written in place since the capture is
// internal_error, because a real graph would go on reading the old memory.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cube3d/engine/decode_runner.h"
#include "cube3d/engine/graph_mode.h"

namespace cube3d {

class GraphDecodeRunner : public DecodeRunner {
 public:
  using DecodeRunner::DecodeRunner;

  void capture(SingleStreamDecode mode) final;
  bool captured(SingleStreamDecode mode) const final { return recordings_.count(mode) > 0; }
  void step(SingleStreamDecode mode) final;

  // Eager steps before each recording, as torch.cuda.graph does: they create library
  // workspaces and the allocator's blocks so that the recording itself allocates nothing new.
  static constexpr int kWarmupSteps = 3;

 protected:
  // One recorded decode step, replayed on the same buffers.
  class Recording {
   public:
    virtual ~Recording() = default;
    virtual void replay() = 0;
  };

  // Runs kWarmupSteps times {reset(); step();}, then reset() and records one step(). `step`
  // is the whole decode step on the static buffers with the frozen host-side choices.
  virtual std::unique_ptr<Recording> record(const std::function<void()>& reset,
                                            const std::function<void()>& step) = 0;

 private:
  struct BufferAddress {
    std::string name;
    const at::Tensor* tensor;
    const void* data;
  };
  std::vector<BufferAddress> static_buffers();
  void check_buffers_in_place();
  void zero_scratch_slot();

  std::map<SingleStreamDecode, std::unique_ptr<Recording>> recordings_;
  std::vector<BufferAddress> captured_addresses_;
};

// The runner for one decode variant: eager (kOff), CUDA graphs (kOn, CUDA models only) or the
// emulated graph lifecycle (kEmulate, any device).
std::unique_ptr<DecodeRunner> make_decode_runner(GraphMode mode, const ShapeGpt& gpt, KvState cache,
                                                 DecodeRunnerConfig config);

}  // namespace cube3d
