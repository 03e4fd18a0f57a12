// API keys and per-key quotas (auth.api_keys_file): who may call, and how much.
//
// The keys file lists each client by name with the SHA-256 of its key (the server never holds
// the key itself, and never logs it), and optional limits:
//
//   keys:
//     - name: studio-a                 # shown in logs and metrics, never the key itself
//       sha256: <64 hex digits>        # sha256 of the key: `printf %s "$KEY" | sha256sum`
//       requests_per_minute: 60        # token bucket (burst = one minute's worth); optional
//       max_concurrent: 4              # queued + running; optional
//       shape_tokens_per_minute: 40960 # tokens decoded, guidance rows included; optional
//       occupancy_points_per_minute: 5e7  # occupancy queries of the mesh stage; optional
//       priority: batch                # all of the key's work runs as batch; default interactive
//       per_user:                      # each end user (X-End-User-Id / end-user-id) under the key
//         requests_per_minute: 10
//         max_concurrent: 1
//         shape_tokens_per_minute: 8192
//
// Clients send `authorization: Bearer <key>` (gRPC metadata or HTTP header). admit() answers
// UNAUTHENTICATED for a missing or unknown key and RESOURCE_EXHAUSTED, with the seconds after
// which a retry can succeed and a message naming the limit, over a limit. The work-based buckets
// are checked against what the request will need, at admission or once it is known to compute
// (check_work()), and charged with what it really took once the work is done (charge()), so
// that the bucket may go into debt and the next request waits for it to refill. replace() swaps in
// a re-read file (SIGHUP) without dropping requests: a key that stays keeps its buckets, end users
// and running requests.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "cube3d/core/clock.h"
#include "cube3d/core/sha256.h"  // sha256(): the keys are kept as their digests
#include "cube3d/server/admission/token_bucket.h"

namespace cube3d {

// The limits of each end user under a key (per_user:).
struct PerUserLimits {
  std::optional<double> requests_per_minute;
  std::optional<int64_t> max_concurrent;
  std::optional<double> shape_tokens_per_minute;
  bool operator==(const PerUserLimits&) const = default;
};

struct ApiKey {
  std::string name;
  std::array<uint8_t, 32> sha256{};
  std::optional<double> requests_per_minute;
  std::optional<int64_t> max_concurrent;
  std::optional<double> shape_tokens_per_minute;
  std::optional<double> occupancy_points_per_minute;
  bool batch_only = false;  // `priority: batch`
  std::optional<PerUserLimits> per_user;
};

// End users tracked per key at most: beyond it, the idle end users used longest ago are
// forgotten (they start again with full buckets), so that a flood of made-up ids costs bounded
// memory. An end user with nothing running and full buckets is forgotten at once: its state is
// that of a new one.
inline constexpr size_t kMaxEndUsersPerKey = 100'000;

// Reads and checks a keys file: invalid_argument naming the file and the field (duplicate
// names or hashes, a hash that is not 64 hex digits, limits out of range); not_found for a
// missing file.
std::vector<ApiKey> load_api_keys(const std::string& path);
std::vector<ApiKey> parse_api_keys(const std::string& yaml_text, const std::string& source);

// The key in an `authorization` value: the scheme "Bearer" in any letter case (RFC 9110 makes
// auth schemes case-insensitive), one or more spaces, then the key, visible ASCII only (no
// space, no control byte). nullopt for anything else.
std::optional<std::string_view> bearer_credentials(std::string_view authorization);

class ApiKeys {
 public:
  explicit ApiKeys(std::vector<ApiKey> keys);

  // A request admitted for a key: holds one of the key's concurrent places until destroyed.
  class Ticket {
   public:
    Ticket() = default;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    Ticket(Ticket&&) = default;
    Ticket& operator=(Ticket&&) = default;
    const std::string& key_name() const { return name_; }
    // The key's file says `priority: batch`: its work runs as batch whatever it asks.
    bool batch_only() const { return batch_only_; }

   private:
    friend class ApiKeys;
    std::string name_;
    bool batch_only_ = false;
    std::shared_ptr<void> hold_;  // releases the concurrent places (the key's, the end user's)
  };

