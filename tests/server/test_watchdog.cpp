// The watchdog that bounds how long a gRPC call may take to send its request message.
#include "cube3d/server/watchdog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

namespace cube3d {
namespace {

using std::chrono::milliseconds;

TEST(Watchdog, AWatchClosedInTimeNeverCancels) {
  Watchdog dog(milliseconds(200));
  std::atomic<int> cancelled{0};
  Watchdog::Watch watch = dog.watch([&] { ++cancelled; });
  EXPECT_FALSE(watch.close());
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(cancelled.load(), 0);
  EXPECT_FALSE(watch.close());  // closing twice is harmless
}

TEST(Watchdog, AWatchClosedWhileTheWatchdogWaitsForIt) {
  // The watchdog waits for the first open watch's time; closing that watch meanwhile frees its
  // entry, which the waiting thread must no longer read (ASan caught a wait_until on the
  // entry's own time point).
  Watchdog dog(milliseconds(300));
  std::atomic<int> cancelled{0};
  Watchdog::Watch watch = dog.watch([&] { ++cancelled; });
  std::this_thread::sleep_for(milliseconds(50));  // the watchdog now waits for it
  EXPECT_FALSE(watch.close());
  Watchdog::Watch next = dog.watch([&] { ++cancelled; });  // reuses the freed memory, likely
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_FALSE(next.close());
  std::this_thread::sleep_for(milliseconds(300));  // past the first watch's time
  EXPECT_EQ(cancelled.load(), 0);
}

TEST(Watchdog, AWatchStillOpenAfterTheLimitIsCancelledOnce) {
  Watchdog dog(milliseconds(50));
  std::atomic<int> cancelled{0};
  Watchdog::Watch watch = dog.watch([&] { ++cancelled; });
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (cancelled.load() == 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(cancelled.load(), 1);
  EXPECT_TRUE(watch.close());
}

TEST(Watchdog, OnlyTheLateOnesAreCancelled) {
  Watchdog dog(milliseconds(100));
  std::atomic<int> early{0};
  std::atomic<int> late{0};
  Watchdog::Watch closes_early = dog.watch([&] { ++early; });
  Watchdog::Watch stays_open = dog.watch([&] { ++late; });
  EXPECT_FALSE(closes_early.close());
  std::this_thread::sleep_for(milliseconds(400));
  EXPECT_TRUE(stays_open.close());
  EXPECT_EQ(early.load(), 0);
  EXPECT_EQ(late.load(), 1);
}

TEST(Watchdog, DestroyingAWatchWithdrawsIt) {
  Watchdog dog(milliseconds(50));
  std::atomic<int> cancelled{0};
  {
    const Watchdog::Watch watch = dog.watch([&] { ++cancelled; });
  }
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_EQ(cancelled.load(), 0);
}

TEST(Watchdog, CloseWaitsForARunningCancelAction) {
  // What the action touches must stay alive until close() returns: close() cannot return
  // while the action runs.
  Watchdog dog(milliseconds(10));
  std::atomic<bool> started{false};
  std::atomic<bool> finished{false};
  Watchdog::Watch watch = dog.watch([&] {
    started = true;
    std::this_thread::sleep_for(milliseconds(200));
    finished = true;
  });
  while (!started.load()) std::this_thread::sleep_for(milliseconds(1));
  EXPECT_TRUE(watch.close());
  EXPECT_TRUE(finished.load());
}

TEST(Watchdog, StopsWithOpenWatches) {
  auto dog = std::make_unique<Watchdog>(std::chrono::hours(1));
  std::atomic<int> cancelled{0};
  {
    Watchdog::Watch watch = dog->watch([&] { ++cancelled; });
    EXPECT_FALSE(watch.close());
  }
  dog.reset();  // joins its thread promptly
  EXPECT_EQ(cancelled.load(), 0);
}

}  // namespace
}  // namespace cube3d
