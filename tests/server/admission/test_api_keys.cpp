// API keys: the keys file's checks, SHA-256, the token bucket, concurrency and reloads.
#include "cube3d/server/admission/api_keys.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "cube3d/core/error.h"

namespace cube3d {
namespace test_api_keys {

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
  ApiKey k;
  k.name = name;
  k.sha256 = sha256(secret);
  k.requests_per_minute = rpm;
  k.max_concurrent = concurrent;
  return k;
}

// Expects parse_api_keys to refuse `yaml` as invalid, with a message that names `needle` and the
// file.
void expect_refused_file(const std::string& yaml, const std::string& needle) {
  SCOPED_TRACE(needle);
  try {
    (void)parse_api_keys(yaml, "keys.yaml");
    ADD_FAILURE() << "accepted:\n" << yaml;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("keys.yaml"), std::string::npos) << e.what();
  }
}

// Key "a" (secret "s") with a shape-token budget and no other limit.
ApiKey shape_limited(double shape_tokens_per_minute) {
  ApiKey k = key("a", "s");
  k.shape_tokens_per_minute = shape_tokens_per_minute;
  return k;
}

ApiKeys::Demand tokens(int64_t shape_tokens, std::string_view user = {}) {
  ApiKeys::Demand demand;
  demand.end_user = user;
  demand.work = ApiKeys::Work{shape_tokens, 0};
  return demand;
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
  for (const auto& [yaml, needle] : cases) expect_refused_file(yaml, needle);
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

TEST(ApiKeys, FileReadsWorkLimitsPriorityAndPerUserLimits) {
  const std::string yaml = "keys:\n  - name: studio-a\n    sha256: " + hex(sha256("a")) +
                           "\n    shape_tokens_per_minute: 4096\n"
                           "    occupancy_points_per_minute: 5e7\n    priority: batch\n"
                           "    per_user:\n      requests_per_minute: 10\n"
                           "      max_concurrent: 1\n      shape_tokens_per_minute: 2048\n"
                           "  - name: studio-b\n    sha256: " +
                           hex(sha256("b")) + "\n    priority: interactive\n";
  const std::vector<ApiKey> keys = parse_api_keys(yaml, "keys.yaml");
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0].shape_tokens_per_minute, 4096.0);
  EXPECT_EQ(keys[0].occupancy_points_per_minute, 5e7);
  EXPECT_TRUE(keys[0].batch_only);
  ASSERT_TRUE(keys[0].per_user);
  EXPECT_EQ(keys[0].per_user->requests_per_minute, 10.0);
  EXPECT_EQ(keys[0].per_user->max_concurrent, 1);
  EXPECT_EQ(keys[0].per_user->shape_tokens_per_minute, 2048.0);
  EXPECT_FALSE(keys[1].batch_only);
  EXPECT_FALSE(keys[1].per_user);

  const std::string h = hex(sha256("x"));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"    shape_tokens_per_minute: -1\n",
       "keys[0].shape_tokens_per_minute: must be a number > 0"},
      {"    occupancy_points_per_minute: .nan\n", "keys[0].occupancy_points_per_minute"},
      {"    shape_tokens_per_minute: 1.0e-300\n", "from 0.001 to 1e15"},
      {"    per_user: {requests_per_minute: 2e15}\n", "keys[0].per_user.requests_per_minute"},
      {"    priority: urgent\n", "keys[0].priority: 'urgent' is not one of interactive"},
      {"    per_user: 3\n", "keys[0].per_user: expected a mapping"},
      {"    per_user:\n      max_concurrent: 0\n", "keys[0].per_user.max_concurrent: must be >= 1"},
      {"    per_user:\n      occupancy_points_per_minute: 5\n", "occupancy_points_per_minute"},
  };
  for (const auto& [tail, needle] : cases) {
    expect_refused_file("keys:\n  - name: a\n    sha256: " + h + "\n" + tail, needle);
  }
}

