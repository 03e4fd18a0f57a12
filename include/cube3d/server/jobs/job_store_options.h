// A job store's bounds (the `jobs:` section's result_ttl_s, max_result_bytes, max_jobs_per_key,
// max_jobs, max_wait_ms and poll_after_ms): their own header so that the server config embeds
// them (config/server_config.h) without the API's messages, and the defaults live in one place.
#pragma once

#include <cstdint>

namespace cube3d {

struct JobStoreOptions {
  // How long an ended job is kept (jobs.result_ttl_s, in milliseconds so that tests can use a
  // few of them).
  int64_t result_ttl_ms = 600'000;
  // The results of SUCCEEDED jobs held, by ByteSizeLong(); beyond it the owner holding the most
  // gives up its least recently finished or fetched result.
  int64_t max_result_bytes = int64_t{256} << 20;
  int64_t max_jobs_per_key = 64;  // open (QUEUED or RUNNING) jobs per owner
  // Records of all kinds. At the limit create() evicts the oldest ended job of the owner holding
  // the most records, and refuses when every record is open.
  int64_t max_jobs = 100'000;
  int64_t max_wait_ms = 30'000;   // long-poll cap
  int64_t poll_after_ms = 1'000;  // the hint in QUEUED and RUNNING answers
  // Expired and evicted jobs remembered (id, owner, why, when) so that their NOT_FOUND says why;
  // beyond it the oldest are forgotten and answer as unknown (the Redis store keeps each for
  // result_ttl_ms instead).
  int64_t max_tombstones = 65'536;
  bool operator==(const JobStoreOptions&) const = default;
};

}  // namespace cube3d
