#include "cube3d/server/admission/api_keys.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <set>
#include <variant>

#include "cube3d/core/error.h"
#include "cube3d/core/yaml_reader.h"

namespace cube3d {
namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::array<uint8_t, 32> parse_sha256(const std::string& text, std::string_view source,
                                     const std::string& key) {
  std::array<uint8_t, 32> out{};
  if (text.size() != 64) {
    yaml::fail(source, key + ": expected 64 hex digits (sha256 of the key), got " +
                           std::to_string(text.size()) + " characters");
  }
  for (size_t i = 0; i < 32; ++i) {
    const int hi = hex_digit(text[2 * i]);
    const int lo = hex_digit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) yaml::fail(source, key + ": not a hex digit at " + std::to_string(2 * i));
    out[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return out;
}

}  // namespace

std::optional<std::string_view> bearer_credentials(std::string_view authorization) {
  constexpr std::string_view kScheme = "bearer";
  if (authorization.size() <= kScheme.size()) return std::nullopt;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    const auto c = static_cast<unsigned char>(authorization[i]);
    if (std::tolower(c) != kScheme[i]) return std::nullopt;
  }
  std::string_view rest = authorization.substr(kScheme.size());
  if (rest.front() != ' ') return std::nullopt;
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  while (!rest.empty() && (rest.back() == ' ' || rest.back() == '\t')) rest.remove_suffix(1);
  if (rest.empty()) return std::nullopt;
  // A token68 is visible ASCII; a control byte (a NUL, say) means someone is probing for a
  // parser that stops early, and anything else would not have been issued as a key.
  for (const char c : rest) {
    if (c < 0x21 || c > 0x7e) return std::nullopt;
  }
  return rest;
}

namespace {

// A per-minute rate: from one per 1000 minutes (a smaller one would mean retries after ages,
// and the arithmetic of its waits would overflow) to 1e15.
double read_rate(const YAML::Node& value, std::string_view source, const std::string& name) {
  const double rate = yaml::read_float(value, source, name);
  if (!std::isfinite(rate) || rate < 1e-3 || rate > 1e15) {
    yaml::fail(source, name + ": must be a number > 0, from 0.001 to 1e15");
  }
  return rate;
}

int64_t read_concurrency(const YAML::Node& value, std::string_view source,
                         const std::string& name) {
  const int64_t n = yaml::read_int(value, source, name);
  if (n < 1) yaml::fail(source, name + ": must be >= 1");
  return n;
}

PerUserLimits read_per_user(const YAML::Node& node, std::string_view source,
                            const std::string& at) {
  static constexpr std::string_view kFields[] = {"requests_per_minute", "max_concurrent",
                                                 "shape_tokens_per_minute"};
  PerUserLimits limits;
  if (!node.IsMap()) yaml::fail(source, at + ": expected a mapping of limits");
  yaml::read_mapping(node, source, at, kFields,
                     [&](size_t field, const YAML::Node& value, const std::string& name) {
                       switch (field) {
                         case 0:
                           limits.requests_per_minute = read_rate(value, source, name);
                           break;
                         case 1:
                           limits.max_concurrent = read_concurrency(value, source, name);
                           break;
                         default:
                           limits.shape_tokens_per_minute = read_rate(value, source, name);
                           break;
                       }
                     });
  return limits;
}

}  // namespace

