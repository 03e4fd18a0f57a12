// The pool of idle senders: reuse of the one given back last, a new one only when all are
// taken.
#include "cube3d/clients/sender_pool.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>

#include "clients/fake_sender.h"

namespace cube3d {
namespace test_sender_pool {

using testing::FakeSenderFactory;

TEST(SenderPoolTest, MakesSendersOnlyWhenAllAreTaken) {
  const auto factory = std::make_shared<FakeSenderFactory>();
  SenderPool pool(factory);
  EXPECT_EQ(pool.created(), 0u);
  {
    const SenderPool::Lease a = pool.take();
    const SenderPool::Lease b = pool.take();
    EXPECT_EQ(pool.created(), 2u);
    EXPECT_EQ(pool.idle(), 0u);
  }
  EXPECT_EQ(pool.idle(), 2u);
  {
    const SenderPool::Lease c = pool.take();
    EXPECT_EQ(pool.created(), 2u);
    EXPECT_EQ(pool.idle(), 1u);
  }
  EXPECT_EQ(factory->made(), 2);
}

TEST(SenderPoolTest, TheSenderGivenBackLastComesFirst) {
  const auto factory = std::make_shared<FakeSenderFactory>();
  SenderPool pool(factory);
  const v1::GenerateMeshRequest request;
  std::optional<SenderPool::Lease> first(pool.take());
  std::optional<SenderPool::Lease> second(pool.take());
  RequestSender* const second_sender = &**second;
  second.reset();
  first.reset();  // given back last
  RequestSender* const first_sender = &*pool.take();
  EXPECT_NE(first_sender, second_sender);
  const SenderPool::Lease again = pool.take();
  const SenderPool::Lease other = pool.take();
  EXPECT_EQ(&*again, first_sender);  // the previous lease went back at once
  EXPECT_EQ(&*other, second_sender);
  EXPECT_EQ(pool.created(), 2u);
}

TEST(SenderPoolTest, AMovedLeaseGivesBackOnce) {
  SenderPool pool(std::make_shared<FakeSenderFactory>());
  {
    SenderPool::Lease a = pool.take();
    const SenderPool::Lease b = std::move(a);
  }
  EXPECT_EQ(pool.idle(), 1u);
  EXPECT_EQ(pool.created(), 1u);
}

}  // namespace test_sender_pool
}  // namespace cube3d
