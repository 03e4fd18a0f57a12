// The gate between an object's close() and its timer actions (action_gate.h): a pass for each
// action while the gate is open and none once it is closed; wait_idle() returns only when every
// pass has ended, however its action left (a throw included); a pass ends once, moved or not;
// schedule() arms a timer while the gate is open and none once it is closed.
#include "cube3d/server/timing/action_gate.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>

#include "eventually.h"

namespace cube3d {
namespace test_action_gate {

using testing::eventually;

int in_progress(std::mutex& mutex, const ActionGate& gate) {
  const std::lock_guard lock(mutex);
  return gate.in_progress();
}

bool closed(std::mutex& mutex, const ActionGate& gate) {
  const std::lock_guard lock(mutex);
  return gate.closed();
}

TEST(ActionGate, APassWhileOpenNoneOnceClosed) {
  std::mutex mutex;
  ActionGate gate(mutex);
  {
    const ActionGate::Pass pass = gate.enter();
    EXPECT_TRUE(pass);
    EXPECT_EQ(in_progress(mutex, gate), 1);
  }
  EXPECT_EQ(in_progress(mutex, gate), 0);
  {
    const std::lock_guard lock(mutex);
    EXPECT_FALSE(gate.closed());
    gate.close_locked();
    EXPECT_TRUE(gate.closed());
  }
  const ActionGate::Pass late = gate.enter();
  EXPECT_FALSE(late);
  EXPECT_EQ(in_progress(mutex, gate), 0);  // an empty pass counts for nothing
}

TEST(ActionGate, EnterLockedIsForAnActionThatStartsUnderTheOwnersLock) {
  std::mutex mutex;
  ActionGate gate(mutex);
  ActionGate::Pass pass;  // declared first: it ends after the lock is gone
  {
    const std::lock_guard lock(mutex);
    pass = gate.enter_locked();
    EXPECT_EQ(gate.in_progress(), 1);
  }
  EXPECT_TRUE(pass);
  pass = ActionGate::Pass();  // assigning ends the one it held
  EXPECT_EQ(in_progress(mutex, gate), 0);
}

TEST(ActionGate, APassEndsWhenItsActionThrows) {
  std::mutex mutex;
  ActionGate gate(mutex);
  EXPECT_THROW(
      {
        const ActionGate::Pass pass = gate.enter();
        throw std::runtime_error("the action failed");
      },
      std::runtime_error);
  EXPECT_EQ(in_progress(mutex, gate), 0);  // a hand-held count would stay at 1: close() hangs
}

TEST(ActionGate, AMovedPassEndsOnce) {
  std::mutex mutex;
  ActionGate gate(mutex);
  ActionGate::Pass first = gate.enter();
  ActionGate::Pass second = gate.enter();
  EXPECT_EQ(in_progress(mutex, gate), 2);
  {
    const ActionGate::Pass moved(std::move(first));
    EXPECT_FALSE(first);  // NOLINT(bugprone-use-after-move): moved from on purpose
    EXPECT_EQ(in_progress(mutex, gate), 2);
  }
  EXPECT_EQ(in_progress(mutex, gate), 1);
  first = std::move(second);  // into an empty pass: still one action
  EXPECT_EQ(in_progress(mutex, gate), 1);
  first = ActionGate::Pass();
  EXPECT_EQ(in_progress(mutex, gate), 0);
}

TEST(ActionGate, WaitIdleReturnsOnlyOnceTheActionsInProgressHaveEnded) {
  std::mutex mutex;
  ActionGate gate(mutex);
  std::atomic<bool> release{false};
  std::atomic<bool> entered{false};
  std::thread action([&] {
    const ActionGate::Pass pass = gate.enter();
    entered = true;
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  ASSERT_TRUE(eventually([&] { return entered.load(); }));

  std::atomic<bool> returned{false};
  std::thread closer([&] {
    std::unique_lock lock(mutex);
    gate.close_locked();
    gate.wait_idle(lock);
    returned = true;
  });
  ASSERT_TRUE(eventually([&] { return closed(mutex, gate); }));
  // The action still runs: the close must not have returned (given a moment to go wrong).
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(returned);
  EXPECT_FALSE(gate.enter());  // closed: no new action
  release = true;
  action.join();
  EXPECT_TRUE(eventually([&] { return returned.load(); }));
  closer.join();
}

TEST(ActionGate, ScheduleArmsATimerWhileOpenAndNoneOnceClosed) {
  TimerQueue timers;  // first: it outlives the slot
  std::mutex mutex;
  ActionGate gate(mutex);
  TimerQueue::Timer slot;
  std::atomic<int> ran{0};
  EXPECT_TRUE(gate.schedule(timers, slot, std::chrono::milliseconds(1), [&] { ++ran; }));
  EXPECT_TRUE(eventually([&] { return ran.load() == 1; }));

  // Armed, then closed: the slot keeps what was armed (the owner's close() cancels it), and
  // nothing new is armed, however soon it would be due.
  EXPECT_TRUE(gate.schedule(timers, slot, std::chrono::hours(1), [&] { ++ran; }));
  {
    const std::lock_guard lock(mutex);
    gate.close_locked();
  }
  EXPECT_FALSE(gate.schedule(timers, slot, std::chrono::milliseconds(0), [&] { ++ran; }));
  EXPECT_TRUE(slot);
  EXPECT_EQ(timers.pending(), 1u);
  EXPECT_FALSE(slot.cancel());  // withdrawn before it started
  EXPECT_EQ(timers.pending(), 0u);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a moment to go wrong
  EXPECT_EQ(ran.load(), 1);
}

}  // namespace test_action_gate
}  // namespace cube3d