std::vector<ApiKey> parse_api_keys(const std::string& yaml_text, const std::string& source) {
  const YAML::Node root = yaml::parse_single_document(yaml_text, source, "keys file");
  static constexpr std::string_view kTop[] = {"keys"};
  static constexpr std::string_view kEntry[] = {"name",
                                                "sha256",
                                                "requests_per_minute",
                                                "max_concurrent",
                                                "shape_tokens_per_minute",
                                                "occupancy_points_per_minute",
                                                "priority",
                                                "per_user"};
  std::vector<ApiKey> keys;
  const std::vector<bool> seen = yaml::read_mapping(
      root, source, "", kTop, [&](size_t, const YAML::Node& list, const std::string& key) {
        if (!list.IsSequence()) {
          yaml::fail(source, key + ": expected a list of keys, got " + yaml::describe(list));
        }
        for (size_t i = 0; i < list.size(); ++i) {
          const std::string at = "keys[" + std::to_string(i) + "]";
          ApiKey entry;
          bool has_hash = false;
          const std::vector<bool> fields = yaml::read_mapping(
              list[i], source, at, kEntry,
              [&](size_t field, const YAML::Node& value, const std::string& name) {
                switch (field) {
                  case 0:
                    entry.name = yaml::read_string(value, source, name);
                    break;
                  case 1:
                    entry.sha256 =
                        parse_sha256(yaml::read_string(value, source, name), source, name);
                    has_hash = true;
                    break;
                  case 2:
                    entry.requests_per_minute = read_rate(value, source, name);
                    break;
                  case 3:
                    entry.max_concurrent = read_concurrency(value, source, name);
                    break;
                  case 4:
                    entry.shape_tokens_per_minute = read_rate(value, source, name);
                    break;
                  case 5:
                    entry.occupancy_points_per_minute = read_rate(value, source, name);
                    break;
                  case 6: {
                    const std::string priority = yaml::read_string(value, source, name);
                    if (priority != "batch" && priority != "interactive") {
                      yaml::fail(source, name + ": '" + priority +
                                             "' is not one of interactive (the request chooses), "
                                             "batch (all of the key's work runs as batch)");
                    }
                    entry.batch_only = priority == "batch";
                    break;
                  }
                  default:
                    entry.per_user = read_per_user(value, source, name);
                    break;
                }
              });
          if (!fields[0] || entry.name.empty()) yaml::fail(source, at + ".name: required");
          if (!has_hash) yaml::fail(source, at + ".sha256: required");
          keys.push_back(std::move(entry));
        }
      });
  if (!seen[0]) yaml::fail(source, "keys: required (a list of {name, sha256, ...})");
  std::set<std::string> names;
  std::set<std::array<uint8_t, 32>> hashes;
  for (const ApiKey& k : keys) {
    if (!names.insert(k.name).second) yaml::fail(source, "keys: name '" + k.name + "' twice");
    if (!hashes.insert(k.sha256).second) {
      yaml::fail(source, "keys: the sha256 of '" + k.name + "' is listed twice");
    }
  }
  return keys;
}

std::vector<ApiKey> load_api_keys(const std::string& path) {
  return parse_api_keys(yaml::read_config_file(path, "API keys file"), path);
}

ApiKeys::ApiKeys(std::vector<ApiKey> keys) { replace(std::move(keys)); }

namespace {

// A bucket for an optional limit: made full when the limit is new, re-rated when it changed,
// dropped when it went.
void keep_bucket(std::optional<TokenBucket>& bucket, const std::optional<double>& per_minute,
                 SteadyClock::time_point now) {
  if (!per_minute) {
    bucket.reset();
  } else if (!bucket) {
    bucket.emplace(*per_minute, now);
  } else {
    bucket->set_per_minute(*per_minute, now);
  }
}

// "60", "0.5": a whole rate as a whole number, as the operator most likely wrote it.
std::string format_rate(double rate) {
  if (rate == std::floor(rate) && rate < 1e15) return std::to_string(static_cast<int64_t>(rate));
  return yaml::format_float(rate);
}

}  // namespace

void ApiKeys::apply_limits(State& state, SteadyClock::time_point now) {
  const ApiKey& key = state.key;
  keep_bucket(state.requests, key.requests_per_minute, now);
  keep_bucket(state.shape_tokens, key.shape_tokens_per_minute, now);
  keep_bucket(state.occupancy_points, key.occupancy_points_per_minute, now);
  const PerUserLimits per_user = key.per_user.value_or(PerUserLimits{});
  for (auto& [name, user] : state.users) {
    keep_bucket(user.requests, per_user.requests_per_minute, now);
    keep_bucket(user.shape_tokens, per_user.shape_tokens_per_minute, now);
  }
}

void ApiKeys::replace(std::vector<ApiKey> keys) {
  const std::lock_guard lock(mutex_);
  std::map<std::array<uint8_t, 32>, State> next;
  std::map<std::string, std::array<uint8_t, 32>, std::less<>> names;
  const auto now = SteadyClock::now();
  for (ApiKey& key : keys) {
    State state;
    const auto old = by_hash_.find(key.sha256);
    if (old != by_hash_.end() && old->second.key.name == key.name) {
      // The buckets, the end users and the running count carry over.
      state = std::move(old->second);
    }
    state.key = std::move(key);
    apply_limits(state, now);
    const auto hash = state.key.sha256;
    names.emplace(state.key.name, hash);
    next.emplace(hash, std::move(state));
  }
  by_hash_ = std::move(next);
  hash_by_name_ = std::move(names);
}

size_t ApiKeys::size() const {
  const std::lock_guard lock(mutex_);
  return by_hash_.size();
}

namespace {

// The key's hash, or why the header does not carry a key.
std::variant<std::array<uint8_t, 32>, ApiKeys::Refusal> hash_of(std::string_view authorization) {
  if (authorization.empty()) {
    return ApiKeys::Refusal{
        true, "no API key: send the metadata/header 'authorization: Bearer <key>'", 0};
  }
  const std::optional<std::string_view> secret = bearer_credentials(authorization);
  if (!secret) {
    return ApiKeys::Refusal{
        true, "authorization must be 'Bearer <key>' (the key: visible ASCII, no spaces)", 0};
  }
  return sha256(*secret);
}

ApiKeys::Refusal over(const std::string& what, int64_t retry_after_s) {
  return ApiKeys::Refusal{false, what, std::max<int64_t>(1, retry_after_s)};
}

}  // namespace

