// Batch buckets: the fixed batch sizes the engine runs (each one may own a captured CUDA graph
// and a KV-cache slab), and the pure rule that picks one for the requests that are waiting.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cube3d/core/constants.h"

namespace cube3d {

// Throws invalid_argument unless `buckets` is non-empty, strictly increasing (sorted, no
// duplicates) and every size lies in [1, kMaxBatchBucket]. The message lists the offending value
// so that a bad config file is easy to fix.
void validate_batch_buckets(std::span<const int64_t> buckets);

// The smallest bucket that holds `waiting` requests, or the largest bucket when none does (then
// only that many requests run now and the rest wait for the next batch). Works on any order of
// `buckets`; requires waiting >= 1 and a non-empty `buckets` (throws invalid_argument otherwise).
int64_t choose_bucket(int64_t waiting, std::span<const int64_t> buckets);

}  // namespace cube3d