TEST(ApiKeys, ShapeTokensAreCheckedAtAdmissionAndChargedWhenDone) {
  ApiKeys keys({shape_limited(6000)});  // 100 a second
  const auto t0 = SteadyClock::now();
  // Admission takes nothing from the work bucket: only the charge does.
  EXPECT_EQ(refusal(keys.admit("Bearer s", tokens(4000), t0)), nullptr);
  EXPECT_EQ(refusal(keys.admit("Bearer s", tokens(4000), t0)), nullptr);
  keys.charge("a", "", 4000, 0, t0);
  const auto over = keys.admit("Bearer s", tokens(4000), t0);
  ASSERT_NE(refusal(over), nullptr);
  EXPECT_FALSE(refusal(over)->unauthenticated);
  EXPECT_NE(refusal(over)->message.find("shape_tokens_per_minute (6000)"), std::string::npos)
      << refusal(over)->message;
  EXPECT_NE(refusal(over)->message.find("needs 4000 shape tokens"), std::string::npos);
  EXPECT_EQ(refusal(over)->retry_after_s, 20);  // 2000 left, 2000 more at 100 a second
  EXPECT_EQ(refusal(keys.admit("Bearer s", tokens(2000), t0)), nullptr) << "a smaller one fits";
  EXPECT_EQ(refusal(keys.admit("Bearer s", tokens(4000), t0 + std::chrono::seconds(20))), nullptr);
}

TEST(ApiKeys, AChargeOverWhatWasLeftIsDebtThatDelaysTheNextRequest) {
  ApiKeys keys({shape_limited(600)});  // 10 a second
  const auto t0 = SteadyClock::now();
  // One request needs more than a minute's worth: admitted on a full bucket, then in debt.
  EXPECT_EQ(refusal(keys.admit("Bearer s", tokens(1200), t0)), nullptr);
  keys.charge("a", "", 1200, 0, t0);
  const auto in_debt = keys.admit("Bearer s", tokens(1), t0 + std::chrono::seconds(30));
  ASSERT_NE(refusal(in_debt), nullptr);
  EXPECT_EQ(refusal(in_debt)->retry_after_s, 31);  // -300 at 30 s; 1 token more
  const auto standing = keys.standing("a", t0 + std::chrono::seconds(30));
  ASSERT_TRUE(standing);
  ASSERT_TRUE(standing->shape_tokens_left);
  EXPECT_NEAR(*standing->shape_tokens_left, -300, 1e-6);
  EXPECT_FALSE(standing->requests_left);
}

TEST(ApiKeys, OccupancyPointsAdmitOnlyWhatTheBucketHoldsAndNothingInDebt) {
  ApiKey limited = key("a", "s");
  limited.occupancy_points_per_minute = 60000;  // 1000 a second
  ApiKeys keys({limited});
  const auto t0 = SteadyClock::now();
  ApiKeys::Demand demand;
  demand.work = ApiKeys::Work{0, 50000};
  EXPECT_EQ(refusal(keys.admit("Bearer s", demand, t0)), nullptr);
  keys.charge("a", "", 0, 70000, t0);  // took more than expected
  demand.work->occupancy_points = 0;   // an estimate of nothing still needs the debt paid
  const auto over = keys.admit("Bearer s", demand, t0 + std::chrono::seconds(5));
  ASSERT_NE(refusal(over), nullptr);
  EXPECT_NE(refusal(over)->message.find("occupancy_points_per_minute (60000)"), std::string::npos);
  EXPECT_EQ(refusal(over)->retry_after_s, 6);  // -5000 at 5 s, then one point
  EXPECT_EQ(refusal(keys.admit("Bearer s", demand, t0 + std::chrono::seconds(11))), nullptr);
}

TEST(ApiKeys, ARefusalTakesNothing) {
  ApiKey limited = key("a", "s", /*rpm=*/2);
  limited.shape_tokens_per_minute = 100;
  ApiKeys keys({limited});
  const auto t0 = SteadyClock::now();
  keys.charge("a", "", 100, 0, t0);
  for (int i = 0; i < 5; ++i) EXPECT_NE(refusal(keys.admit("Bearer s", tokens(10), t0)), nullptr);
  // The request bucket still holds both of its requests.
  EXPECT_EQ(refusal(keys.admit("Bearer s", tokens(0), t0)), nullptr);
  EXPECT_EQ(refusal(keys.admit("Bearer s", tokens(0), t0)), nullptr);
  EXPECT_NE(refusal(keys.admit("Bearer s", tokens(0), t0)), nullptr);
}