std::variant<std::string, ApiKeys::Refusal> ApiKeys::identify(
    std::string_view authorization) const {
  auto hashed = hash_of(authorization);
  if (auto* refused = std::get_if<Refusal>(&hashed)) return std::move(*refused);
  const std::lock_guard lock(mutex_);
  const auto it = by_hash_.find(std::get<std::array<uint8_t, 32>>(hashed));
  if (it == by_hash_.end()) return Refusal{true, "unknown API key", 0};
  return it->second.key.name;
}

std::optional<ApiKeys::Refusal> ApiKeys::check(State& state, UserState* user, const Work* work,
                                               SteadyClock::time_point now) {
  const ApiKey& key = state.key;
  const std::string of_key = "API key '" + key.name + "'";
  // The end user is named by what it is, never by its id (the message is logged).
  const std::string of_user = "this end user of API key '" + key.name + "'";
  if (key.max_concurrent && *state.running >= *key.max_concurrent) {
    return over(of_key + " has " + std::to_string(*state.running) +
                    " requests queued or running, its limit (max_concurrent)",
                1);
  }
  const PerUserLimits per_user = key.per_user.value_or(PerUserLimits{});
  if (user && per_user.max_concurrent && *user->running >= *per_user.max_concurrent) {
    return over(of_user + " has " + std::to_string(*user->running) +
                    " requests queued or running, its limit (per_user.max_concurrent)",
                1);
  }
  if (state.requests) {
    if (const int64_t wait = state.requests->wait_seconds(1, now)) {
      return over(of_key + " is over its requests_per_minute (" +
                      format_rate(state.requests->per_minute()) + ")",
                  wait);
    }
  }
  if (user && user->requests) {
    if (const int64_t wait = user->requests->wait_seconds(1, now)) {
      return over(of_user + " is over per_user.requests_per_minute (" +
                      format_rate(user->requests->per_minute()) + ")",
                  wait);
    }
  }
  if (work) return check_work_of(state, user, *work, now);
  return std::nullopt;
}

std::optional<ApiKeys::Refusal> ApiKeys::check_work_of(State& state, UserState* user,
                                                       const Work& work,
                                                       SteadyClock::time_point now) {
  const ApiKey& key = state.key;
  const std::string of_key = "API key '" + key.name + "'";
  const std::string of_user = "this end user of API key '" + key.name + "'";
  const auto need = static_cast<double>(work.shape_tokens);
  if (state.shape_tokens) {
    if (const int64_t wait = state.shape_tokens->wait_seconds(need, now)) {
      return over(of_key + " is over its shape_tokens_per_minute (" +
                      format_rate(state.shape_tokens->per_minute()) + "): this request needs " +
                      std::to_string(work.shape_tokens) + " shape tokens",
                  wait);
    }
  }
  if (user && user->shape_tokens) {
    if (const int64_t wait = user->shape_tokens->wait_seconds(need, now)) {
      return over(of_user + " is over per_user.shape_tokens_per_minute (" +
                      format_rate(user->shape_tokens->per_minute()) + "): this request needs " +
                      std::to_string(work.shape_tokens) + " shape tokens",
                  wait);
    }
  }
  if (state.occupancy_points) {
    // At least one point: a bucket in debt admits nothing until it has refilled.
    const double points = std::max<double>(1, static_cast<double>(work.occupancy_points));
    if (const int64_t wait = state.occupancy_points->wait_seconds(points, now)) {
      return over(of_key + " is over its occupancy_points_per_minute (" +
                      format_rate(state.occupancy_points->per_minute()) + ")",
                  wait);
    }
  }
  return std::nullopt;
}

