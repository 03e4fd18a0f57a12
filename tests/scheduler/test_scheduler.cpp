// The scheduler in static mode against the fake executor (fake_executor.h) that records its
// batches, can hold a batch until it is released (or its tasks are cancelled, like the real one),
// and can throw. Waits use condition variables with generous timeouts; the few timing checks
// leave wide margins.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/scheduler/bucket_policy.h"
#include "cube3d/scheduler/scheduler.h"
#include "cube3d/scheduler/task.h"
#include "fake_executor.h"
#include "scheduler_test_support.h"

namespace cube3d {
namespace test_scheduler {

using namespace std::chrono_literals;
using test::FakeExecutor;
using test::kLongWait;
using test::submit_and_wait;
using test::submit_error;

using test::kNoDeadline;
using Outcome = test::TaskOutcome;
using Outcomes = test::TaskOutcomes;

// Static batching: these tests drive execute() (continuous mode: test_continuous_scheduler.cpp).
SchedulerConfig make_config(std::vector<int64_t> buckets, int64_t max_queue_delay_ms,
                            int64_t max_queue_size = 64) {
  SchedulerConfig config;
  config.mode = BatchingMode::kStatic;
  config.batch_buckets = std::move(buckets);
  config.max_queue_delay_ms = max_queue_delay_ms;
  config.max_queue_size = max_queue_size;
  return config;
}

std::string task_id(int thread, int index) { return test::task_id(std::to_string(thread), index); }

double elapsed_ms(SteadyClock::time_point from, SteadyClock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

// Holds the executor and runs task "A" so that whatever is submitted next waits in the queue.
void occupy_the_executor(Scheduler& scheduler, FakeExecutor& executor, Outcomes& outcomes) {
  executor.hold();
  scheduler.submit(outcomes.make_task("A"));
  ASSERT_TRUE(executor.wait_for_batches(1));
}

TEST(Scheduler, LoneRequestWaitsForTheQueueDelayThenRunsInBucketOne) {
  constexpr int64_t kDelayMs = 300;
  Outcomes outcomes;
  FakeExecutor executor;
  Scheduler scheduler(make_config({1, 2, 4, 8}, kDelayMs), executor);

  const auto submitted = SteadyClock::now();
  EXPECT_TRUE(submit_and_wait(scheduler, outcomes, "lone").ok);
  const auto batches = executor.batches();
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].bucket, 1);
  EXPECT_EQ(batches[0].ids, std::vector<std::string>{"lone"});
  const double waited_ms = elapsed_ms(submitted, batches[0].started);
  EXPECT_GE(waited_ms, kDelayMs - 1.0);  // steady clock; 1 ms for rounding only
  EXPECT_LE(waited_ms, kDelayMs + 200.0);
  const auto outcome = outcomes.get("lone");
  ASSERT_TRUE(outcome.has_value());
  EXPECT_TRUE(outcome->ok);
  EXPECT_EQ(outcome->bucket, 1);
}

TEST(Scheduler, ReportsQueuedAndObservesEachBatch) {
  Outcomes outcomes;
  FakeExecutor executor;
  std::mutex observed_mutex;
  std::vector<std::pair<int64_t, int64_t>> observed;
  Scheduler scheduler(make_config({1, 2, 4, 8}, 0), executor, [&](int64_t bucket, int64_t tasks) {
    const std::lock_guard lock(observed_mutex);
    observed.emplace_back(bucket, tasks);
  });
  occupy_the_executor(scheduler, executor, outcomes);
  for (const char* id : {"B", "C", "D"}) scheduler.submit(outcomes.make_task(id));
  EXPECT_EQ(scheduler.queue_depth(), 3);
  EXPECT_EQ(scheduler.running_tasks(), 1);
  executor.release();
  ASSERT_TRUE(outcomes.wait_for(4));

  EXPECT_EQ(outcomes.stages("B"), std::vector<TaskStage>{TaskStage::kQueued});
  const std::lock_guard lock(observed_mutex);
  EXPECT_EQ(observed, (std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {4, 3}}));
  EXPECT_EQ(scheduler.queue_depth(), 0);
  EXPECT_EQ(scheduler.running_tasks(), 0);
}

TEST(Scheduler, RequestsWaitingTogetherShareTheSmallestBucketThatHoldsThem) {
  Outcomes outcomes;
  FakeExecutor executor;
  Scheduler scheduler(make_config({1, 2, 4, 8}, 0), executor);
  occupy_the_executor(scheduler, executor, outcomes);
  for (const char* id : {"B", "C", "D"}) scheduler.submit(outcomes.make_task(id));
  executor.release();
  ASSERT_TRUE(outcomes.wait_for(4));

  const auto batches = executor.batches();
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[1].bucket, 4);
  EXPECT_EQ(batches[1].ids, (std::vector<std::string>{"B", "C", "D"}));
  for (const char* id : {"B", "C", "D"}) {
    EXPECT_TRUE(outcomes.get(id)->ok) << id;
    EXPECT_EQ(outcomes.get(id)->bucket, 4) << id;
  }
}

