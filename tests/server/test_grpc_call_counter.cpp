// The request counter's rule for the code a client saw (the hooks themselves run in a real
// server: tests/e2e/test_observability_e2e.py).
#include "cube3d/server/grpc_call_counter.h"

#include <gtest/gtest.h>

#include <chrono>

namespace cube3d {
namespace {

TEST(GrpcCallCounter, ACallThatEndedNormallyCountsTheCodeSent) {
  for (const char* code : {"OK", "INVALID_ARGUMENT", "RESOURCE_EXHAUSTED", "INTERNAL"}) {
    EXPECT_EQ(GrpcCallCounter::code_seen_by_client(code, false, false, false), code);
    // A deadline behind us does not change what a completed call's client got.
    EXPECT_EQ(GrpcCallCounter::code_seen_by_client(code, false, true, false), code);
  }
  // A call without its message whose status went out: the client sent none, and got the
  // server's answer.
  EXPECT_EQ(GrpcCallCounter::code_seen_by_client("INVALID_ARGUMENT", false, false, true),
            "INVALID_ARGUMENT");
}

TEST(GrpcCallCounter, ACancelledCallCountsWhatEndedIt) {
  // Whatever the handler answered, the client saw its deadline or its own cancellation.
  EXPECT_EQ(GrpcCallCounter::code_seen_by_client("OK", true, true, false), "DEADLINE_EXCEEDED");
  EXPECT_EQ(GrpcCallCounter::code_seen_by_client("OK", true, false, false), "CANCELLED");
  EXPECT_EQ(GrpcCallCounter::code_seen_by_client("", true, false, false), "CANCELLED");
  // The transport refused the message (over the receive limit) and failed the call.
  EXPECT_EQ(GrpcCallCounter::code_seen_by_client("INVALID_ARGUMENT", true, false, true),
            "RESOURCE_EXHAUSTED");
  // ... unless the deadline ended it first.
  EXPECT_EQ(GrpcCallCounter::code_seen_by_client("INVALID_ARGUMENT", true, true, true),
            "DEADLINE_EXCEEDED");
}

TEST(GrpcCallCounter, NoStatusSentIsACancellation) {
  EXPECT_EQ(GrpcCallCounter::code_seen_by_client("", false, false, false), "CANCELLED");
}

TEST(GrpcCallCounter, TheDeadlineCountsFromSlackBeforeIt) {
  const auto now = std::chrono::system_clock::now();
  EXPECT_TRUE(GrpcCallCounter::deadline_reached(now - std::chrono::seconds(1)));
  EXPECT_TRUE(GrpcCallCounter::deadline_reached(now + GrpcCallCounter::kDeadlineSlack / 2));
  EXPECT_FALSE(GrpcCallCounter::deadline_reached(now + std::chrono::seconds(5)));
  EXPECT_FALSE(GrpcCallCounter::deadline_reached(std::chrono::system_clock::time_point::max()));
}

}  // namespace
}  // namespace cube3d
