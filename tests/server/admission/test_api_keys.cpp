// API keys: the keys file's checks, SHA-256, the token bucket, concurrency and reloads.
#include "cube3d/server/admission/api_keys.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <variant>

#include "cube3d/core/error.h"

namespace cube3d {
namespace {

std::string hex(const std::array<uint8_t, 32>& bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (const uint8_t b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

ApiKey key(const std::string& name, const std::string& secret, std::optional<double> rpm = {},
           std::optional<int64_t> concurrent = {}) {
  return {name, sha256(secret), rpm, concurrent};
}

const ApiKeys::Refusal* refusal(const std::variant<ApiKeys::Ticket, ApiKeys::Refusal>& r) {
  return std::get_if<ApiKeys::Refusal>(&r);
}

TEST(ApiKeys, Sha256IsTheStandardOne) {
  EXPECT_EQ(hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(ApiKeys, FileIsReadWithItsLimits) {
  const std::string yaml = "keys:\n  - name: studio-a\n    sha256: " + hex(sha256("secret-a")) +
                           "\n    requests_per_minute: 60\n    max_concurrent: 4\n"
                           "  - name: studio-b\n    sha256: " +
                           hex(sha256("secret-b")) + "\n";
  const std::vector<ApiKey> keys = parse_api_keys(yaml, "keys.yaml");
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0].name, "studio-a");
  EXPECT_EQ(keys[0].sha256, sha256("secret-a"));
  EXPECT_EQ(keys[0].requests_per_minute, 60.0);
  EXPECT_EQ(keys[0].max_concurrent, 4);
  EXPECT_FALSE(keys[1].requests_per_minute);
  EXPECT_FALSE(keys[1].max_concurrent);
}

TEST(ApiKeys, BadFilesNameTheField) {
  const std::string h = hex(sha256("x"));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "expected a mapping"},
      {"other: 1\n", "unknown key other"},
      {"{}\n", "keys: required"},
      {"keys: 3\n", "keys: expected a list"},
      {"keys:\n  - name: a\n", "keys[0].sha256: required"},
      {"keys:\n  - sha256: " + h + "\n", "keys[0].name: required"},
      {"keys:\n  - name: a\n    sha256: abc\n", "keys[0].sha256: expected 64 hex digits"},
      {"keys:\n  - name: a\n    sha256: " + std::string(64, 'g') + "\n", "not a hex digit"},
      {"keys:\n  - name: a\n    sha256: " + h + "\n    requests_per_minute: 0\n",
       "keys[0].requests_per_minute: must be a number > 0"},
      {"keys:\n  - name: a\n    sha256: " + h + "\n    max_concurrent: 0\n",
       "keys[0].max_concurrent: must be >= 1"},
      {"keys:\n  - name: a\n    sha256: " + h + "\n    max_concurent: 2\n", "max_concurrent"},
      {"keys:\n  - name: a\n    sha256: " + h + "\n  - name: a\n    sha256: " + hex(sha256("y")) +
           "\n",
       "name 'a' twice"},
      {"keys:\n  - name: a\n    sha256: " + h + "\n  - name: b\n    sha256: " + h + "\n",
       "sha256 of 'b' is listed twice"},
  };
  for (const auto& [yaml, needle] : cases) {
    try {
      (void)parse_api_keys(yaml, "keys.yaml");
      ADD_FAILURE() << "accepted:\n" << yaml;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("keys.yaml"), std::string::npos) << e.what();
    }
  }
}

TEST(ApiKeys, MissingMalformedOrUnknownKeysAreUnauthenticated) {
  ApiKeys keys({key("a", "secret")});
  for (const std::string& header :
       {std::string(), std::string("secret"), std::string("Basic secret"), std::string("Bearer "),
        std::string("Bearer wrong")}) {
    const auto r = keys.admit(header);
    ASSERT_NE(refusal(r), nullptr) << header;
    EXPECT_TRUE(refusal(r)->unauthenticated) << header;
    EXPECT_EQ(refusal(r)->message.find("secret"), std::string::npos) << "the key is echoed";
  }
  const auto ok = keys.admit("Bearer secret");
  ASSERT_EQ(refusal(ok), nullptr);
  EXPECT_EQ(std::get<ApiKeys::Ticket>(ok).key_name(), "a");
}

TEST(ApiKeys, RequestsPerMinuteIsATokenBucketWithRetryAfter) {
  ApiKeys keys({key("a", "s", /*rpm=*/2)});
  const auto t0 = SteadyClock::now();
  EXPECT_EQ(refusal(keys.admit("Bearer s", t0)), nullptr);
  EXPECT_EQ(refusal(keys.admit("Bearer s", t0)), nullptr);
  const auto over = keys.admit("Bearer s", t0);
  ASSERT_NE(refusal(over), nullptr);
  EXPECT_FALSE(refusal(over)->unauthenticated);
  EXPECT_EQ(refusal(over)->retry_after_s, 30);  // one token every 30 s
  EXPECT_NE(refusal(over)->message.find("requests_per_minute"), std::string::npos);
  EXPECT_NE(refusal(keys.admit("Bearer s", t0 + std::chrono::seconds(29))), nullptr);
  EXPECT_EQ(refusal(keys.admit("Bearer s", t0 + std::chrono::seconds(31))), nullptr);
}

TEST(ApiKeys, MaxConcurrentCountsHeldTickets) {
  ApiKeys keys({key("a", "s", {}, /*concurrent=*/1), key("b", "t")});
  std::optional<ApiKeys::Ticket> held;
  {
    auto first = keys.admit("Bearer s");
    ASSERT_EQ(refusal(first), nullptr);
    held.emplace(std::move(std::get<ApiKeys::Ticket>(first)));
  }
  const auto second = keys.admit("Bearer s");
  ASSERT_NE(refusal(second), nullptr);
  EXPECT_NE(refusal(second)->message.find("max_concurrent"), std::string::npos);
  EXPECT_EQ(refusal(keys.admit("Bearer t")), nullptr) << "another key is not limited";
  held.reset();
  EXPECT_EQ(refusal(keys.admit("Bearer s")), nullptr);
}

TEST(ApiKeys, ReplaceKeepsTheStateOfKeysThatStay) {
  ApiKeys keys({key("a", "s", 1), key("gone", "g")});
  const auto t0 = SteadyClock::now();
  EXPECT_EQ(refusal(keys.admit("Bearer s", t0)), nullptr);
  auto ticket = keys.admit("Bearer g", t0);
  ASSERT_EQ(refusal(ticket), nullptr);
  keys.replace({key("a", "s", 1), key("new", "n")});
  EXPECT_EQ(keys.size(), 2u);
  EXPECT_NE(refusal(keys.admit("Bearer s", t0)), nullptr) << "the bucket was refilled";
  EXPECT_TRUE(refusal(keys.admit("Bearer g", t0))->unauthenticated);
  EXPECT_EQ(refusal(keys.admit("Bearer n", t0)), nullptr);
  // A ticket of a removed key is released without harm.
  ticket = ApiKeys::Refusal{};
}

}  // namespace
}  // namespace cube3d
