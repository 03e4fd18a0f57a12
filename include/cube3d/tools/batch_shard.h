// The shard rule of cube3d-generate's batch mode (--prompts-file): which lines of the prompts
// file one process handles, so that N processes (a Kubernetes Indexed Job's pods) share a file
// without talking to each other. Line L (1-based, counting every line of the file: blank lines
// and comments too, so that a line's shard never depends on what the others hold) belongs to
// shard I of N when (L - 1) % N == I. Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace cube3d {

struct BatchShard {
  int64_t index = 0;  // I, 0 <= I < N
  int64_t count = 1;  // N >= 1

  bool owns(int64_t line_number) const { return (line_number - 1) % count == index; }
  std::string name() const;  // "I/N"
  bool operator==(const BatchShard&) const = default;
};

// The largest N accepted (far more pods than any Indexed Job runs).
inline constexpr int64_t kMaxShardCount = 1'000'000;

// Parses "I/N" (decimal, 0 <= I < N <= kMaxShardCount). Throws invalid_argument naming `what`.
BatchShard parse_batch_shard(const std::string& text, const std::string& what = "--shard");

// Where the shard comes from, in order:
//   --shard I/N (`shard`); then --shard-count or CUBE3D_SHARD_COUNT may only repeat N;
//   else JOB_COMPLETION_INDEX (`job_index`, the Indexed Job's pod index) as I, with N from
//   --shard-count (`shard_count`), else CUBE3D_SHARD_COUNT (`env_shard_count`);
//   else --shard-count / CUBE3D_SHARD_COUNT alone is an error (no index);
//   else the whole file: 0/1.
// Unset and empty values count as absent. Throws invalid_argument naming the flag or variable.
BatchShard resolve_batch_shard(const std::optional<std::string>& shard,
                               const std::optional<std::string>& shard_count,
                               const std::optional<std::string>& job_index,
                               const std::optional<std::string>& env_shard_count);

}  // namespace cube3d
