// The lease renewal's rounds (renewal_rounds.h): the next round only once the one before is done,
// none after the round stops asking, none once the owner's gate is closed or the owner is gone,
// and each inside a pass of the gate.
#include "cube3d/server/timing/renewal_rounds.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "eventually.h"

namespace cube3d {
namespace test_renewal_rounds {

using namespace std::chrono_literals;
using testing::eventually;

// An owner as the stores are: its mutex guards the gate and the slot.
struct Owner {
  std::mutex mutex;
  ActionGate gate{mutex};
  TimerQueue::Timer slot;
  // What the rounds saw (guarded by mutex).
  int rounds = 0;
  bool in_a_pass = true;
  std::function<void()> next;  // the last round's, kept to call later

  int rounds_now() {
    const std::lock_guard lock(mutex);
    return rounds;
  }
  std::function<void()> take_next() {
    const std::lock_guard lock(mutex);
    return std::exchange(next, nullptr);
  }
  void close() {
    TimerQueue::Timer timer;
    {
      std::unique_lock lock(mutex);
      gate.close_locked();
      timer = std::move(slot);
      gate.wait_idle(lock);
    }
    timer.cancel();
  }
};

// A round that counts itself and keeps `next` for the test to call.
RenewalRound keeping_round(const std::weak_ptr<Owner>& weak) {
  return [weak](std::function<void()> next) {
    const auto owner = weak.lock();
    const std::lock_guard lock(owner->mutex);
    ++owner->rounds;
    owner->in_a_pass = owner->in_a_pass && owner->gate.in_progress() == 1;
    owner->next = std::move(next);
  };
}

TEST(RenewalRounds, TheNextRoundOnlyOnceTheOneBeforeIsDone) {
  TimerQueue timers;
  const auto owner = std::make_shared<Owner>();
  schedule_renewal_rounds(owner->gate, timers, owner->slot, 1ms, owner, keeping_round(owner));
  ASSERT_TRUE(eventually([&] { return owner->rounds_now() == 1; }));
  // Many periods pass with the first round's reply outstanding (a stalled Redis): no other
  // round is sent meanwhile.
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(owner->rounds_now(), 1);
  // Its reply comes: the next round follows a period later, and the one after that again waits.
  owner->take_next()();
  ASSERT_TRUE(eventually([&] { return owner->rounds_now() == 2; }));
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(owner->rounds_now(), 2);
  {
    const std::lock_guard lock(owner->mutex);
    EXPECT_TRUE(owner->in_a_pass);  // each round ran inside a pass of the owner's gate
  }
  // A round that never calls its next ends the renewal; close() finds nothing armed.
  owner->close();
}

TEST(RenewalRounds, ARoundDoneAtOnceArmsTheNextFromInsideIt) {
  // Refused at once (Redis known down, nothing to renew): next() inline, inside the round.
  TimerQueue timers;
  const auto owner = std::make_shared<Owner>();
  schedule_renewal_rounds(owner->gate, timers, owner->slot, 1ms, owner,
                          [weak = std::weak_ptr<Owner>(owner)](std::function<void()> next) {
                            {
                              const auto o = weak.lock();
                              const std::lock_guard lock(o->mutex);
                              ++o->rounds;
                            }
                            next();
                          });
  EXPECT_TRUE(eventually([&] { return owner->rounds_now() >= 5; }));
  owner->close();
  const int at_close = owner->rounds_now();
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(owner->rounds_now(), at_close);
}

TEST(RenewalRounds, NoRoundOnceTheGateIsClosed) {
  TimerQueue timers;
  const auto owner = std::make_shared<Owner>();
  schedule_renewal_rounds(owner->gate, timers, owner->slot, 1ms, owner, keeping_round(owner));
  ASSERT_TRUE(eventually([&] { return owner->rounds_now() == 1; }));
  const std::function<void()> next = owner->take_next();
  owner->close();
  next();  // the reply comes after close(): nothing is armed
  {
    const std::lock_guard lock(owner->mutex);
    EXPECT_FALSE(owner->slot);
  }
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(owner->rounds_now(), 1);
}

TEST(RenewalRounds, NoRoundOnceTheOwnerIsGone) {
  TimerQueue timers;
  const auto rounds = std::make_shared<std::atomic<int>>(0);  // outlives the owner
  auto owner = std::make_shared<Owner>();
  schedule_renewal_rounds(owner->gate, timers, owner->slot, 1ms, owner,
                          [weak = std::weak_ptr<Owner>(owner), rounds](std::function<void()> n) {
                            ++*rounds;
                            const auto o = weak.lock();  // alive: the rounds hold it for the round
                            const std::lock_guard lock(o->mutex);
                            o->next = std::move(n);
                          });
  ASSERT_TRUE(eventually([&] { return rounds->load() == 1; }));
  const std::function<void()> next = owner->take_next();
  // The owner goes without close() (its slot's timer cancelled as it is destroyed); the reply
  // that comes later touches nothing of it (the sanitizers would see a freed gate touched) and
  // arms nothing.
  owner.reset();
  next();
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(rounds->load(), 1);
}

}  // namespace test_renewal_rounds
}  // namespace cube3d