TEST(ApiKeys, EndUsersHaveTheirOwnLimitsUnderTheKey) {
  ApiKey limited = key("a", "s");
  limited.per_user = PerUserLimits{/*requests_per_minute=*/2, /*max_concurrent=*/1,
                                   /*shape_tokens_per_minute=*/1000};
  ApiKeys keys({limited});
  const auto t0 = SteadyClock::now();
  std::optional<ApiKeys::Ticket> held;
  {
    auto first = keys.admit("Bearer s", tokens(10, "u1"), t0);
    ASSERT_EQ(refusal(first), nullptr);
    held.emplace(std::move(std::get<ApiKeys::Ticket>(first)));
  }
  const auto busy = keys.admit("Bearer s", tokens(10, "u1"), t0);
  ASSERT_NE(refusal(busy), nullptr);
  EXPECT_NE(refusal(busy)->message.find("per_user.max_concurrent"), std::string::npos);
  EXPECT_EQ(refusal(busy)->message.find("u1"), std::string::npos) << "names the user";
  // Another end user, and the key without one, are not held back by u1.
  EXPECT_EQ(refusal(keys.admit("Bearer s", tokens(10, "u2"), t0)), nullptr);
  EXPECT_EQ(refusal(keys.admit("Bearer s", tokens(10), t0)), nullptr);
  held.reset();
  EXPECT_EQ(refusal(keys.admit("Bearer s", tokens(10, "u1"), t0)), nullptr);
  const auto rpm = keys.admit("Bearer s", tokens(10, "u1"), t0);
  ASSERT_NE(refusal(rpm), nullptr);
  EXPECT_NE(refusal(rpm)->message.find("per_user.requests_per_minute (2)"), std::string::npos);
  EXPECT_EQ(refusal(rpm)->retry_after_s, 30);

  keys.charge("a", "u2", 1000, 0, t0);
  const auto spent = keys.admit("Bearer s", tokens(10, "u2"), t0);
  ASSERT_NE(refusal(spent), nullptr);
  EXPECT_NE(refusal(spent)->message.find("per_user.shape_tokens_per_minute (1000)"),
            std::string::npos);
  EXPECT_EQ(refusal(keys.admit("Bearer s", tokens(10, "u3"), t0)), nullptr);
}

TEST(ApiKeys, IdleEndUsersAreForgottenSoMadeUpIdsCostBoundedMemory) {
  ApiKey limited = key("a", "s");
  limited.per_user = PerUserLimits{/*requests_per_minute=*/1000, {}, {}};
  ApiKeys keys({limited});
  const auto t0 = SteadyClock::now();
  for (int i = 0; i < 5000; ++i) {
    const std::string user = std::to_string(i) + "u";
    ASSERT_EQ(refusal(keys.admit("Bearer s", tokens(0, user), t0)), nullptr);
  }
  EXPECT_LE(keys.standing("a", t0)->end_users_tracked, 5000u);
  // A minute later every one of them is full and idle: the next new user's prune drops them.
  const auto later = t0 + std::chrono::seconds(61);
  for (int i = 0; i < 5000; ++i) {
    const std::string user = std::to_string(i) + "v";
    ASSERT_EQ(refusal(keys.admit("Bearer s", tokens(0, user), later)), nullptr);
  }
  EXPECT_LT(keys.standing("a", later)->end_users_tracked, 8000u);
}

