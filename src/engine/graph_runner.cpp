#include "cube3d/engine/graph_runner.h"

#include <ATen/ATen.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <utility>

#include "cube3d/core/enum_table.h"
#include "cube3d/core/error.h"
#include "cube3d/engine/cuda_graph_runner.h"

namespace cube3d {
namespace {

// The CPU emulation: the very same lifecycle (warm-ups, the scratch position, frozen host-side
// choices, static buffers checked on every replay) with eager execution. Recording runs
// nothing, as a CUDA capture runs nothing; each replay runs the frozen step.
class EmulatedGraphRunner final : public GraphDecodeRunner {
 public:
  using GraphDecodeRunner::GraphDecodeRunner;
  const char* kind() const override { return "emulated graph"; }

 protected:
  class EagerRecording final : public Recording {
   public:
    explicit EagerRecording(std::function<void()> step) : step_(std::move(step)) {}
    void replay() override { step_(); }

   private:
    std::function<void()> step_;
  };

  std::unique_ptr<Recording> record(const std::function<void()>& reset,
                                    const std::function<void()>& step) override {
    for (int i = 0; i < kWarmupSteps; ++i) {
      reset();
      step();
    }
    reset();
    return std::make_unique<EagerRecording>(step);
  }
};

constexpr EnumTable<GraphMode, std::string_view, 3> kGraphModeNames = {
    {{GraphMode::kOn, "on"}, {GraphMode::kOff, "off"}, {GraphMode::kEmulate, "emulate"}}};

}  // namespace

std::string to_string(GraphMode mode) {
  return std::string(lookup(kGraphModeNames, mode).value_or("?"));
}

GraphMode parse_graph_mode(const std::string& text, const std::string& field) {
  return parse_enum(kGraphModeNames, text, field);
}

std::vector<GraphDecodeRunner::BufferAddress> GraphDecodeRunner::static_buffers() {
  std::vector<BufferAddress> out;
  const auto add = [&](const std::string& name, const at::Tensor& t) {
    if (t.defined()) out.push_back({name, &t, t.data_ptr()});
  };
  add("token_ids", token_ids_);
  add("positions", positions_);
  add("output_ids", output_ids_);
  add("output_logits", output_logits_);
  add("sampling.guidance", sampling_.guidance);
  add("sampling.top_p", sampling_.top_p);
  add("sampling.greedy", sampling_.greedy);
  add("sampling.uniforms", sampling_.uniforms);
  for (size_t i = 0; i < cache_.keys.size(); ++i) {
    add("cache.keys[" + std::to_string(i) + "]", cache_.keys[i]);
    add("cache.values[" + std::to_string(i) + "]", cache_.values[i]);
  }
  return out;
}

void GraphDecodeRunner::check_buffers_in_place() {
  for (const BufferAddress& b : captured_addresses_) {
    if (!b.tensor->defined() || b.tensor->data_ptr() != b.data) {
      throw internal_error("decode runner (" + std::string(kind()) + ", batch " +
                           std::to_string(config_.batch) + "): static buffer " + b.name +
                           " was reassigned after its graph was captured; write it in place "
                           "(copy_, fill_) so that replays read the new values");
    }
  }
}

void GraphDecodeRunner::zero_scratch_slot() {
  const int64_t dual_blocks = gpt_.config().n_layer;
  for (size_t i = 0; i < cache_.keys.size(); ++i) {
    const bool dual = static_cast<int64_t>(i) < dual_blocks;
    const int64_t slot = (dual ? cache_.cond_len : 0) + scratch_position();
    cache_.keys[i].narrow(2, slot, 1).zero_();
    cache_.values[i].narrow(2, slot, 1).zero_();
  }
}

void GraphDecodeRunner::capture(SingleStreamDecode mode) {
  if (captured(mode)) return;
  if (captured_addresses_.empty()) {
    captured_addresses_ = static_buffers();
  } else {
    check_buffers_in_place();
  }
  const auto start = std::chrono::steady_clock::now();
  // The feed buffers are the only live state the capture steps touch; keep their contents.
  const at::Tensor token_ids = token_ids_.clone();
  const at::Tensor positions = positions_.clone();
  SamplingPlan frozen = plan_;
  frozen.any_sampling = true;  // the top-p path always; greedy rows take the argmax inside it
  const auto reset = [this] {
    positions_.fill_(scratch_position());
    token_ids_.zero_();
  };
  const auto step = [this, mode, frozen] { eager_step(mode, frozen); };
  recordings_[mode] = record(reset, step);
  zero_scratch_slot();
  token_ids_.copy_(token_ids);
  positions_.copy_(positions);
  spdlog::info(
      "captured the {} decode step for {} requests ({} rows, {}{}) in {:.0f} ms", kind(),
      config_.batch, rows(), to_string(mode), config_.record_logits ? ", recording logits" : "",
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
}

void GraphDecodeRunner::step(SingleStreamDecode mode) {
  const auto it = recordings_.find(mode);
  if (it == recordings_.end()) {
    throw failed_precondition("decode runner (" + std::string(kind()) + ", batch " +
                              std::to_string(config_.batch) + (config_.cfg ? ", cfg" : "") +
                              "): no step captured for single_stream_decode " + to_string(mode) +
                              "; graphs are captured at engine start only, for the modes in "
                              "EngineOptions.capture");
  }
  check_buffers_in_place();
  it->second->replay();
}

std::unique_ptr<DecodeRunner> make_decode_runner(GraphMode mode, const ShapeGpt& gpt, KvState cache,
                                                 DecodeRunnerConfig config) {
  switch (mode) {
    case GraphMode::kOff:
      break;
    case GraphMode::kOn:
      return make_cuda_graph_runner(gpt, std::move(cache), config);
    case GraphMode::kEmulate:
      return std::make_unique<EmulatedGraphRunner>(gpt, std::move(cache), config);
  }
  return std::make_unique<DecodeRunner>(gpt, std::move(cache), config);
}

}  // namespace cube3d