TEST(Scheduler, MoreThanTheLargestBucketSplitsInFifoOrder) {
  Outcomes outcomes;
  FakeExecutor executor;
  Scheduler scheduler(make_config({1, 2, 4, 8}, 0), executor);
  occupy_the_executor(scheduler, executor, outcomes);
  std::vector<std::string> ids;
  for (int i = 0; i < 11; ++i) {
    ids.push_back(task_id(0, i));
    scheduler.submit(outcomes.make_task(ids.back()));
  }
  executor.release();
  ASSERT_TRUE(outcomes.wait_for(12));

  const auto batches = executor.batches();
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[1].bucket, 8);
  EXPECT_EQ(batches[1].ids, std::vector<std::string>(ids.begin(), ids.begin() + 8));
  EXPECT_EQ(batches[2].bucket, 4);
  EXPECT_EQ(batches[2].ids, std::vector<std::string>(ids.begin() + 8, ids.end()));
}

TEST(Scheduler, FullLargestBucketRunsWithoutWaitingForTheDelay) {
  Outcomes outcomes;
  FakeExecutor executor;
  Scheduler scheduler(make_config({1, 2, 4}, 10'000), executor);
  const auto submitted = SteadyClock::now();
  for (const char* id : {"a", "b", "c", "d"}) scheduler.submit(outcomes.make_task(id));
  ASSERT_TRUE(outcomes.wait_for(4));

  const auto batches = executor.batches();
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].bucket, 4);
  EXPECT_EQ(batches[0].ids.size(), 4u);
  EXPECT_LT(elapsed_ms(submitted, batches[0].started), 2'000.0);  // far below the 10 s delay
}

TEST(Scheduler, QueueFullFailsAtOnceWithResourceExhausted) {
  Outcomes outcomes;
  FakeExecutor executor;
  Scheduler scheduler(make_config({1}, 0, /*max_queue_size=*/2), executor);
  occupy_the_executor(scheduler, executor, outcomes);  // running, so not counted as queued
  scheduler.submit(outcomes.make_task("B"));
  scheduler.submit(outcomes.make_task("C"));

  const auto error = submit_error(scheduler, outcomes.make_task("D"));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(std::string(error->what()).find("queue full (2 waiting)"), std::string::npos)
      << error->what();
  EXPECT_EQ(scheduler.queue_depth(), 2);

  executor.release();
  ASSERT_TRUE(outcomes.wait_for(3));
  EXPECT_FALSE(outcomes.get("D").has_value());  // refused tasks get no outcome: submit threw
  EXPECT_EQ(executor.executed_ids(), (std::set<std::string>{"A", "B", "C"}));
}

TEST(Scheduler, ACancelledQueuedTaskFreesItsPlaceAtOnce) {
  Outcomes outcomes;
  FakeExecutor executor;
  Scheduler scheduler(make_config({1}, 0, /*max_queue_size=*/2), executor);
  occupy_the_executor(scheduler, executor, outcomes);  // the worker is busy: nothing is dropped
  auto gone = outcomes.make_task("gone");
  scheduler.submit(gone);
  scheduler.submit(outcomes.make_task("B"));
  gone->cancel();
  // The queue is full only of tasks that still want to run once "gone" is dropped: C gets in.
  EXPECT_FALSE(submit_error(scheduler, outcomes.make_task("C")).has_value());
  const auto cancelled = outcomes.get("gone");
  ASSERT_TRUE(cancelled.has_value());  // failed by the submit that dropped it
  EXPECT_EQ(cancelled->code, ErrorCode::kCancelled);
  // Now it is really full.
  const auto error = submit_error(scheduler, outcomes.make_task("D"));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code(), ErrorCode::kResourceExhausted);
  executor.release();
  ASSERT_TRUE(outcomes.wait_for(4));
  EXPECT_EQ(executor.executed_ids(), (std::set<std::string>{"A", "B", "C"}));
}

