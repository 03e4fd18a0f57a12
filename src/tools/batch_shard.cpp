#include "cube3d/tools/batch_shard.h"

#include <cctype>

#include "cube3d/core/error.h"

namespace cube3d {
namespace {

// A decimal number of at most 7 digits (kMaxShardCount), or nullopt.
std::optional<int64_t> small_number(const std::string& text) {
  if (text.empty() || text.size() > 7) return std::nullopt;
  int64_t value = 0;
  for (const char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

int64_t parse_count(const std::string& text, const std::string& what) {
  const std::optional<int64_t> n = small_number(text);
  if (!n || *n < 1 || *n > kMaxShardCount) {
    throw invalid_argument(what + ": expected a shard count in [1, " +
                           std::to_string(kMaxShardCount) + "], got '" + text + "'");
  }
  return *n;
}

std::optional<std::string> present(const std::optional<std::string>& value) {
  if (value && !value->empty()) return value;
  return std::nullopt;
}

}  // namespace

std::string BatchShard::name() const { return std::to_string(index) + "/" + std::to_string(count); }

BatchShard parse_batch_shard(const std::string& text, const std::string& what) {
  const size_t slash = text.find('/');
  const std::string expected =
      what + ": expected I/N with 0 <= I < N (e.g. 0/4), got '" + text + "'";
  if (slash == std::string::npos) throw invalid_argument(expected);
  const std::optional<int64_t> index = small_number(text.substr(0, slash));
  const std::optional<int64_t> count = small_number(text.substr(slash + 1));
  if (!index || !count || *count < 1) throw invalid_argument(expected);
  if (*count > kMaxShardCount) {
    throw invalid_argument(what + ": N is at most " + std::to_string(kMaxShardCount) + ", got '" +
                           text + "'");
  }
  if (*index >= *count) {
    throw invalid_argument(what + ": the index I must be below the count N (0 <= I < N), got '" +
                           text + "'");
  }
  return {*index, *count};
}

BatchShard resolve_batch_shard(const std::optional<std::string>& shard_flag,
                               const std::optional<std::string>& shard_count_flag,
                               const std::optional<std::string>& job_index_env,
                               const std::optional<std::string>& env_shard_count_env) {
  const auto shard = present(shard_flag);
  const auto shard_count = present(shard_count_flag);
  const auto job_index = present(job_index_env);
  const auto env_count = present(env_shard_count_env);
  if (shard) {
    const BatchShard s = parse_batch_shard(*shard, "--shard");
    if (shard_count && parse_count(*shard_count, "--shard-count") != s.count) {
      throw invalid_argument("--shard-count " + *shard_count + " disagrees with --shard " + *shard +
                             " (give one of them)");
    }
    return s;
  }
  const std::string count_source = shard_count ? "--shard-count" : "CUBE3D_SHARD_COUNT";
  if (job_index) {
    const auto& count_text = shard_count ? shard_count : env_count;
    if (!count_text) {
      throw invalid_argument(
          "JOB_COMPLETION_INDEX is set (" + *job_index +
          ") but the shard count is not: give --shard-count N or CUBE3D_SHARD_COUNT (the "
          "Indexed Job's completions), or --shard I/N");
    }
    const int64_t count = parse_count(*count_text, count_source);
    const std::optional<int64_t> index = small_number(*job_index);
    if (!index) {
      throw invalid_argument(
          "JOB_COMPLETION_INDEX: expected a shard index (a whole number >= 0), "
          "got '" +
          *job_index + "'");
    }
    if (*index >= count) {
      throw invalid_argument("JOB_COMPLETION_INDEX " + *job_index +
                             " is not below the shard count " + std::to_string(count) + " (" +
                             count_source + ")");
    }
    return {*index, count};
  }
  if (shard_count) {
    parse_count(*shard_count, "--shard-count");
    throw invalid_argument(
        "--shard-count needs a shard index: --shard I/N, or JOB_COMPLETION_INDEX in the "
        "environment");
  }
  // CUBE3D_SHARD_COUNT alone (a pod template without the Indexed Job's index) is ignored only
  // when it says 1; otherwise every pod would silently run the whole file.
  if (env_count && parse_count(*env_count, "CUBE3D_SHARD_COUNT") != 1) {
    throw invalid_argument(
        "CUBE3D_SHARD_COUNT is set (" + *env_count +
        ") but JOB_COMPLETION_INDEX is not: give --shard I/N, or run as an Indexed Job");
  }
  return {0, 1};
}

}  // namespace cube3d
