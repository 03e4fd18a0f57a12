#include "cube3d/server/admission/api_keys.h"

#include <openssl/evp.h>
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

std::array<uint8_t, 32> sha256(std::string_view text) {
  std::array<uint8_t, 32> out{};
  unsigned int size = 0;
  if (EVP_Digest(text.data(), text.size(), out.data(), &size, EVP_sha256(), nullptr) != 1 ||
      size != out.size()) {
    throw internal_error("SHA-256 failed (OpenSSL)");
  }
  return out;
}

std::vector<ApiKey> parse_api_keys(const std::string& yaml_text, const std::string& source) {
  const YAML::Node root = yaml::parse_single_document(yaml_text, source, "keys file");
  static constexpr std::string_view kTop[] = {"keys"};
  static constexpr std::string_view kEntry[] = {"name", "sha256", "requests_per_minute",
                                                "max_concurrent"};
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
                  case 2: {
                    const double rpm = yaml::read_float(value, source, name);
                    if (!std::isfinite(rpm) || rpm <= 0 || rpm > 1e9) {
                      yaml::fail(source, name + ": must be a number > 0");
                    }
                    entry.requests_per_minute = rpm;
                    break;
                  }
                  default: {
                    const int64_t n = yaml::read_int(value, source, name);
                    if (n < 1) yaml::fail(source, name + ": must be >= 1");
                    entry.max_concurrent = n;
                    break;
                  }
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

void ApiKeys::replace(std::vector<ApiKey> keys) {
  const std::lock_guard lock(mutex_);
  std::map<std::array<uint8_t, 32>, State> next;
  const auto now = SteadyClock::now();
  for (ApiKey& key : keys) {
    State state;
    const auto old = by_hash_.find(key.sha256);
    if (old != by_hash_.end() && old->second.key.name == key.name) {
      state = old->second;  // the bucket and the running count carry over
    } else {
      state.tokens = key.requests_per_minute.value_or(0);
      state.refilled = now;
    }
    state.key = std::move(key);
    if (state.key.requests_per_minute) {
      state.tokens = std::min(state.tokens, *state.key.requests_per_minute);
    }
    const auto hash = state.key.sha256;
    next.emplace(hash, std::move(state));
  }
  by_hash_ = std::move(next);
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

std::variant<ApiKeys::Ticket, ApiKeys::Refusal> ApiKeys::admit(std::string_view authorization,
                                                               SteadyClock::time_point now) {
  auto hashed = hash_of(authorization);
  if (auto* refused = std::get_if<Refusal>(&hashed)) return std::move(*refused);
  const std::lock_guard lock(mutex_);
  const auto it = by_hash_.find(std::get<std::array<uint8_t, 32>>(hashed));
  if (it == by_hash_.end()) return Refusal{true, "unknown API key", 0};
  State& state = it->second;
  if (state.key.max_concurrent && *state.running >= *state.key.max_concurrent) {
    return Refusal{false,
                   "API key '" + state.key.name + "' has " + std::to_string(*state.running) +
                       " requests queued or running, its limit (max_concurrent)",
                   1};
  }
  if (const auto rpm = state.key.requests_per_minute) {
    const double per_second = *rpm / 60.0;
    const double elapsed = std::chrono::duration<double>(now - state.refilled).count();
    state.tokens = std::min(*rpm, state.tokens + std::max(0.0, elapsed) * per_second);
    state.refilled = now;
    if (state.tokens < 1.0) {
      const auto wait = static_cast<int64_t>(std::ceil((1.0 - state.tokens) / per_second));
      return Refusal{false,
                     "API key '" + state.key.name + "' is over its requests_per_minute (" +
                         yaml::format_float(*rpm) + ")",
                     std::max<int64_t>(1, wait)};
    }
    state.tokens -= 1.0;
  }
  ++*state.running;
  Ticket ticket;
  ticket.name_ = state.key.name;
  // The count is shared with the state (and outlives it when replace() drops the key).
  ticket.hold_ = std::shared_ptr<void>(nullptr, [this, running = state.running](void*) {
    const std::lock_guard release_lock(mutex_);
    --*running;
  });
  return ticket;
}

}  // namespace cube3d
