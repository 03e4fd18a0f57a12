// A reactor's writes: one at a time in order, the front kept (its address given to gRPC) until
// it is written, the timeout armed with each write and disarmed when it is done, a failed write
// dropping the rest, a cancel keeping only the write under way.
#include "cube3d/server/grpc/write_queue.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>

namespace cube3d::test_write_queue {

using std::chrono::milliseconds;

constexpr milliseconds kLong{60'000};

void nothing() {}

TEST(WriteQueue, WritesGoOutInOrderEachKeptUntilWritten) {
  TimerQueue timers;
  WriteQueue<std::string> writes;
  EXPECT_TRUE(writes.empty());
  EXPECT_FALSE(writes.writing());
  writes.push("a");
  writes.push("b");
  std::string* const first = writes.start(timers, kLong, nothing);
  EXPECT_EQ(*first, "a");
  EXPECT_TRUE(writes.writing());
  writes.push("c");  // a push while writing leaves the front (gRPC holds its address) in place
  EXPECT_EQ(*first, "a");
  EXPECT_EQ(writes.size(), 3u);
  writes.written(true);
  EXPECT_FALSE(writes.writing());
  EXPECT_EQ(*writes.start(timers, kLong, nothing), "b");
  writes.written(true);
  EXPECT_EQ(*writes.start(timers, kLong, nothing), "c");
  writes.written(true);
  EXPECT_TRUE(writes.empty());
}

TEST(WriteQueue, EachWriteArmsTheTimeoutAndItsEndDisarmsIt) {
  TimerQueue timers;
  WriteQueue<std::string> writes;
  writes.push("a");
  writes.push("b");
  writes.start(timers, kLong, nothing);
  EXPECT_EQ(timers.pending(), 1u);
  writes.written(true);
  EXPECT_EQ(timers.pending(), 0u);
  writes.start(timers, kLong, nothing);
  EXPECT_EQ(timers.pending(), 1u);
  writes.stop_timer();  // OnDone with a write still under way
  EXPECT_EQ(timers.pending(), 0u);
}

TEST(WriteQueue, AWriteNotDoneInTimeRunsTheTimeout) {
  TimerQueue timers;
  WriteQueue<std::string> writes;
  std::mutex mutex;
  std::condition_variable fired_cv;
  bool fired = false;
  writes.push("a");
  writes.start(timers, milliseconds(0), [&] {
    const std::lock_guard lock(mutex);
    fired = true;
    fired_cv.notify_all();
  });
  std::unique_lock lock(mutex);
  EXPECT_TRUE(fired_cv.wait_for(lock, std::chrono::seconds(30), [&] { return fired; }));
  EXPECT_TRUE(writes.writing());  // the reactor cancels the call; the write then fails
}

TEST(WriteQueue, AFailedWriteDropsEverythingStillQueued) {
  TimerQueue timers;
  WriteQueue<std::string> writes;
  writes.push("a");
  writes.push("b");
  writes.push("c");
  writes.start(timers, kLong, nothing);
  writes.written(false);
  EXPECT_TRUE(writes.empty());
  EXPECT_FALSE(writes.writing());
  EXPECT_EQ(timers.pending(), 0u);
}

TEST(WriteQueue, DroppingWhatWaitsKeepsTheWriteUnderWay) {
  TimerQueue timers;
  WriteQueue<std::string> writes;
  writes.push("a");
  writes.push("b");
  writes.push("c");
  std::string* const under_way = writes.start(timers, kLong, nothing);
  writes.drop_waiting();
  ASSERT_EQ(writes.size(), 1u);
  EXPECT_EQ(*under_way, "a");
  writes.written(true);
  EXPECT_TRUE(writes.empty());

  // Nothing under way: everything goes.
  writes.push("d");
  writes.push("e");
  writes.drop_waiting();
  EXPECT_TRUE(writes.empty());
}

}  // namespace cube3d::test_write_queue