TEST(Scheduler, DeadlinePassingBehindABlockedBatchFailsWithoutRunning) {
  Outcomes outcomes;
  FakeExecutor executor;
  Scheduler scheduler(make_config({1}, 0), executor);
  occupy_the_executor(scheduler, executor, outcomes);
  const auto deadline = SteadyClock::now() + 50ms;
  scheduler.submit(outcomes.make_task("late", deadline));
  scheduler.submit(outcomes.make_task("patient"));
  std::this_thread::sleep_until(deadline + 20ms);  // "late" is surely expired now
  executor.release();
  ASSERT_TRUE(outcomes.wait_for(3));

  const auto late = outcomes.get("late");
  ASSERT_TRUE(late.has_value());
  EXPECT_FALSE(late->ok);
  EXPECT_EQ(late->code, ErrorCode::kDeadlineExceeded);
  EXPECT_NE(late->message.find("ms in the queue"), std::string::npos) << late->message;
  EXPECT_EQ(executor.executed_ids(), (std::set<std::string>{"A", "patient"}));
}

TEST(Scheduler, DeadlinePassingWhileWaitingForCompanyFailsPromptly) {
  Outcomes outcomes;
  FakeExecutor executor;
  Scheduler scheduler(make_config({1, 2, 4, 8}, 10'000), executor);
  const auto submitted = SteadyClock::now();
  scheduler.submit(outcomes.make_task("short", submitted + 100ms));
  ASSERT_TRUE(outcomes.wait_for(1));

  const auto outcome = outcomes.get("short");
  EXPECT_EQ(outcome->code, ErrorCode::kDeadlineExceeded);
  EXPECT_GE(elapsed_ms(submitted, outcome->at), 99.0);
  EXPECT_LT(elapsed_ms(submitted, outcome->at), 2'000.0);  // not after the 10 s batch window
  EXPECT_TRUE(executor.batches().empty());
}

TEST(Scheduler, AlreadyExpiredDeadlineFailsInSubmit) {
  Outcomes outcomes;
  FakeExecutor executor;
  Scheduler scheduler(make_config({1}, 0), executor);
  const auto error =
      submit_error(scheduler, outcomes.make_task("expired", SteadyClock::now() - 1ms));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code(), ErrorCode::kDeadlineExceeded);
  EXPECT_EQ(scheduler.queue_depth(), 0);
  EXPECT_EQ(outcomes.deliveries("expired"), 0);
}

TEST(Scheduler, NullTaskIsAnInternalError) {
  FakeExecutor executor;
  Scheduler scheduler(make_config({1}, 0), executor);
  const auto error = submit_error(scheduler, nullptr);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code(), ErrorCode::kInternal);
}

TEST(Scheduler, CancelledQueuedTasksAreDroppedAndReportedCancelled) {
  Outcomes outcomes;
  FakeExecutor executor;
  Scheduler scheduler(make_config({1, 2, 4}, 0), executor);
  occupy_the_executor(scheduler, executor, outcomes);
  auto gone = outcomes.make_task("gone");
  scheduler.submit(gone);
  scheduler.submit(outcomes.make_task("stays"));
  gone->cancel();
  executor.release();
  ASSERT_TRUE(outcomes.wait_for(3));

  EXPECT_EQ(outcomes.get("gone")->code, ErrorCode::kCancelled);
  EXPECT_TRUE(outcomes.get("stays")->ok);
  EXPECT_EQ(executor.executed_ids(), (std::set<std::string>{"A", "stays"}));
}

TEST(Scheduler, ExecutorErrorFailsTheUnfinishedTasksOfItsBatchWithItsCode) {
  Outcomes outcomes;
  FakeExecutor executor;
  executor.throw_on_batch(
      1, [] { throw resource_exhausted("out of GPU memory"); }, /*succeed_first=*/1);
  Scheduler scheduler(make_config({1, 2, 4}, 0), executor);
  occupy_the_executor(scheduler, executor, outcomes);
  for (const char* id : {"B", "C", "D"}) scheduler.submit(outcomes.make_task(id));
  executor.release();
  ASSERT_TRUE(outcomes.wait_for(4));

  EXPECT_TRUE(outcomes.get("A")->ok);
  EXPECT_TRUE(outcomes.get("B")->ok);  // delivered before the throw: kept
  for (const char* id : {"C", "D"}) {
    const auto outcome = outcomes.get(id);
    EXPECT_FALSE(outcome->ok) << id;
    EXPECT_EQ(outcome->code, ErrorCode::kResourceExhausted) << id;
    EXPECT_EQ(outcome->message, "out of GPU memory") << id;
  }
  // The worker survives: later work still runs.
  EXPECT_TRUE(submit_and_wait(scheduler, outcomes, "E").ok);
}

TEST(Scheduler, ForeignExceptionFromTheExecutorBecomesInternal) {
  Outcomes outcomes;
  FakeExecutor executor;
  executor.throw_on_batch(0, [] { throw std::runtime_error("cuda kernel launch failed"); });
  Scheduler scheduler(make_config({1, 2}, 0), executor);
  const auto outcome = submit_and_wait(scheduler, outcomes, "A");
  EXPECT_EQ(outcome.code, ErrorCode::kInternal);
  EXPECT_NE(outcome.message.find("cuda kernel launch failed"), std::string::npos);
}

TEST(Scheduler, DrainRefusesNewWorkAndFinishesInFlightWorkWithinTheGrace) {
  Outcomes outcomes;
  FakeExecutor executor;
  Scheduler scheduler(make_config({1}, 0), executor);
  occupy_the_executor(scheduler, executor, outcomes);
  scheduler.submit(outcomes.make_task("B"));

  scheduler.begin_drain();
  EXPECT_TRUE(scheduler.draining());
  const auto refused = submit_error(scheduler, outcomes.make_task("late"));
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->code(), ErrorCode::kUnavailable);
  EXPECT_NE(std::string(refused->what()).find("shutting down"), std::string::npos);

  std::thread releaser([&] {
    std::this_thread::sleep_for(100ms);
    executor.release();
  });
  const bool finished = scheduler.drain(5s);
  releaser.join();

  EXPECT_TRUE(finished);
  EXPECT_TRUE(outcomes.get("A")->ok);
  EXPECT_TRUE(outcomes.get("B")->ok);
  EXPECT_EQ(outcomes.deliveries("late"), 0);
  EXPECT_EQ(submit_error(scheduler, outcomes.make_task("after"))->code(), ErrorCode::kUnavailable);
}

