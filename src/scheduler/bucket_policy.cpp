#include "cube3d/scheduler/bucket_policy.h"

#include <algorithm>
#include <limits>
#include <string>

#include "cube3d/core/error.h"

namespace cube3d {
namespace {

std::string to_list(std::span<const int64_t> values) {
  std::string text = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(values[i]);
  }
  return text + "]";
}

}  // namespace

void validate_batch_buckets(std::span<const int64_t> buckets) {
  if (buckets.empty()) throw invalid_argument("batch_buckets: must list at least one batch size");
  for (size_t i = 0; i < buckets.size(); ++i) {
    const int64_t size = buckets[i];
    if (size < 1 || size > kMaxBatchBucket) {
      throw invalid_argument("batch_buckets " + to_list(buckets) + ": size " +
                             std::to_string(size) + " is outside [1, " +
                             std::to_string(kMaxBatchBucket) + "]");
    }
    if (i > 0 && size <= buckets[i - 1]) {
      throw invalid_argument("batch_buckets " + to_list(buckets) +
                             ": sizes must be strictly increasing (sorted, no duplicates)");
    }
  }
}

int64_t choose_bucket(int64_t waiting, std::span<const int64_t> buckets) {
  if (buckets.empty()) throw invalid_argument("choose_bucket: no batch buckets");
  if (waiting < 1) {
    throw invalid_argument("choose_bucket: waiting must be >= 1, got " + std::to_string(waiting));
  }
  int64_t smallest_fit = std::numeric_limits<int64_t>::max();
  for (const int64_t bucket : buckets) {
    if (bucket >= waiting) smallest_fit = std::min(smallest_fit, bucket);
  }
  if (smallest_fit != std::numeric_limits<int64_t>::max()) return smallest_fit;
  return *std::max_element(buckets.begin(), buckets.end());
}

}  // namespace cube3d
