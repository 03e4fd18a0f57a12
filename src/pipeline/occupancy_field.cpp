#include "cube3d/pipeline/occupancy_field.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "cube3d/core/clock.h"
#include "cube3d/core/error.h"
#include "cube3d/mesh/grid.h"

namespace cube3d {

bool parse_occupancy_mode(const std::string& text, const std::string& field) {
  if (text == "hierarchical") return true;
  if (text == "dense") return false;
  throw invalid_argument(field + ": '" + text + "' is not dense or hierarchical");
}

std::string occupancy_mode_name(const OccupancySamplingOptions& sampling) {
  return sampling.hierarchical ? "hierarchical" : "dense";
}

namespace {

// Evaluates the points whose flat indices `indices(start, count)` gives, for starts in
// [0, total), in chunks, into one device buffer; returns it (float32 [total] on the device).
class ChunkedQuery {
 public:
  ChunkedQuery(const Engine& engine, const at::Tensor& latents, int64_t n, int64_t chunk,
               const std::function<bool()>& should_stop)
      : engine_(engine),
        context_(engine.occupancy_context(latents)),
        axis_(engine.grid_axis(n)),
        n_(n),
        chunk_(chunk),
        should_stop_(should_stop) {}

  template <typename Indices, typename AfterChunk>
  at::Tensor run(int64_t total, const Indices& indices, const AfterChunk& after_chunk) const {
    at::Tensor values = at::empty({total}, axis_.options().dtype(at::kFloat));
    for (int64_t start = 0; start < total; start += chunk_) {
      if (should_stop_ && should_stop_()) throw cancelled("occupancy evaluation stopped");
      const int64_t count = std::min(chunk_, total - start);
      const at::Tensor idx = indices(start, count);  // int64 [count] on the device
      // Flat index -> (i, j, k), x-major: index = (i * n + j) * n + k.
      const at::Tensor points =
          at::stack({axis_.index({idx.div(n_ * n_, "floor")}),
                     axis_.index({idx.div(n_, "floor") % n_}), axis_.index({idx % n_})},
                    -1)
              .unsqueeze(0);
      values.narrow(0, start, count).copy_(engine_.occupancy(context_, points).squeeze(0));
      after_chunk(start + count);
    }
    return values;
  }

  at::Device device() const { return axis_.device(); }

 private:
  const Engine& engine_;
  const ShapeDecoder::LatentKv context_;
  const at::Tensor axis_;
  const int64_t n_;
  const int64_t chunk_;
  const std::function<bool()>& should_stop_;
};

}  // namespace

OccupancyField evaluate_occupancy(const Engine& engine, const at::Tensor& latents,
                                  int64_t resolution_base, const OccupancyOptions& options,
                                  const std::function<void(const OccupancyProgress&)>& on_progress,
                                  const std::function<bool()>& should_stop) {
  if (latents.dim() != 3 || latents.size(0) != 1) {
    throw invalid_argument("occupancy: expects the latents of one shape [1, T, W]");
  }
  const auto start = SteadyClock::now();
  OccupancyField field;
  const int64_t n = grid_points_per_axis(resolution_base);
  field.points_per_axis = n;
  const int64_t chunk =
      options.chunk_points > 0 ? options.chunk_points : engine.occupancy_chunk_points();
  const ChunkedQuery query(engine, latents, n, chunk, should_stop);
  const auto long_options = at::TensorOptions().dtype(at::kLong).device(query.device());

  const int64_t coarsest = std::min(options.sampling.coarsest_resolution_base, resolution_base);
  OccupancyProgress progress;
  progress.levels_total = options.sampling.hierarchical ? resolution_base - coarsest + 1 : 1;
  int64_t call_points = 0;  // points of the evaluator call in progress
  const auto report = [&](int64_t done_in_call) {
    if (!on_progress) return;
    OccupancyProgress p = progress;
    p.points_done += done_in_call;
    // The call's last chunk finishes its level.
    if (done_in_call == call_points) p.levels_done = std::min(p.levels_done + 1, p.levels_total);
    on_progress(p);
  };

  if (!options.sampling.hierarchical) {
    // Dense: the indices are a range, made per chunk on the device (no N^3 index array).
    const int64_t total = n * n * n;
    progress.points_planned = total;
    call_points = total;
    const at::Tensor values = query.run(
        total, [&](int64_t s, int64_t count) { return at::arange(s, s + count, long_options); },
        report);
    field.values.resize(static_cast<size_t>(total));
    at::from_blob(field.values.data(), {total}, at::kFloat).copy_(values);
    field.report.points_evaluated = total;
    field.report.dense_points = total;
    field.report.points_per_level = {total};
    field.report.evaluator_calls = 1;
    progress.points_done = total;
    progress.levels_done = 1;
  } else {
    const OccupancyEvaluator evaluate = [&](std::span<const int64_t> flat, std::span<float> out) {
      const int64_t count = static_cast<int64_t>(flat.size());
      progress.points_planned = progress.points_done + count;
      call_points = count;
      // One copy of the level's indices to the device and one copy of its values back.
      const at::Tensor host_indices =
          at::from_blob(const_cast<int64_t*>(flat.data()), {count}, at::kLong);
      const at::Tensor indices = host_indices.to(long_options.device());
      const at::Tensor values = query.run(
          count, [&](int64_t s, int64_t c) { return indices.narrow(0, s, c); }, report);
      at::from_blob(out.data(), {count}, at::kFloat).copy_(values);
      progress.points_done += count;
      progress.levels_done = std::min(progress.levels_done + 1, progress.levels_total);
    };
    field.values = sample_occupancy(resolution_base, evaluate, options.sampling, &field.report);
    // A field without a surface at the coarsest level ends there: report the whole run done.
    if (progress.levels_done < progress.levels_total) {
      progress.levels_done = progress.levels_total;
      if (on_progress) on_progress(progress);
    }
  }
  field.ms = ms_since(start);
  return field;
}

}  // namespace cube3d
