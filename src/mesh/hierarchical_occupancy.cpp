#include "cube3d/mesh/hierarchical_occupancy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <utility>

#include "cube3d/core/constants.h"
#include "cube3d/core/error.h"
#include "cube3d/mesh/grid.h"

namespace cube3d {
namespace {

constexpr int64_t kMaxDilation = int64_t{1} << kMaxResolutionBase;
constexpr int64_t kMaxRepairPasses = int64_t{1} << kMaxResolutionBase;

// Cell marks of one level, one byte per cell (x-major, `cells` per axis).
constexpr uint8_t kUnmarked = 0;
constexpr uint8_t kMarked = 1;   // its points are evaluated (or already exact)
constexpr uint8_t kPending = 2;  // marked; its points still have to be collected

void validate_sampling(int64_t resolution_base, const OccupancySamplingOptions& options) {
  validate_resolution_base(resolution_base, kMaxResolutionBase);
  if (options.coarsest_resolution_base < 1) {
    throw invalid_argument("occupancy sampling: coarsest_resolution_base " +
                           std::to_string(options.coarsest_resolution_base) +
                           " is below 1 (it is clamped to resolution_base from above)");
  }
  if (options.dilation < 0 || options.dilation > kMaxDilation) {
    throw invalid_argument("occupancy sampling: dilation " + std::to_string(options.dilation) +
                           " is outside [0, " + std::to_string(kMaxDilation) + "] cells");
  }
  if (options.max_repair_passes < 0 || options.max_repair_passes > kMaxRepairPasses) {
    throw invalid_argument("occupancy sampling: max_repair_passes " +
                           std::to_string(options.max_repair_passes) + " is outside [0, " +
                           std::to_string(kMaxRepairPasses) + "]");
  }
  if (!std::isfinite(options.level)) {
    throw invalid_argument("occupancy sampling: level " + std::to_string(options.level) +
                           " is not finite");
  }
}

// One bit per point of the finest grid: whether the point holds an evaluated value.
class Bitset {
 public:
  explicit Bitset(int64_t size) : words_(static_cast<std::size_t>((size + 63) / 64), 0) {}

  // Sets the bit; returns whether it was clear.
  bool set(int64_t n) {
    uint64_t& w = words_[word(n)];
    const uint64_t bit = uint64_t{1} << (n & 63);
    const bool was_clear = (w & bit) == 0;
    w |= bit;
    return was_clear;
  }