TEST(Scheduler, DrainWithAStuckExecutorGivesUpAfterTheGrace) {
  Outcomes outcomes;
  FakeExecutor executor;
  Scheduler scheduler(make_config({1}, 0), executor);
  occupy_the_executor(scheduler, executor, outcomes);  // never released: honours cancel only
  scheduler.submit(outcomes.make_task("B"));

  const auto started = SteadyClock::now();
  const bool finished = scheduler.drain(200ms);
  const double took_ms = elapsed_ms(started, SteadyClock::now());

  EXPECT_FALSE(finished);
  EXPECT_GE(took_ms, 199.0);
  EXPECT_LT(took_ms, 3'000.0);
  EXPECT_EQ(outcomes.get("B")->code, ErrorCode::kUnavailable);
  const auto running = outcomes.get("A");  // cancelled while running, then reported once
  ASSERT_TRUE(running.has_value());
  EXPECT_FALSE(running->ok);
  EXPECT_EQ(outcomes.deliveries("A"), 1);
  EXPECT_EQ(executor.executed_ids(), std::set<std::string>{"A"});
}

TEST(Scheduler, DestructorDoesNotHangOnAStuckExecutor) {
  Outcomes outcomes;
  FakeExecutor executor;
  const auto started = SteadyClock::now();
  {
    Scheduler scheduler(make_config({1}, 0), executor);
    occupy_the_executor(scheduler, executor, outcomes);
    scheduler.submit(outcomes.make_task("B"));
  }
  EXPECT_LT(elapsed_ms(started, SteadyClock::now()), 3'000.0);
  EXPECT_EQ(outcomes.count(), 2u);
  EXPECT_FALSE(outcomes.get("A")->ok);
  EXPECT_EQ(outcomes.get("B")->code, ErrorCode::kUnavailable);
}

TEST(Scheduler, ManyThreadsSubmittingConcurrentlyEachGetExactlyOneOutcome) {
  constexpr int kThreads = 8;
  constexpr int kTasksPerThread = 50;
  constexpr size_t kTasks = kThreads * kTasksPerThread;
  const std::vector<int64_t> buckets{1, 2, 4, 8};
  Outcomes outcomes;
  FakeExecutor executor;
  Scheduler scheduler(make_config(buckets, 1, /*max_queue_size=*/kTasks), executor);

  std::vector<std::thread> submitters;
  for (int t = 0; t < kThreads; ++t) {
    submitters.emplace_back([&, t] {
      for (int i = 0; i < kTasksPerThread; ++i) {
        scheduler.submit(outcomes.make_task(task_id(t, i)));
      }
    });
  }
  for (auto& submitter : submitters) submitter.join();
  ASSERT_TRUE(outcomes.wait_for(kTasks, 10s));

  size_t executed = 0;
  for (const auto& batch : executor.batches()) {
    executed += batch.ids.size();
    EXPECT_EQ(batch.bucket, choose_bucket(static_cast<int64_t>(batch.ids.size()), buckets));
  }
  EXPECT_EQ(executed, kTasks);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kTasksPerThread; ++i) {
      const std::string id = task_id(t, i);
      EXPECT_EQ(outcomes.deliveries(id), 1) << id;
      EXPECT_TRUE(outcomes.get(id)->ok) << id;
    }
  }
}

}  // namespace test_scheduler
}  // namespace cube3d