  // The work one request will do, against the work-based limits.
  struct Work {
    int64_t shape_tokens = 0;      // it will decode, guidance rows included
    int64_t occupancy_points = 0;  // it is expected to evaluate
  };
  // What one request asks of the limits.
  struct Demand {
    std::string_view end_user;  // its pseudonym (end_user.h); empty: none
    // Unset: the work limits are checked later, with check_work(), once it is known that the
    // request computes (a cache hit or an answer shared with identical work in flight needs
    // none, so it passes a spent work budget).
    std::optional<Work> work;
  };

  // A key's limits and where its buckets stand (GET /v1/usage).
  struct Standing {
    ApiKey key;  // its limits (the hash too: the caller's own)
    int64_t running = 0;
    std::optional<double> requests_left, shape_tokens_left, occupancy_points_left;
    size_t end_users_tracked = 0;
  };

  struct Refusal {
    bool unauthenticated = false;  // else over a limit (RESOURCE_EXHAUSTED)
    std::string message;
    int64_t retry_after_s = 0;  // over a limit: when a retry can succeed
  };

  // `authorization`: the header's or metadata's value ("Bearer <key>"), empty when absent.
  // Returns the ticket, or why not.
  // Nothing is taken when anything refuses.
  std::variant<Ticket, Refusal> admit(std::string_view authorization, const Demand& demand,
                                      SteadyClock::time_point now = SteadyClock::now());
  std::variant<Ticket, Refusal> admit(std::string_view authorization,
                                      SteadyClock::time_point now = SteadyClock::now()) {
    return admit(authorization, Demand{}, now);
  }

  // The work limits of an admitted request of key `key_name` (and end user): why it may not
  // compute `work` now, or nullopt. Takes nothing (the work is charged when done). A key gone
  // since (replace()) refuses nothing.
  std::optional<Refusal> check_work(std::string_view key_name, std::string_view end_user,
                                    const Work& work,
                                    SteadyClock::time_point now = SteadyClock::now());

  // The work a request of key `key_name` (and end user, a pseudonym or empty) really took,
  // once it is done: taken from the key's and the end user's work buckets. A key gone since
  // (replace()) is charged nothing.
  void charge(std::string_view key_name, std::string_view end_user, int64_t shape_tokens,
              int64_t occupancy_points, SteadyClock::time_point now = SteadyClock::now());

  std::optional<Standing> standing(std::string_view key_name,
                                   SteadyClock::time_point now = SteadyClock::now());

  // The key's name, without taking anything from its limits (polling a job, which costs no
  // work); UNAUTHENTICATED's refusal for a missing or unknown key.
  std::variant<std::string, Refusal> identify(std::string_view authorization) const;

  // Swaps in a new key list; keys that stay (same name and hash) keep their state.
  void replace(std::vector<ApiKey> keys);
  size_t size() const;

 private:
  struct UserState {
    std::optional<TokenBucket> requests, shape_tokens;
    std::shared_ptr<int64_t> running = std::make_shared<int64_t>(0);
    SteadyClock::time_point last_used;
  };
  struct State {
    ApiKey key;
    std::optional<TokenBucket> requests, shape_tokens, occupancy_points;
    std::shared_ptr<int64_t> running = std::make_shared<int64_t>(0);
    std::map<std::string, UserState, std::less<>> users;  // by pseudonym
    size_t users_after_last_prune = 0;
  };
  // Lock held: the key's buckets made or updated for its (new) limits.
  static void apply_limits(State& state, SteadyClock::time_point now);
  // Lock held: forgets the end users whose state is that of a new one, then, over
  // kMaxEndUsersPerKey, the idle ones used longest ago.
  static void prune_users(State& state, SteadyClock::time_point now);
  // Lock held: the request and concurrency limits, then the work limits when `work` is set.
  static std::optional<Refusal> check(State& state, UserState* user, const Work* work,
                                      SteadyClock::time_point now);
  static std::optional<Refusal> check_work_of(State& state, UserState* user, const Work& work,
                                              SteadyClock::time_point now);

  mutable std::mutex mutex_;
  std::map<std::array<uint8_t, 32>, State> by_hash_;
  std::map<std::string, std::array<uint8_t, 32>, std::less<>> hash_by_name_;
};

}  // namespace cube3d
