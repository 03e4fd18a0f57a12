#include "cube3d/engine/op_count.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>

#include <memory>
#include <set>
#include <string>
#include <string_view>

#include "cube3d/core/error.h"
#include "cube3d/engine/decode_runner.h"

namespace cube3d {
namespace {

// Operations that do no work of their own: views and metadata, and the casts and reshapes that
// return their input when there is nothing to convert (they do work only through the nested
// operations they then call, e.g. aten::to -> aten::_to_copy).
bool is_view_or_passthrough(std::string_view name) {
  static const std::set<std::string_view> names = {"aten::alias",
                                                   "aten::as_strided",
                                                   "aten::chunk",
                                                   "aten::contiguous",
                                                   "aten::detach",
                                                   "aten::expand",
                                                   "aten::expand_as",
                                                   "aten::flatten",
                                                   "aten::movedim",
                                                   "aten::narrow",
                                                   "aten::permute",
                                                   "aten::_reshape_alias",
                                                   "aten::reshape",
                                                   "aten::select",
                                                   "aten::slice",
                                                   "aten::split",
                                                   "aten::split_with_sizes",
                                                   "aten::squeeze",
                                                   "aten::t",
                                                   "aten::to",
                                                   "aten::transpose",
                                                   "aten::type_as",
                                                   "aten::unbind",
                                                   "aten::unflatten",
                                                   "aten::unsqueeze",
                                                   "aten::view",
                                                   "aten::view_as",
                                                   "aten::view_as_complex",
                                                   "aten::view_as_real",
                                                   "aten::lift_fresh"};
  return names.count(name) > 0;
}

// Allocations without a kernel: nested in a view they do not make it work.
bool is_allocation(std::string_view name) {
  return name == "aten::empty" || name == "aten::empty_strided" || name == "aten::empty_like";
}

// The count being taken on this thread, and how deep inside ATen operations the observer is.
// RecordFunction callbacks are plain function pointers, so their state lives here.
struct OpCounterState {
  AtenOpCount* count = nullptr;
  int64_t depth = 0;
  bool top_level_worked = false;  // the current top-level operation, or one inside it, did work
};
thread_local OpCounterState op_counter_state;

std::unique_ptr<at::ObserverContext> on_op_start(const at::RecordFunction& fn) {
  OpCounterState& state = op_counter_state;
  if (state.count == nullptr) return nullptr;
  const std::string_view name = fn.name();
  ++state.count->all;
  if (state.depth == 0) {
    ++state.count->top_level;
    ++state.count->top_level_by_name[std::string(name)];
    state.top_level_worked = !is_view_or_passthrough(name);
  } else if (!is_view_or_passthrough(name) && !is_allocation(name)) {
    state.top_level_worked = true;
  }
  ++state.depth;
  return nullptr;
}

void on_op_end(const at::RecordFunction& /*fn*/, at::ObserverContext* /*context*/) {
  OpCounterState& state = op_counter_state;
  if (state.count == nullptr || state.depth == 0) return;
  --state.depth;
  if (state.depth == 0 && !state.top_level_worked) ++state.count->top_level_views;
}

// Installs the observer for one count and removes it however the work ends.
class OpCounterScope {
 public:
  explicit OpCounterScope(AtenOpCount& count) {
    if (op_counter_state.count != nullptr) {
      throw internal_error("count_aten_ops: a count is already running on this thread");
    }
    op_counter_state = {&count, 0};
    handle_ = at::addThreadLocalCallback(at::RecordFunctionCallback(on_op_start, on_op_end)
                                             .scopes({at::RecordScope::FUNCTION})
                                             .needsInputs(false));
  }
  ~OpCounterScope() {
    at::removeCallback(handle_);
    op_counter_state = {};
  }
  OpCounterScope(const OpCounterScope&) = delete;
  OpCounterScope& operator=(const OpCounterScope&) = delete;

 private:
  at::CallbackHandle handle_ = 0;
};

// The rows a decode runner of `config` steps: its requests, twice with guidance.
int64_t rows_of(const DecodeRunnerConfig& config) {
  return config.cfg ? 2 * config.batch : config.batch;
}

// A runner's config for one counted step of `batch` requests, checked against the cache's rows
// (`counter` names the caller in the error).
DecodeRunnerConfig counted_config(const char* counter, const KvCache& cache, int64_t batch,
                                  bool cfg, int64_t total_tokens) {
  if (batch < 1) throw invalid_argument(std::string(counter) + ": batch must be >= 1");
  DecodeRunnerConfig config;
  config.batch = batch;
  config.cfg = cfg;
  config.total_tokens = total_tokens;
  if (rows_of(config) > cache.max_rows()) {
    throw invalid_argument(std::string(counter) + ": " + std::to_string(rows_of(config)) +
                           " rows exceed the KV cache's " + std::to_string(cache.max_rows()));
  }
  return config;
}

// One step at the scratch position, not counted: what is done once per process (the backend's
// selection, the cubins' loading) stays out of the count. The counted step comes next, at the
// scratch position again.
void step_uncounted(DecodeRunner& runner, SingleStreamDecode mode) {
  runner.positions().fill_(runner.scratch_position());
  runner.step(mode);
  runner.positions().fill_(runner.scratch_position());
}

}  // namespace

AtenOpCount count_aten_ops(const std::function<void()>& work) {
  AtenOpCount count;
  {
    // RecordFunction may be switched off on this thread (it is on by default).
    const at::RecordFunctionGuard enabled(/*is_enabled=*/true);
    const OpCounterScope scope(count);
    work();
  }
  return count;
}

AtenOpCount count_decode_step_ops(const ShapeGpt& gpt, const KvCache& cache, int64_t batch,
                                  bool cfg, int64_t total_tokens, SingleStreamDecode mode,
                                  bool fused_kernels) {
  DecodeRunnerConfig config =
      counted_config("count_decode_step_ops", cache, batch, cfg, total_tokens);
  config.fused_kernels = fused_kernels;
  DecodeRunner runner(gpt, cache.view(rows_of(config)), config);
  step_uncounted(runner, mode);
  return count_aten_ops([&] { runner.step(mode); });
}

DecodeStepLaunches count_decode_step_launches(const ShapeGpt& gpt, const KvCache& cache,
                                              int64_t batch, bool cfg, int64_t total_tokens,
                                              SingleStreamDecode mode) {
  DecodeRunnerConfig config =
      counted_config("count_decode_step_launches", cache, batch, cfg, total_tokens);
  config.decode_kernels = DecodeKernels::kTriton;
  config.record_launches = true;
  DecodeRunner runner(gpt, cache.view(rows_of(config)), config);
  step_uncounted(runner, mode);
  DecodeStepLaunches out;
  out.aten = count_aten_ops([&] { runner.step(mode); });
  out.kernels = runner.triton()->count(mode);
  return out;
}

}  // namespace cube3d