 private:
  static std::size_t word(int64_t n) { return static_cast<std::size_t>(n >> 6); }
  std::vector<uint64_t> words_;
};

// out[t] = in[t - 1] | in[t] | in[t + 1] along an axis whose neighbours are `step` bytes apart,
// for `count` positions; the arrays hold [count][step]. Vectorizes: every operand is contiguous.
void dilate_axis_by_one(const uint8_t* in, uint8_t* out, int64_t count, int64_t step) {
  for (int64_t t = 0; t < count; ++t) {
    const uint8_t* centre = in + t * step;
    const uint8_t* below = t > 0 ? centre - step : centre;
    const uint8_t* above = t + 1 < count ? centre + step : centre;
    uint8_t* row = out + t * step;
    for (int64_t q = 0; q < step; ++q) {
      row[q] = static_cast<uint8_t>(below[q] | centre[q] | above[q]);
    }
  }
}

// The same with the last index at most `radius` ahead kept per line: O(1) per element whatever
// the radius.
void dilate_axis(const uint8_t* in, uint8_t* out, int64_t count, int64_t step, int64_t radius,
                 std::vector<int64_t>& last) {
  last.assign(static_cast<std::size_t>(step), std::numeric_limits<int64_t>::min() / 2);
  const auto take = [&](int64_t s) {
    const uint8_t* row = in + s * step;
    for (int64_t q = 0; q < step; ++q) {
      if (row[q] != 0) {
        last[static_cast<std::size_t>(q)] = s;
      }
    }
  };
  for (int64_t s = 0; s < std::min(radius, count); ++s) {
    take(s);
  }
  for (int64_t t = 0; t < count; ++t) {
    if (t + radius < count) {
      take(t + radius);
    }
    uint8_t* row = out + t * step;
    for (int64_t q = 0; q < step; ++q) {
      row[q] = last[static_cast<std::size_t>(q)] >= t - radius;
    }
  }
}

// Boolean dilation of a cubic 0 / 1 byte mask (`n` per axis) by `radius` cells along each axis
// (a (2 radius + 1)^3 box), in place.
void dilate(std::vector<uint8_t>& mask, int64_t n, int64_t radius, std::vector<uint8_t>& scratch,
            std::vector<int64_t>& last) {
  constexpr int64_t kRepeatUpTo = 3;  // beyond this, one sweep per axis beats repeated passes
  radius = std::min(radius, n - 1);
  if (radius == 0) {
    return;
  }
  scratch.resize(mask.size());
  const int64_t repeats = radius <= kRepeatUpTo ? radius : 1;
  // The mask as [outer][n][inner] with the dilated axis in the middle.
  for (const int64_t inner : {n * n, n, int64_t{1}}) {
    const int64_t outer = n * n / inner;
    for (int64_t pass = 0; pass < repeats; ++pass) {
      for (int64_t o = 0; o < outer; ++o) {
        const uint8_t* in = mask.data() + o * n * inner;
        uint8_t* out = scratch.data() + o * n * inner;
        if (inner == 1) {
          // Along the contiguous axis: shifted copies of the whole line.
          if (radius <= kRepeatUpTo) {
            out[0] = static_cast<uint8_t>(in[0] | (n > 1 ? in[1] : 0));
            for (int64_t t = 1; t + 1 < n; ++t) {
              out[t] = static_cast<uint8_t>(in[t - 1] | in[t] | in[t + 1]);
            }
            out[n - 1] = static_cast<uint8_t>(in[n - 1] | in[n - 2]);
          } else {
            dilate_axis(in, out, n, 1, radius, last);
          }
        } else if (radius <= kRepeatUpTo) {
          dilate_axis_by_one(in, out, n, inner);
        } else {
          dilate_axis(in, out, n, inner, radius, last);
        }
      }
      mask.swap(scratch);
    }
  }
}

// dst[z * step] = (a[z * step] + b[z * step]) / 2 for z in [0, count): a midpoint, which lies in
// [min(a, b), max(a, b)] (rounding is monotonic), so it keeps the side of the level both share.
void average(float* dst, const float* a, const float* b, int64_t count, int64_t step) {
  if (step == 1) {  // the finest level: contiguous, vectorizes
    for (int64_t z = 0; z < count; ++z) {
      dst[z] = 0.5f * (a[z] + b[z]);
    }
    return;
  }
  for (int64_t z = 0; z < count; ++z) {
    dst[z * step] = 0.5f * (a[z * step] + b[z * step]);
  }
}

class Sampler {
 public:
  Sampler(int64_t resolution_base, const OccupancyEvaluator& evaluate,
          const OccupancySamplingOptions& options, OccupancySamplingReport& report)
      : r_(resolution_base),
        n_(grid_points_per_axis(resolution_base)),
        evaluate_(evaluate),
        options_(options),
        report_(report),
        field_(static_cast<std::size_t>(n_ * n_ * n_)),
        exact_(n_ * n_ * n_) {}

  std::vector<float> run(int64_t r0) {
    evaluate_coarsest(r0);
    for (int64_t level = r0; level < r_; ++level) {
      refine(level);
    }
    return std::move(field_);
  }

 private:
  int64_t flat(int64_t i, int64_t j, int64_t k) const { return (i * n_ + j) * n_ + k; }
  bool inside(float v) const { return v > options_.level; }

  // Evaluates `points_` (already marked exact) and stores their values.
  void evaluate_points(bool repair) {
    if (points_.empty()) {
      return;
    }
    values_.resize(points_.size());
    evaluate_(std::span<const int64_t>(points_), std::span<float>(values_));
    for (std::size_t p = 0; p < points_.size(); ++p) {
      field_[static_cast<std::size_t>(points_[p])] = values_[p];
    }
    const auto count = static_cast<int64_t>(points_.size());
    report_.points_evaluated += count;
    report_.points_per_level.back() += count;
    ++report_.evaluator_calls;
    report_.repair_passes += repair ? 1 : 0;
    level_points_.insert(level_points_.end(), points_.begin(), points_.end());
    level_values_.insert(level_values_.end(), values_.begin(), values_.end());
  }

  void evaluate_coarsest(int64_t r0) {
    const int64_t stride = int64_t{1} << (r_ - r0);
    const int64_t count = (int64_t{1} << r0) + 1;
    report_.points_per_level.push_back(0);
    points_.clear();
    points_.reserve(static_cast<std::size_t>(count * count * count));
    for (int64_t i = 0; i < count; ++i) {
      for (int64_t j = 0; j < count; ++j) {
        for (int64_t k = 0; k < count; ++k) {
          const int64_t p = flat(i * stride, j * stride, k * stride);
          exact_.set(p);
          points_.push_back(p);
        }
      }
    }
    evaluate_points(false);
  }

