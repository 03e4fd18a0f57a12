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
//
// Clients send `authorization: Bearer <key>` (gRPC metadata or HTTP header). admit() answers
// UNAUTHENTICATED for a missing or unknown key and RESOURCE_EXHAUSTED, with the seconds after
// which a retry can succeed, over a limit. replace() swaps in a re-read file (SIGHUP) without
// dropping requests: a key that stays keeps its bucket and its running requests.
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

namespace cube3d {

struct ApiKey {
  std::string name;
  std::array<uint8_t, 32> sha256{};
  std::optional<double> requests_per_minute;
  std::optional<int64_t> max_concurrent;
};

// Reads and checks a keys file: invalid_argument naming the file and the field (duplicate
// names or hashes, a hash that is not 64 hex digits, limits out of range); not_found for a
// missing file.
std::vector<ApiKey> load_api_keys(const std::string& path);
std::vector<ApiKey> parse_api_keys(const std::string& yaml_text, const std::string& source);

// The key in an `authorization` value: the scheme "Bearer" in any letter case (RFC 9110 makes
// auth schemes case-insensitive), one or more spaces, then the key, visible ASCII only (no
// space, no control byte). nullopt for anything else.
std::optional<std::string_view> bearer_credentials(std::string_view authorization);

// SHA-256 of `text` (OpenSSL).
std::array<uint8_t, 32> sha256(std::string_view text);

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

   private:
    friend class ApiKeys;
    std::string name_;
    std::shared_ptr<void> hold_;  // releases the concurrent place
  };

  struct Refusal {
    bool unauthenticated = false;  // else over a limit (RESOURCE_EXHAUSTED)
    std::string message;
    int64_t retry_after_s = 0;  // over a limit: when a retry can succeed
  };

  // `authorization`: the header's or metadata's value ("Bearer <key>"), empty when absent.
  // Returns the ticket, or why not.
  std::variant<Ticket, Refusal> admit(std::string_view authorization,
                                      SteadyClock::time_point now = SteadyClock::now());

  // The key's name, without taking anything from its limits (polling a job, which costs no
  // work); UNAUTHENTICATED's refusal for a missing or unknown key.
  std::variant<std::string, Refusal> identify(std::string_view authorization) const;

  // Swaps in a new key list; keys that stay (same name and hash) keep their state.
  void replace(std::vector<ApiKey> keys);
  size_t size() const;

 private:
  struct State {
    ApiKey key;
    double tokens = 0;  // token bucket, in requests
    SteadyClock::time_point refilled;
    std::shared_ptr<int64_t> running = std::make_shared<int64_t>(0);
  };

  mutable std::mutex mutex_;
  std::map<std::array<uint8_t, 32>, State> by_hash_;
};

}  // namespace cube3d