std::variant<ApiKeys::Ticket, ApiKeys::Refusal> ApiKeys::admit(std::string_view authorization,
                                                               const Demand& demand,
                                                               SteadyClock::time_point now) {
  auto hashed = hash_of(authorization);
  if (auto* refused = std::get_if<Refusal>(&hashed)) return std::move(*refused);
  const std::lock_guard lock(mutex_);
  const auto it = by_hash_.find(std::get<std::array<uint8_t, 32>>(hashed));
  if (it == by_hash_.end()) return Refusal{true, "unknown API key", 0};
  State& state = it->second;

  UserState* user = nullptr;
  if (!demand.end_user.empty()) {
    auto found = state.users.find(demand.end_user);
    if (found == state.users.end()) {
      if (state.users.size() >= 2 * std::max<size_t>(state.users_after_last_prune, 1024)) {
        prune_users(state, now);
      }
      UserState fresh;
      const PerUserLimits per_user = state.key.per_user.value_or(PerUserLimits{});
      keep_bucket(fresh.requests, per_user.requests_per_minute, now);
      keep_bucket(fresh.shape_tokens, per_user.shape_tokens_per_minute, now);
      found = state.users.emplace(std::string(demand.end_user), std::move(fresh)).first;
    }
    user = &found->second;
    user->last_used = now;
  }
  if (auto refused = check(state, user, demand.work ? &*demand.work : nullptr, now)) {
    return std::move(*refused);
  }

  if (state.requests) state.requests->take(1, now);
  if (user && user->requests) user->requests->take(1, now);
  ++*state.running;
  if (user) ++*user->running;
  Ticket ticket;
  ticket.name_ = state.key.name;
  ticket.batch_only_ = state.key.batch_only;
  // The counts are shared with the states (and outlive them when replace() drops the key or a
  // prune forgets the end user: a forgotten one is never running, so that cannot happen).
  ticket.hold_ = std::shared_ptr<void>(
      nullptr, [this, running = state.running,
                user_running = user ? user->running : std::shared_ptr<int64_t>()](void*) {
        const std::lock_guard release_lock(mutex_);
        --*running;
        if (user_running) --*user_running;
      });
  return ticket;
}

std::optional<ApiKeys::Refusal> ApiKeys::check_work(std::string_view key_name,
                                                    std::string_view end_user, const Work& work,
                                                    SteadyClock::time_point now) {
  const std::lock_guard lock(mutex_);
  const auto name = hash_by_name_.find(key_name);
  if (name == hash_by_name_.end()) return std::nullopt;
  State& state = by_hash_.at(name->second);
  UserState* user = nullptr;
  if (!end_user.empty()) {
    const auto found = state.users.find(end_user);
    if (found != state.users.end()) user = &found->second;
  }
  return check_work_of(state, user, work, now);
}

void ApiKeys::charge(std::string_view key_name, std::string_view end_user, int64_t shape_tokens,
                     int64_t occupancy_points, SteadyClock::time_point now) {
  const std::lock_guard lock(mutex_);
  const auto name = hash_by_name_.find(key_name);
  if (name == hash_by_name_.end()) return;
  State& state = by_hash_.at(name->second);
  if (state.shape_tokens) state.shape_tokens->take(static_cast<double>(shape_tokens), now);
  if (state.occupancy_points) {
    state.occupancy_points->take(static_cast<double>(occupancy_points), now);
  }
  if (end_user.empty()) return;
  const auto user = state.users.find(end_user);
  if (user != state.users.end() && user->second.shape_tokens) {
    user->second.shape_tokens->take(static_cast<double>(shape_tokens), now);
  }
}

void ApiKeys::prune_users(State& state, SteadyClock::time_point now) {
  std::erase_if(state.users, [now](const auto& entry) {
    const UserState& user = entry.second;
    return *user.running == 0 && (!user.requests || user.requests->full(now)) &&
           (!user.shape_tokens || user.shape_tokens->full(now));
  });
  if (state.users.size() >= kMaxEndUsersPerKey) {
    // Still too many: the idle ones used longest ago go (they start again with full buckets).
    std::vector<std::pair<SteadyClock::time_point, std::string>> idle;
    for (const auto& [name, user] : state.users) {
      if (*user.running == 0) idle.emplace_back(user.last_used, name);
    }
    const size_t excess = state.users.size() - kMaxEndUsersPerKey / 2;
    const size_t drop = std::min(excess, idle.size());
    std::nth_element(idle.begin(), idle.begin() + static_cast<std::ptrdiff_t>(drop), idle.end());
    for (size_t i = 0; i < drop; ++i) state.users.erase(idle[i].second);
  }
  state.users_after_last_prune = state.users.size();
}

std::optional<ApiKeys::Standing> ApiKeys::standing(std::string_view key_name,
                                                   SteadyClock::time_point now) {
  const std::lock_guard lock(mutex_);
  const auto name = hash_by_name_.find(key_name);
  if (name == hash_by_name_.end()) return std::nullopt;
  State& state = by_hash_.at(name->second);
  Standing out;
  out.key = state.key;
  out.running = *state.running;
  if (state.requests) out.requests_left = state.requests->level(now);
  if (state.shape_tokens) out.shape_tokens_left = state.shape_tokens->level(now);
  if (state.occupancy_points) out.occupancy_points_left = state.occupancy_points->level(now);
  out.end_users_tracked = state.users.size();
  return out;
}

}  // namespace cube3d
