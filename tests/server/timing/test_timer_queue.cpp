// The timer queue behind request deadlines and request-read timeouts.
#include "cube3d/server/timing/timer_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "eventually.h"

namespace cube3d {
namespace test_timer_queue {

using std::chrono::milliseconds;
using Clock = TimerQueue::Clock;

using testing::eventually;

TEST(TimerQueue, RunsEachActionOnceAtOrAfterItsTime) {
  TimerQueue queue;
  std::atomic<int> runs{0};
  const auto due = Clock::now() + milliseconds(40);
  std::atomic<int64_t> late_ns{-1};
  TimerQueue::Timer timer = queue.schedule(due, [&] {
    late_ns = (Clock::now() - due).count();
    ++runs;
  });
  ASSERT_TRUE(eventually([&] { return runs.load() == 1; }));
  EXPECT_GE(late_ns.load(), 0);
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(runs.load(), 1);
  EXPECT_TRUE(timer.cancel());   // it had run
  EXPECT_FALSE(timer.cancel());  // a second cancel has nothing left
}

TEST(TimerQueue, ACancelledActionNeverRuns) {
  TimerQueue queue;
  std::atomic<int> runs{0};
  TimerQueue::Timer timer = queue.schedule_after(milliseconds(100), [&] { ++runs; });
  EXPECT_EQ(queue.pending(), 1u);
  EXPECT_FALSE(timer.cancel());
  EXPECT_EQ(queue.pending(), 0u);
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_EQ(runs.load(), 0);
}

TEST(TimerQueue, DestroyingATimerCancelsIt) {
  TimerQueue queue;
  std::atomic<int> runs{0};
  {
    const TimerQueue::Timer timer = queue.schedule_after(milliseconds(30), [&] { ++runs; });
  }
  std::this_thread::sleep_for(milliseconds(120));
  EXPECT_EQ(runs.load(), 0);
}

TEST(TimerQueue, ActionsRunInTheOrderOfTheirTimesNotOfScheduling) {
  TimerQueue queue;
  std::mutex mutex;
  std::vector<int> order;
  const auto now = Clock::now();
  std::vector<TimerQueue::Timer> timers;
  for (const int i : {3, 1, 2, 0}) {
    timers.push_back(queue.schedule(now + milliseconds(20 + 30 * i), [&, i] {
      const std::lock_guard lock(mutex);
      order.push_back(i);
    }));
  }
  ASSERT_TRUE(eventually([&] {
    const std::lock_guard lock(mutex);
    return order.size() == 4;
  }));
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
}

TEST(TimerQueue, AnEarlierTimerWakesTheThreadWaitingForALaterOne) {
  TimerQueue queue;
  std::atomic<bool> early_ran{false};
  TimerQueue::Timer late = queue.schedule_after(std::chrono::hours(1), [] {});
  std::this_thread::sleep_for(milliseconds(20));  // the thread now sleeps for an hour
  TimerQueue::Timer early = queue.schedule_after(milliseconds(10), [&] { early_ran = true; });
  EXPECT_TRUE(eventually([&] { return early_ran.load(); }));
}

TEST(TimerQueue, ATimerWithdrawnWhileTheThreadWaitsForIt) {
  // The thread waits for the first entry's time; withdrawing that entry meanwhile must not leave
  // the thread reading it (ASan), and must not run it.
  TimerQueue queue;
  std::atomic<int> runs{0};
  TimerQueue::Timer first = queue.schedule_after(milliseconds(150), [&] { ++runs; });
  std::this_thread::sleep_for(milliseconds(30));
  EXPECT_FALSE(first.cancel());
  TimerQueue::Timer next = queue.schedule_after(milliseconds(400), [&] { ++runs; });
  std::this_thread::sleep_for(milliseconds(250));  // past the first one's time
  EXPECT_EQ(runs.load(), 0);
  EXPECT_FALSE(next.cancel());
}

TEST(TimerQueue, CancelNeverWaitsForARunningActionThatTakesTheSameLock) {
  // The service core's pattern: the deadline action and the call's own completion take the
  // call's lock, and the completion cancels the deadline timer while holding it.
  TimerQueue queue;
  std::mutex call_lock;
  std::atomic<bool> started{false};
  std::atomic<bool> ran{false};
  TimerQueue::Timer timer;
  {
    const std::lock_guard lock(call_lock);
    timer = queue.schedule_after(milliseconds(1), [&] {
      started = true;
      const std::lock_guard action_lock(call_lock);  // blocks until the owner lets go
      ran = true;
    });
    ASSERT_TRUE(eventually([&] { return started.load(); }));
    EXPECT_TRUE(timer.cancel());  // returns at once although the action is running
  }
  EXPECT_TRUE(eventually([&] { return ran.load(); }));
}

TEST(TimerQueue, AnActionMayScheduleAndCancelTimers) {
  TimerQueue queue;
  std::atomic<int> second_runs{0};
  TimerQueue::Timer second;
  std::mutex mutex;
  TimerQueue::Timer first = queue.schedule_after(milliseconds(5), [&] {
    const std::lock_guard lock(mutex);
    second = queue.schedule_after(milliseconds(5), [&] { ++second_runs; });
  });
  EXPECT_TRUE(eventually([&] { return second_runs.load() == 1; }));
  const std::lock_guard lock(mutex);
  EXPECT_TRUE(second.cancel());
}

TEST(TimerQueue, AMovedTimerKeepsItsAction) {
  TimerQueue queue;
  std::atomic<int> runs{0};
  TimerQueue::Timer a = queue.schedule_after(milliseconds(100), [&] { ++runs; });
  TimerQueue::Timer b = std::move(a);
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): a moved-from timer is empty
  EXPECT_FALSE(a.cancel());
  EXPECT_EQ(queue.pending(), 1u);
  TimerQueue::Timer c = queue.schedule_after(milliseconds(1), [&] { runs += 10; });
  c = std::move(b);  // c's own action is cancelled, b's moves in
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(runs.load(), 0);
  EXPECT_TRUE(eventually([&] { return runs.load() == 1; }));
}

TEST(TimerQueue, StopsPromptlyWithPendingTimersThatThenNeverRun) {
  auto queue = std::make_unique<TimerQueue>();
  std::atomic<int> runs{0};
  std::vector<TimerQueue::Timer> timers;
  for (int i = 0; i < 1000; ++i) {
    timers.push_back(queue->schedule_after(std::chrono::hours(1), [&] { ++runs; }));
  }
  for (auto& t : timers) EXPECT_FALSE(t.cancel());
  const auto start = Clock::now();
  queue.reset();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(runs.load(), 0);
}

TEST(TimerQueue, ManyTimersFromManyThreads) {
  TimerQueue queue;
  std::atomic<int> runs{0};
  std::vector<std::thread> threads;
  std::mutex mutex;
  std::vector<TimerQueue::Timer> kept;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 250; ++i) {
        TimerQueue::Timer timer = queue.schedule_after(milliseconds(i % 7), [&] { ++runs; });
        if ((i + t) % 2 == 0) {
          timer.cancel();
        } else {
          const std::lock_guard lock(mutex);
          kept.push_back(std::move(timer));
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(eventually([&] { return runs.load() >= 500; }));
  std::this_thread::sleep_for(milliseconds(30));
  // Each kept timer ran once; some cancelled ones may have started before their cancel.
  EXPECT_GE(runs.load(), 500);
  EXPECT_LE(runs.load(), 1000);
}

}  // namespace test_timer_queue
}  // namespace cube3d