TEST(ApiKeys, WorkLimitsCanBeCheckedOnceARequestIsKnownToCompute) {
  ApiKey limited = key("a", "s");
  limited.shape_tokens_per_minute = 600;
  limited.per_user = PerUserLimits{{}, {}, /*shape_tokens_per_minute=*/300};
  ApiKeys keys({limited});
  const auto t0 = SteadyClock::now();
  keys.charge("a", "", 600, 0, t0);
  // Without work in the demand the spent budget does not refuse: a cache hit needs none.
  ApiKeys::Demand hit;
  hit.end_user = "u1";
  auto ticket = keys.admit("Bearer s", hit, t0);
  ASSERT_EQ(refusal(ticket), nullptr);
  const auto over = keys.check_work("a", "u1", ApiKeys::Work{128, 0}, t0);
  ASSERT_TRUE(over);
  EXPECT_NE(over->message.find("shape_tokens_per_minute (600)"), std::string::npos);
  EXPECT_EQ(over->retry_after_s, 13);  // 128 tokens at 10 a second
  keys.replace({key("a", "s")});
  EXPECT_FALSE(keys.check_work("a", "u1", ApiKeys::Work{128, 0}, t0));
  limited.shape_tokens_per_minute.reset();
  keys.replace({limited});
  keys.charge("a", "u1", 300, 0, t0);
  const auto user_over = keys.check_work("a", "u1", ApiKeys::Work{1, 0}, t0);
  ASSERT_TRUE(user_over);
  EXPECT_NE(user_over->message.find("per_user.shape_tokens_per_minute (300)"), std::string::npos);
  EXPECT_FALSE(keys.check_work("gone", "", ApiKeys::Work{1, 0}, t0));
}

TEST(ApiKeys, TicketsSayWhenAKeyRunsAsBatch) {
  ApiKey batch = key("b", "t");
  batch.batch_only = true;
  ApiKeys keys({key("a", "s"), batch});
  EXPECT_FALSE(std::get<ApiKeys::Ticket>(keys.admit("Bearer s")).batch_only());
  EXPECT_TRUE(std::get<ApiKeys::Ticket>(keys.admit("Bearer t")).batch_only());
}

TEST(ApiKeys, ReplaceKeepsWorkBucketsAndAppliesNewRates) {
  ApiKey limited = key("a", "s");
  limited.shape_tokens_per_minute = 1000;
  ApiKeys keys({limited});
  const auto t0 = SteadyClock::now();
  keys.charge("a", "", 990, 0, t0);
  limited.shape_tokens_per_minute = 50;  // the level (10) carries over
  keys.replace({limited});
  EXPECT_NE(refusal(keys.admit("Bearer s", tokens(20), t0)), nullptr);
  EXPECT_EQ(refusal(keys.admit("Bearer s", tokens(10), t0)), nullptr);
  keys.charge("a", "", 40, 0, t0);
  limited.shape_tokens_per_minute = 5000;  // a higher rate does not fill the bucket
  keys.replace({limited});
  EXPECT_NE(refusal(keys.admit("Bearer s", tokens(1), t0)), nullptr);
  keys.replace({key("a", "s")});  // the limit gone: nothing to refuse
  EXPECT_EQ(refusal(keys.admit("Bearer s", tokens(1'000'000), t0)), nullptr);
  keys.charge("gone", "", 5, 5, t0);  // a key removed since is charged nothing, harmlessly
  EXPECT_FALSE(keys.standing("gone"));
}

TEST(ApiKeys, AdmitChargeReleaseAndReplaceAreSafeTogether) {
  // Run under TSan too (scripts/sanitize.sh): the front doors admit on their threads, the
  // executor charges on its own, SIGHUP replaces on the signal watcher's.
  ApiKey limited = key("a", "s", /*rpm=*/1e6, /*concurrent=*/1000);
  limited.shape_tokens_per_minute = 1e9;
  limited.per_user = PerUserLimits{1e6, 100, 1e9};
  ApiKeys keys({limited, key("b", "t")});
  std::atomic<int64_t> admitted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        const std::string user = std::to_string(i % 7) + "u";
        auto ticket = keys.admit(t % 2 ? "Bearer s" : "Bearer t", tokens(64, user));
        if (std::holds_alternative<ApiKeys::Ticket>(ticket)) ++admitted;
        keys.charge("a", user, 64, 1000);
        (void)keys.standing("a");
      }
    });
  }
  threads.emplace_back([&] {
    for (int i = 0; i < 50; ++i) keys.replace({limited, key("b", "t")});
  });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(admitted.load(), 4 * 500);
  EXPECT_EQ(keys.standing("a")->running, 0) << "every ticket gave its place back";
}

}  // namespace test_api_keys
}  // namespace cube3d
