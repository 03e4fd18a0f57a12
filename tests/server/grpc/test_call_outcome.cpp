// The request counter's rule for the code a gRPC client saw (the reactors that apply it run in a
// real server: tests/e2e/test_observability_e2e.py).
#include "cube3d/server/grpc/call_outcome.h"

#include <gtest/gtest.h>

#include <chrono>

namespace cube3d {
namespace test_call_outcome {

TEST(GrpcCallOutcome, ACallThatEndedNormallyCountsTheCodeSent) {
  for (const char* code : {"OK", "INVALID_ARGUMENT", "RESOURCE_EXHAUSTED", "INTERNAL"}) {
    EXPECT_EQ(grpc_outcome::code_seen_by_client(code, false, false, false), code);
    // A deadline behind us does not change what a completed call's client got.
    EXPECT_EQ(grpc_outcome::code_seen_by_client(code, false, true, false), code);
  }
  // A call without its message whose status went out: the client sent none, and got the
  // server's answer.
  EXPECT_EQ(grpc_outcome::code_seen_by_client("INVALID_ARGUMENT", false, false, true),
            "INVALID_ARGUMENT");
}

TEST(GrpcCallOutcome, ACancelledCallCountsWhatEndedIt) {
  // Whatever the handler answered, the client saw its deadline or its own cancellation.
  EXPECT_EQ(grpc_outcome::code_seen_by_client("OK", true, true, false), "DEADLINE_EXCEEDED");
  EXPECT_EQ(grpc_outcome::code_seen_by_client("OK", true, false, false), "CANCELLED");
  EXPECT_EQ(grpc_outcome::code_seen_by_client("", true, false, false), "CANCELLED");
  // The transport refused the message (over the receive limit) and failed the call.
  EXPECT_EQ(grpc_outcome::code_seen_by_client("INVALID_ARGUMENT", true, false, true),
            "RESOURCE_EXHAUSTED");
  // ... unless the deadline ended it first.
  EXPECT_EQ(grpc_outcome::code_seen_by_client("INVALID_ARGUMENT", true, true, true),
            "DEADLINE_EXCEEDED");
}

TEST(GrpcCallOutcome, NoStatusSentIsACancellation) {
  EXPECT_EQ(grpc_outcome::code_seen_by_client("", false, false, false), "CANCELLED");
}

TEST(GrpcCallOutcome, TheDeadlineCountsFromSlackBeforeIt) {
  const auto now = std::chrono::system_clock::now();
  EXPECT_TRUE(grpc_outcome::deadline_reached(now - std::chrono::seconds(1)));
  EXPECT_TRUE(grpc_outcome::deadline_reached(now + grpc_outcome::kDeadlineSlack / 2));
  EXPECT_FALSE(grpc_outcome::deadline_reached(now + std::chrono::seconds(5)));
  EXPECT_FALSE(grpc_outcome::deadline_reached(std::chrono::system_clock::time_point::max()));
}

}  // namespace test_call_outcome
}  // namespace cube3d
