// The flags of every call cube3d-client and cube3d-loadgen make (call_flags.h): declared in
// order with the caller's words and the shared range and default, --max-attempts read into a
// RetryPolicy with its check, --api-key from the flag or $CUBE3D_API_KEY, and how a key is sent.
#include "cube3d/clients/call_flags.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cube3d/clients/request_sender.h"
#include "expect_error.h"
#include "expect_in_order.h"
#include "parsed_flags.h"
#include "scoped_env.h"

namespace cube3d {
namespace test_call_flags {

using testing::ScopedEnv;

CliArgs with_call_flags() {
  CliArgs args("tool", "Does a thing.");
  args.option("--before", 1, "declared first", "B");
  add_call_flags(args, {.max_attempts = "the tool's attempts"}).option("--after", 0, "last");
  return args;
}

CliArgs parsed(const std::vector<const char*>& flags) {
  return testing::parsed_flags(with_call_flags(), flags);
}

TEST(CallFlags, HelpShowsTheCallersWordsThenTheSharedRangeAndDefault) {
  testing::expect_in_order(
      with_call_flags().help(),
      {"--before B", "--max-attempts N",
       "the tool's attempts, the first included: 1..10 (default 5; 1:",  // (wrapped)
       "--api-key KEY", "API key, sent as 'authorization: Bearer <key>'", "[env: CUBE3D_API_KEY]",
       "--after"});
}

TEST(CallFlags, MaxAttemptsDefaultsToTheRetryPolicysAndIsChecked) {
  EXPECT_EQ(retry_policy_from_args(parsed({})).max_attempts, RetryPolicy{}.max_attempts);
  EXPECT_EQ(retry_policy_from_args(parsed({"--max-attempts", "1"})).max_attempts, 1);
  EXPECT_EQ(retry_policy_from_args(parsed({"--max-attempts=10"})).max_attempts, kMaxCallAttempts);
  testing::expect_error(
      [] {
        (void)retry_policy_from_args(parsed({"--max-attempts", "11"}));
      },
      ErrorCode::kInvalidArgument, "--max-attempts 11: expected 1..10");
}

TEST(CallFlags, ApiKeyComesFromTheFlagThenTheEnvironment) {
  {
    const ScopedEnv unset("CUBE3D_API_KEY", nullptr);
    EXPECT_EQ(api_key_from_args(parsed({})), "");
    EXPECT_EQ(api_key_from_args(parsed({"--api-key", "k1"})), "k1");
  }
  const ScopedEnv set("CUBE3D_API_KEY", "from-env");
  EXPECT_EQ(api_key_from_args(parsed({})), "from-env");
  EXPECT_EQ(api_key_from_args(parsed({"--api-key=k1"})), "k1");  // the flag beats the variable
}

TEST(CallFlags, AKeyIsSentAsABearerTokenAndNoKeyAsNothing) {
  EXPECT_EQ(bearer_authorization("k1"), "Bearer k1");
  EXPECT_EQ(bearer_authorization(""), "");
}

}  // namespace test_call_flags
}  // namespace cube3d