  // From level L (cells of `stride` finest steps) to level L + 1.
  void refine(int64_t level) {
    const int64_t cells = int64_t{1} << level;
    const int64_t stride = int64_t{1} << (r_ - level);
    report_.points_per_level.push_back(0);
    level_points_.clear();
    level_values_.clear();

    mark_crossing_cells(cells, stride);
    dilate(marks_, cells, options_.dilation, scratch_, last_);
    for (uint8_t& m : marks_) {
      m = m != 0 ? kPending : kUnmarked;
    }
    for (int64_t pass = 0;; ++pass) {
      collect_pending_points(cells, stride);
      const bool evaluated = !points_.empty();
      evaluate_points(pass > 0);
      if (pass == 0 || evaluated) {
        fill(cells, stride);
      }
      if (pass == options_.max_repair_passes || !mark_leaks(cells, stride)) {
        break;
      }
    }
  }

  // Marks the cells of the current level whose corners are not all on one side of the level.
  void mark_crossing_cells(int64_t cells, int64_t stride) {
    const int64_t count = cells + 1;
    signs_.resize(static_cast<std::size_t>(count * count * count));
    std::size_t at = 0;
    for (int64_t i = 0; i < count; ++i) {
      for (int64_t j = 0; j < count; ++j) {
        const float* row = field_.data() + flat(i * stride, j * stride, 0);
        for (int64_t k = 0; k < count; ++k) {
          signs_[at++] = inside(row[k * stride]) ? 1 : 0;
        }
      }
    }
    marks_.assign(static_cast<std::size_t>(cells * cells * cells), kUnmarked);
    const int64_t dy = count, dx = count * count;
    for (int64_t a = 0; a < cells; ++a) {
      for (int64_t b = 0; b < cells; ++b) {
        const uint8_t* s = signs_.data() + a * dx + b * dy;
        uint8_t* m = marks_.data() + (a * cells + b) * cells;
        for (int64_t c = 0; c < cells; ++c) {
          const int any = s[c] | s[c + 1] | s[c + dy] | s[c + dy + 1] | s[c + dx] | s[c + dx + 1] |
                          s[c + dx + dy] | s[c + dx + dy + 1];
          const int all = s[c] & s[c + 1] & s[c + dy] & s[c + dy + 1] & s[c + dx] & s[c + dx + 1] &
                          s[c + dx + dy] & s[c + dx + dy + 1];
          m[c] = any != all ? kMarked : kUnmarked;
        }
      }
    }
  }

  // The not yet evaluated points of the next level in the closure of every pending cell; pending
  // cells become marked.
  void collect_pending_points(int64_t cells, int64_t stride) {
    const int64_t half = stride / 2;
    points_.clear();
    std::size_t at = 0;
    for (int64_t a = 0; a < cells; ++a) {
      for (int64_t b = 0; b < cells; ++b) {
        for (int64_t c = 0; c < cells; ++c, ++at) {
          if (marks_[at] != kPending) {
            continue;
          }
          marks_[at] = kMarked;
          const int64_t origin = flat(a * stride, b * stride, c * stride);
          for (int64_t x = 0; x < 3; ++x) {
            for (int64_t y = 0; y < 3; ++y) {
              for (int64_t z = 0; z < 3; ++z) {
                const int64_t p = origin + flat(x * half, y * half, z * half);
                if (exact_.set(p)) {
                  points_.push_back(p);
                }
              }
            }
          }
        }
      }
    }
  }

  // Fills every new point of the next level (an odd coordinate in its units) with the trilinear
  // interpolation of the current level's points around it, as three separable passes of midpoint
  // averages (each within [min, max] of its inputs, so a cell whose corners lie on one side of
  // the level fills on that side), then puts this level's evaluated values back.
  void fill(int64_t cells, int64_t stride) {
    const int64_t half = stride / 2;
    const int64_t count = 2 * cells + 1;  // points per axis of the next level
    const int64_t sz = half, sy = half * n_, sx = half * n_ * n_;
    float* f = field_.data();
    for (int64_t x = 0; x < count; x += 2) {
      for (int64_t y = 0; y < count; y += 2) {
        float* row = f + x * sx + y * sy;
        average(row + sz, row, row + 2 * sz, cells, 2 * sz);
      }
      for (int64_t y = 1; y < count; y += 2) {
        float* row = f + x * sx + y * sy;
        average(row, row - sy, row + sy, count, sz);
      }
    }
    for (int64_t x = 1; x < count; x += 2) {
      for (int64_t y = 0; y < count; ++y) {
        float* row = f + x * sx + y * sy;
        average(row, row - sx, row + sx, count, sz);
      }
    }
    for (std::size_t p = 0; p < level_points_.size(); ++p) {
      f[level_points_[p]] = level_values_[p];
    }
  }

