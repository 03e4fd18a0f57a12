// How many ATen operations a decode step dispatches, counted with libtorch's RecordFunction
// observer (the hook its profiler uses) on the calling thread. A step of a few rows is bound by
// its operation count (kernel launches on a GPU, dispatcher and allocation overhead on the CPU)
// more than by arithmetic, so the count is a number a change can be checked against without a
// GPU: cube3d-bench prints it and tests/engine pins it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "cube3d/engine/kv_cache.h"
#include "cube3d/engine/triton_decode.h"
#include "cube3d/model/shape_gpt.h"

namespace cube3d {

struct AtenOpCount {
  // Operations called from outside any other ATen operation: what the code itself asks for
  // (aten::linear counts once, the aten::addmm it calls does not).
  int64_t top_level = 0;
  // Of those, the ones that did no work of their own: views (aten::view, transpose, select,
  // chunk, ...) and casts or reshapes that returned their input, with nothing but views and
  // allocations nested in them. The rest, top_level - top_level_views, launch at least one kernel
  // on a GPU: the count that tracks launches.
  int64_t top_level_views = 0;
  // Every operation, the nested ones included.
  int64_t all = 0;
  // The top-level operations by name ("aten::linear" -> 12).
  std::map<std::string, int64_t> top_level_by_name;

  int64_t top_level_compute() const { return top_level - top_level_views; }
};

// Runs `work` on this thread and counts the ATen operations it dispatches on this thread (an
// intra-op worker thread of the CPU backend dispatches none of its own).
AtenOpCount count_aten_ops(const std::function<void()>& work);

// The ATen operations of one eager decode step of `gpt` for `batch` requests (2 rows each with
// `cfg`): embedding of the fed token, the shape GPT step against `cache`, guidance, greedy choice
// and the bookkeeping, exactly what a DecodeRunner step (and so a captured graph) runs. The step
// feeds the runner's scratch position T, so it writes only the cache slots no real step reads;
// one step runs uncounted first. `fused_kernels`: as DecodeRunnerConfig's.
AtenOpCount count_decode_step_ops(const ShapeGpt& gpt, const KvCache& cache, int64_t batch,
                                  bool cfg, int64_t total_tokens, SingleStreamDecode mode,
                                  bool fused_kernels);

// One decode step on the Triton path (decode_kernels: triton), counted on any device by the
// Triton step's recording mode: the kernels' launches and the bytes they move, laid out for an
// H100 (TritonDecodeStep), and the ATen operations the step still runs around them (token
// choice and bookkeeping, as the eager step of count_decode_step_ops runs them). A step's
// launches on a GPU are kernels.launches + aten.top_level_compute().
struct DecodeStepLaunches {
  DecodeLaunchCount kernels;
  AtenOpCount aten;
};
DecodeStepLaunches count_decode_step_launches(const ShapeGpt& gpt, const KvCache& cache,
                                              int64_t batch, bool cfg, int64_t total_tokens,
                                              SingleStreamDecode mode);

}  // namespace cube3d
