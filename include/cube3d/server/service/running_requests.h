// The works running under a client's request id, per API key: a caller that retries a request
// (its connection broke, it timed out on its side) with the same request_id is attached to the
// work already running for it instead of starting a second one, and a request_id reused for a
// different request while the first still runs is refused (ALREADY_EXISTS). The request is
// told apart by its result key (the effective request and the model), so a retry matches
// whatever defaults the server filled in.
//
// Only ids the client chose are registered (the server's own are unique). Entries end with
// their work: a finished or cancelled work is never found, and expired entries are swept, so
// the table holds at most the works in flight. Two calls with one id that arrive at the same
// instant may both start (each finds nothing yet): a duplicate computation, never a wrong
// answer. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "cube3d/server/service/result_key.h"
#include "cube3d/server/service/shared_work.h"

namespace cube3d {

class RunningRequests {
 public:
  struct Found {
    std::shared_ptr<SharedWork> work;
    bool same_request = false;  // the running work's result key is the caller's
  };

  // The work running now under `request_id` for `scope` (the API key's name), if any.
  std::optional<Found> find(std::string_view scope, std::string_view request_id,
                            const ResultKey& request_key);
  // `work` runs under `request_id` for `scope` from now until it ends.
  void add(std::string_view scope, std::string_view request_id, const ResultKey& request_key,
           const std::shared_ptr<SharedWork>& work);

  size_t size() const;  // entries, live or not yet swept

 private:
  struct Entry {
    ResultKey request_key{};
    std::weak_ptr<SharedWork> work;
  };
  static constexpr int64_t kSweepEvery = 256;  // adds between sweeps of ended entries

  mutable std::mutex mutex_;
  std::map<std::pair<std::string, std::string>, Entry, std::less<>> entries_;
  int64_t adds_since_sweep_ = 0;
};

}  // namespace cube3d