  // After a level is filled: marks (pending, with the dilation) every unmarked cell next to a
  // marked one whose next-level points lie on both sides of the level, i.e. where the refined
  // surface runs into filled values. Returns whether it marked any.
  bool mark_leaks(int64_t cells, int64_t stride) {
    const int64_t half = stride / 2;
    near_.resize(marks_.size());
    std::transform(marks_.begin(), marks_.end(), near_.begin(),
                   [](uint8_t m) { return static_cast<uint8_t>(m != kUnmarked); });
    dilate(near_, cells, 1, scratch_, last_);
    bool any = false;
    std::size_t at = 0;
    for (int64_t a = 0; a < cells; ++a) {
      for (int64_t b = 0; b < cells; ++b) {
        for (int64_t c = 0; c < cells; ++c, ++at) {
          if (near_[at] == 0 || marks_[at] != kUnmarked) {
            near_[at] = 0;
            continue;
          }
          const int64_t origin = flat(a * stride, b * stride, c * stride);
          int sides = 0;
          for (int64_t x = 0; x < 3 && sides != 3; ++x) {
            for (int64_t y = 0; y < 3; ++y) {
              for (int64_t z = 0; z < 3; ++z) {
                sides |= inside(field_[static_cast<std::size_t>(
                             origin + flat(x * half, y * half, z * half))])
                             ? 1
                             : 2;
              }
            }
          }
          near_[at] = sides == 3;
          any |= sides == 3;
        }
      }
    }
    if (!any) {
      return false;
    }
    dilate(near_, cells, options_.dilation, scratch_, last_);
    for (std::size_t c = 0; c < marks_.size(); ++c) {
      if (near_[c] != 0 && marks_[c] == kUnmarked) {
        marks_[c] = kPending;
      }
    }
    return true;
  }

  const int64_t r_;
  const int64_t n_;
  const OccupancyEvaluator& evaluate_;
  const OccupancySamplingOptions& options_;
  OccupancySamplingReport& report_;
  std::vector<float> field_;
  Bitset exact_;
  std::vector<int64_t> points_;  // one evaluator call
  std::vector<float> values_;
  std::vector<int64_t> level_points_;  // every point evaluated at the current level
  std::vector<float> level_values_;
  std::vector<uint8_t> signs_, marks_, near_, scratch_;
  std::vector<int64_t> last_;
};

std::vector<float> sample_dense(int64_t resolution_base, const OccupancyEvaluator& evaluate,
                                OccupancySamplingReport& report) {
  const int64_t n = grid_points_per_axis(resolution_base);
  const int64_t total = n * n * n;
  std::vector<float> field(static_cast<std::size_t>(total));
  {
    std::vector<int64_t> indices(static_cast<std::size_t>(total));
    std::iota(indices.begin(), indices.end(), int64_t{0});
    evaluate(std::span<const int64_t>(indices), std::span<float>(field));
  }
  report.points_evaluated = total;
  report.points_per_level = {total};
  report.evaluator_calls = 1;
  return field;
}

}  // namespace

std::vector<float> sample_occupancy(int64_t resolution_base, const OccupancyEvaluator& evaluate,
                                    const OccupancySamplingOptions& options,
                                    OccupancySamplingReport* report) {
  validate_sampling(resolution_base, options);
  if (!evaluate) {
    throw invalid_argument("occupancy sampling: no evaluator");
  }
  OccupancySamplingReport local;
  const int64_t n = grid_points_per_axis(resolution_base);
  local.dense_points = n * n * n;
  const int64_t r0 = std::min(options.coarsest_resolution_base, resolution_base);
  std::vector<float> field = !options.hierarchical || r0 == resolution_base
                                 ? sample_dense(resolution_base, evaluate, local)
                                 : Sampler(resolution_base, evaluate, options, local).run(r0);
  if (report != nullptr) {
    *report = std::move(local);
  }
  return field;
}

}  // namespace cube3d
