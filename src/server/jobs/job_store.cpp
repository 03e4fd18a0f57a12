#include "cube3d/server/jobs/job_store.h"

#include <sys/random.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <vector>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "cube3d/core/error.h"
#include "cube3d/core/printable.h"
#include "cube3d/core/sha256.h"

namespace cube3d {
namespace {

constexpr size_t kIdDigits = 40;
constexpr size_t kTagDigits = 8;

void random_bytes(uint8_t* out, size_t size) {
  while (size > 0) {
    const ssize_t got = ::getrandom(out, size, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw internal_error(std::string("getrandom failed: ") + std::strerror(errno));
    }
    out += got;
    size -= static_cast<size_t>(got);
  }
}

std::string random_hex(size_t bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::vector<uint8_t> raw(bytes);
  random_bytes(raw.data(), raw.size());
  std::string hex;
  hex.reserve(2 * bytes);
  for (const uint8_t byte : raw) {
    hex += kDigits[byte >> 4];
    hex += kDigits[byte & 0xf];
  }
  return hex;
}

std::string utc_text(int64_t unix_ms) {
  const time_t seconds = static_cast<time_t>(unix_ms / 1000);
  tm fields{};
  gmtime_r(&seconds, &fields);
  char text[32];
  const size_t length = strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &fields);
  return std::string(text, length);
}

std::string duration_text(int64_t ms) {
  return ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms";
}

}  // namespace

std::string idempotency_digest(const v1::GenerateMeshRequest& request) {
  v1::GenerateMeshRequest without_id = request;
  without_id.clear_request_id();
  // Deterministic serialization: the same fields give the same bytes (the request has no map).
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    without_id.SerializeToCodedStream(&coded);
  }  // flushed into `bytes` here
  return hex_of(sha256(bytes));
}

Status idempotency_conflict(const std::string& key, const std::string& id) {
  return Status(ErrorCode::kAlreadyExists,
                "idempotency key \"" + printable(key, 100) + "\" names job " + id +
                    ", submitted with another request: a key names one request (use a new key "
                    "for a new request)");
}

void validate_job_limits(const JobStoreOptions& l) {
  constexpr int64_t kYearMs = int64_t{366} * 24 * 3600 * 1000;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  require_in_range("jobs.result_ttl_ms", l.result_ttl_ms, 0, kYearMs);
  require_in_range("jobs.max_result_bytes", l.max_result_bytes, 0, kMax);
  require_in_range("jobs.max_jobs_per_key", l.max_jobs_per_key, 1, kMax);
  require_in_range("jobs.max_jobs", l.max_jobs, 1, kMax);
  require_in_range("jobs.max_wait_ms", l.max_wait_ms, 0, kYearMs);
  require_in_range("jobs.poll_after_ms", l.poll_after_ms, 0, std::numeric_limits<uint32_t>::max());
}

std::string make_job_tag() { return random_hex(kTagDigits / 2); }

std::string make_job_id(const std::string& tag) {
  return tag + random_hex((kIdDigits - kTagDigits) / 2);
}

bool valid_job_id(const std::string& id) {
  return id.size() == kIdDigits && std::all_of(id.begin(), id.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

Status invalid_job_id(const std::string& id) {
  return {ErrorCode::kInvalidArgument,
          "id: job id must be 40 hex digits (lowercase), got \"" + printable(id, 48) + "\""};
}

Status job_gone(const std::string& id, int64_t finished_unix_ms, JobGone why,
                int64_t result_ttl_ms) {
  std::string message = "job " + id + " ended at " + utc_text(finished_unix_ms) + " and its ";
  switch (why) {
    case JobGone::kExpired:
      message += "result expired after jobs.result_ttl_s (" + duration_text(result_ttl_ms) + ")";
      break;
    case JobGone::kEvictedBytes:
      message += "result was evicted to keep finished jobs within jobs.max_result_bytes";
      break;
    case JobGone::kEvictedJobs:
      message += "record was evicted to keep the server within jobs.max_jobs";
      break;
  }
  return {ErrorCode::kNotFound, message + "; submit it again"};
}

}  // namespace cube3d
