// The bound on calls awaiting their request message (grpc.max_calls_awaiting_message): beyond it
// the call that has waited longest is refused RESOURCE_EXHAUSTED, on the registering thread; a
// call whose message came, or that is gone, no longer counts.
#include "cube3d/server/grpc/awaiting_calls.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cube3d/core/error.h"

namespace cube3d::test_awaiting_calls {

struct FakeCall final : AwaitingCalls::Call {
  void refuse_unread(const grpc::Status& status) override { refused = status; }
  std::optional<grpc::Status> refused;
};

std::vector<std::shared_ptr<FakeCall>> make_calls(size_t n) {
  std::vector<std::shared_ptr<FakeCall>> calls;
  for (size_t i = 0; i < n; ++i) calls.push_back(std::make_shared<FakeCall>());
  return calls;
}

TEST(AwaitingCalls, BeyondTheBoundTheOldestIsRefusedNamingTheKey) {
  AwaitingCalls awaiting(3);
  const auto calls = make_calls(5);
  for (const auto& call : calls) awaiting.await(call);
  ASSERT_TRUE(calls[0]->refused.has_value());
  ASSERT_TRUE(calls[1]->refused.has_value());
  EXPECT_EQ(calls[0]->refused->error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(calls[0]->refused->error_message().find("grpc.max_calls_awaiting_message 3"),
            std::string::npos)
      << calls[0]->refused->error_message();
  for (size_t i = 2; i < calls.size(); ++i) EXPECT_FALSE(calls[i]->refused) << i;
  EXPECT_EQ(awaiting.waiting(), 3u);
}

TEST(AwaitingCalls, ACallWhoseMessageCameNoLongerCounts) {
  AwaitingCalls awaiting(2);
  const auto calls = make_calls(4);
  const uint64_t first = awaiting.await(calls[0]);
  const uint64_t second = awaiting.await(calls[1]);
  awaiting.arrived(first);
  awaiting.arrived(second);
  awaiting.arrived(second);  // twice: harmless
  awaiting.await(calls[2]);
  awaiting.await(calls[3]);
  for (const auto& call : calls) EXPECT_FALSE(call->refused);
  EXPECT_EQ(awaiting.waiting(), 2u);
}

TEST(AwaitingCalls, ACallAlreadyGoneIsDroppedWithoutARefusal) {
  AwaitingCalls awaiting(1);
  auto gone = std::make_shared<FakeCall>();
  awaiting.await(gone);
  gone.reset();  // its reactor ended without saying so
  const auto next = std::make_shared<FakeCall>();
  awaiting.await(next);  // evicts the gone one: nothing to refuse
  EXPECT_FALSE(next->refused);
  EXPECT_EQ(awaiting.waiting(), 1u);
}

TEST(AwaitingCalls, ABoundBelowOneIsRefused) { EXPECT_THROW(AwaitingCalls(0), Error); }

}  // namespace cube3d::test_awaiting_calls
