// The scheduler in continuous mode against the fake executor (fake_executor.h) with decode slots:
// it keeps its slots in a vector and generates one "token" per slot per step (the first at
// admission). It records every admission and every task's admit/done/drop in order, can hold its
// steps until released, and can throw from admit or step. Assertions are about order (who was
// admitted before whom finished), not durations; waits use condition variables with generous
// timeouts.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/scheduler/scheduler.h"
#include "cube3d/scheduler/task.h"
#include "fake_executor.h"
#include "scheduler_test_support.h"

namespace cube3d {
namespace test_continuous_scheduler {

using namespace std::chrono_literals;
using test::FakeExecutor;
using test::kEndless;
using test::kLongWait;
using test::kNoDeadline;
using test::submit_and_wait;
using test::submit_error;
using test::task_id;

// Tasks of a client (fair turns); their outcomes recorded.
class Outcomes : public test::TaskOutcomes {
 public:
  using TaskOutcomes::make_task;
  std::shared_ptr<Task> make_task(const std::string& id, SteadyClock::time_point deadline,
                                  const std::string& client) {
    TaskTicket request;
    request.request_id = id;
    request.client = client;
    return make_task(std::move(request), deadline);
  }
};

SchedulerConfig make_config(std::vector<int64_t> buckets, int64_t max_queue_delay_ms,
                            int64_t max_joins_per_step = 2, int64_t max_queue_size = 64) {
  SchedulerConfig config;
  config.mode = BatchingMode::kContinuous;
  config.batch_buckets = std::move(buckets);
  config.max_queue_delay_ms = max_queue_delay_ms;
  config.max_joins_per_step = max_joins_per_step;
  config.max_queue_size = max_queue_size;
  return config;
}

double elapsed_ms(SteadyClock::time_point from, SteadyClock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Holds the steps and runs task "A" (admitted alone, its first step blocked), so that whatever
// is submitted next waits in the queue until release(). Needs max_queue_delay_ms = 0.
void start_a_held_slot(Scheduler& scheduler, FakeExecutor& executor, Outcomes& outcomes) {
  executor.hold();
  scheduler.submit(outcomes.make_task("A"));
  ASSERT_TRUE(executor.wait_for_steps_started(1));
}

// One slot, kept by the endless task `id` (admitted before this returns), so that whatever is
// submitted next waits in the queue.
void keep_the_slot_busy(Scheduler& scheduler, FakeExecutor& executor, Outcomes& outcomes,
                        const std::string& id) {
  executor.set_tokens(id, kEndless);
  scheduler.submit(outcomes.make_task(id));
  ASSERT_TRUE(executor.wait_for_admitted(1));
}

// Queues `ids` behind the held task "A" (start_a_held_slot), releases the steps and waits until
// A and all of them are done.
void queue_behind_a_and_release(Scheduler& scheduler, FakeExecutor& executor, Outcomes& outcomes,
                                const std::vector<std::string>& ids) {
  start_a_held_slot(scheduler, executor, outcomes);
  for (const auto& id : ids) scheduler.submit(outcomes.make_task(id));
  executor.release();
  ASSERT_TRUE(outcomes.wait_for(ids.size() + 1));
}

TEST(ContinuousScheduler, StaticOnlyExecutorIsRejectedInContinuousMode) {
  FakeExecutor executor;  // no decode slots: BatchExecutor's defaults for continuous batching
  try {
    const Scheduler scheduler(SchedulerConfig{}, executor);  // continuous by default
    ADD_FAILURE() << "accepted an executor without continuous batching";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_TRUE(contains(e.what(), "batching.mode: continuous")) << e.what();
  }
  SchedulerConfig static_config;
  static_config.mode = BatchingMode::kStatic;
  EXPECT_NO_THROW((Scheduler{static_config, executor}));
}

TEST(ContinuousScheduler, ContinuousExecutorInStaticModeRunsWholeBatches) {
  Outcomes outcomes;
  FakeExecutor executor(8);
  {
    auto config = make_config({1, 2, 4, 8}, 0);
    config.mode = BatchingMode::kStatic;
    Scheduler scheduler(config, executor);
    scheduler.submit(outcomes.make_task("A"));
    ASSERT_TRUE(outcomes.wait_for(1));
  }
  EXPECT_TRUE(outcomes.get("A")->ok);
  EXPECT_EQ(executor.static_batches(), 1u);
  EXPECT_TRUE(executor.admissions().empty());
}

TEST(ContinuousScheduler, LoneRequestWaitsForTheQueueDelayWhenNoSlotRuns) {
  constexpr int64_t kDelayMs = 300;
  Outcomes outcomes;
  FakeExecutor executor(8);
  Scheduler scheduler(make_config({1, 2, 4, 8}, kDelayMs), executor);

  const auto submitted = SteadyClock::now();
  const auto lone = submit_and_wait(scheduler, outcomes, "lone");
  const auto admissions = executor.admissions();
  ASSERT_EQ(admissions.size(), 1u);
  EXPECT_EQ(admissions[0].ids, std::vector<std::string>{"lone"});
  // A lower bound only: the wait can end late on a loaded machine, never early.
  EXPECT_GE(elapsed_ms(submitted, admissions[0].at), kDelayMs - 1.0);
  EXPECT_TRUE(lone.ok);
}

TEST(ContinuousScheduler, IdleSchedulerAdmitsAWholeBucketAtOnce) {
  Outcomes outcomes;
  FakeExecutor executor(8);
  // The 10 s delay would hold a partial batch; a full one goes at once, past the join budget.
  Scheduler scheduler(make_config({1, 2, 4, 8}, 10'000, /*max_joins_per_step=*/2), executor);
  std::vector<std::string> ids;
  for (int i = 0; i < 8; ++i) {
    ids.push_back(task_id("task", i));
    scheduler.submit(outcomes.make_task(ids.back()));
  }
  ASSERT_TRUE(outcomes.wait_for(8));

  const auto admissions = executor.admissions();
  ASSERT_EQ(admissions.size(), 1u);
  EXPECT_EQ(admissions[0].ids, ids);
  EXPECT_EQ(admissions[0].active_before, 0);
  for (const auto& id : ids) EXPECT_TRUE(outcomes.get(id)->ok) << id;
}

TEST(ContinuousScheduler, ArrivalJoinsTheRunningBatchAtTheNextStep) {
  Outcomes outcomes;
  FakeExecutor executor(8);
  std::atomic<int> observed_batches{0};
  Scheduler scheduler(make_config({1, 2, 4, 8}, 0), executor,
                      [&](int64_t, int64_t) { ++observed_batches; });
  start_a_held_slot(scheduler, executor, outcomes);
  scheduler.submit(outcomes.make_task("B"));
  EXPECT_EQ(scheduler.running_tasks(), 1);
  EXPECT_EQ(scheduler.queue_depth(), 1);
  executor.release();
  ASSERT_TRUE(outcomes.wait_for(2));

  const auto admissions = executor.admissions();
  ASSERT_EQ(admissions.size(), 2u);
  EXPECT_EQ(admissions[1].ids, std::vector<std::string>{"B"});
  EXPECT_EQ(admissions[1].active_before, 1);
  EXPECT_EQ(admissions[1].steps_before, 1u);  // right after A's first step
  EXPECT_LT(executor.position_of("admit:B"), executor.position_of("done:A"));
  EXPECT_TRUE(outcomes.get("A")->ok);
  EXPECT_TRUE(outcomes.get("B")->ok);
  EXPECT_EQ(scheduler.running_tasks(), 0);
  EXPECT_EQ(observed_batches, 0);  // the observer is for static batches only
  EXPECT_TRUE(executor.violations().empty());
}

TEST(ContinuousScheduler, ArrivalDoesNotWaitForTheQueueDelayWhileSlotsRun) {
  Outcomes outcomes;
  FakeExecutor executor(4);
  for (const char* id : {"s1", "s2", "s3"}) executor.set_tokens(id, 2);
  executor.set_tokens("long", 200);
  // A 10 s delay: a partial first batch would wait for it, a joiner must not.
  Scheduler scheduler(make_config({1, 2, 4}, 10'000), executor);
  executor.hold();
  for (const char* id : {"s1", "s2", "s3", "long"}) scheduler.submit(outcomes.make_task(id));
  ASSERT_TRUE(executor.wait_for_steps_started(1));  // a full bucket went at once
  scheduler.submit(outcomes.make_task("B"));
  executor.release();

  ASSERT_TRUE(outcomes.wait_for("B"));  // within 5 s, far below the delay
  EXPECT_TRUE(outcomes.get("B")->ok);
  ASSERT_TRUE(outcomes.wait_for(5));
  EXPECT_LT(executor.position_of("admit:B"), executor.position_of("done:long"));
  const auto admissions = executor.admissions();
  ASSERT_EQ(admissions.size(), 2u);
  EXPECT_EQ(admissions[1].ids, std::vector<std::string>{"B"});
  EXPECT_EQ(admissions[1].active_before, 1);  // only "long" was still running
}

TEST(ContinuousScheduler, NeverMoreSlotsThanTheLargestBucket) {
  Outcomes outcomes;
  FakeExecutor executor(4);
  Scheduler scheduler(make_config({1, 2, 4}, 0, /*max_joins_per_step=*/4), executor);
  start_a_held_slot(scheduler, executor, outcomes);
  for (int i = 0; i < 29; ++i) scheduler.submit(outcomes.make_task(task_id("task", i)));
  executor.release();
  ASSERT_TRUE(outcomes.wait_for(30));

  EXPECT_EQ(executor.max_active(), 4);
  EXPECT_EQ(executor.admitted_ids().size(), 30u);
  EXPECT_TRUE(executor.violations().empty());
  for (const auto& admission : executor.admissions()) {
    EXPECT_LE(admission.active_before + static_cast<int64_t>(admission.ids.size()), 4);
  }
}

TEST(ContinuousScheduler, JoinsWhileSlotsRunAreLimitedByMaxJoinsPerStep) {
  Outcomes outcomes;
  FakeExecutor executor(8);
  Scheduler scheduler(make_config({1, 2, 4, 8}, 0, /*max_joins_per_step=*/2), executor);
  start_a_held_slot(scheduler, executor, outcomes);
  for (int i = 0; i < 7; ++i) scheduler.submit(outcomes.make_task(task_id("task", i)));
  executor.release();
  ASSERT_TRUE(outcomes.wait_for(8));

  // A alone (nothing running), then two per step while A and the joiners run.
  const auto admissions = executor.admissions();
  std::vector<size_t> sizes;
  for (const auto& admission : admissions) sizes.push_back(admission.ids.size());
  EXPECT_EQ(sizes, (std::vector<size_t>{1, 2, 2, 2, 1}));
  for (size_t i = 1; i < admissions.size(); ++i) {
    EXPECT_GT(admissions[i].active_before, 0) << i;
    EXPECT_EQ(admissions[i].steps_before, i) << i;  // one admission between two steps
  }
  EXPECT_TRUE(executor.violations().empty());
}

TEST(ContinuousScheduler, AdmissionIsFifo) {
  Outcomes outcomes;
  FakeExecutor executor(8);
  Scheduler scheduler(make_config({1, 2, 4, 8}, 0, /*max_joins_per_step=*/8), executor);
  start_a_held_slot(scheduler, executor, outcomes);
  std::vector<std::string> expected{"A"};
  for (int i = 0; i < 12; ++i) {
    expected.push_back(task_id("task", i));
    scheduler.submit(outcomes.make_task(expected.back()));
  }
  executor.release();
  ASSERT_TRUE(outcomes.wait_for(13));

  EXPECT_EQ(executor.admitted_ids(), expected);
  EXPECT_EQ(executor.max_active(), 8);
}

TEST(ContinuousScheduler, ClientsAreAdmittedInTurnWhateverTheirFloods) {
  // Fair queueing across API keys: a flood of 8 from one client, then 2 from each of two
  // others; one slot frees at a time, and the others do not wait behind the whole flood.
  Outcomes outcomes;
  FakeExecutor executor(1);
  Scheduler scheduler(make_config({1}, 0), executor);
  start_a_held_slot(scheduler, executor, outcomes);
  for (int i = 0; i < 8; ++i)
    scheduler.submit(outcomes.make_task(task_id("flood", i), kNoDeadline, "a"));
  for (int i = 0; i < 2; ++i) {
    scheduler.submit(outcomes.make_task(task_id("b", i), kNoDeadline, "b"));
    scheduler.submit(outcomes.make_task(task_id("c", i), kNoDeadline, "c"));
  }
  executor.release();
  ASSERT_TRUE(outcomes.wait_for(13));
  const std::vector<std::string> expected = {"A",
                                             task_id("flood", 0),
                                             task_id("b", 0),
                                             task_id("c", 0),
                                             task_id("flood", 1),
                                             task_id("b", 1),
                                             task_id("c", 1),
                                             task_id("flood", 2),
                                             task_id("flood", 3),
                                             task_id("flood", 4),
                                             task_id("flood", 5),
                                             task_id("flood", 6),
                                             task_id("flood", 7)};
  EXPECT_EQ(executor.admitted_ids(), expected);
}

TEST(ContinuousScheduler, CancellingAQueuedOrARunningTaskFailsItCancelled) {
  Outcomes outcomes;
  FakeExecutor executor(1);
  Scheduler scheduler(make_config({1}, 0), executor);
  executor.hold();
  const auto running = outcomes.make_task("running");
  scheduler.submit(running);
  ASSERT_TRUE(executor.wait_for_steps_started(1));
  const auto queued = outcomes.make_task("queued");
  scheduler.submit(queued);  // no free slot: it waits
  queued->cancel();
  running->cancel();
  executor.release();
  ASSERT_TRUE(outcomes.wait_for(2));

  const auto dropped_running = outcomes.get("running");
  EXPECT_EQ(dropped_running->code, ErrorCode::kCancelled);
  EXPECT_EQ(dropped_running->message, "cancelled while running");  // by the executor's step
  const auto dropped_queued = outcomes.get("queued");
  EXPECT_EQ(dropped_queued->code, ErrorCode::kCancelled);
  EXPECT_TRUE(contains(dropped_queued->message, "while queued")) << dropped_queued->message;
  EXPECT_EQ(executor.admitted_ids(), std::vector<std::string>{"running"});

  // The slot is free again.
  EXPECT_TRUE(submit_and_wait(scheduler, outcomes, "next").ok);
  EXPECT_EQ(outcomes.deliveries("running"), 1);
  EXPECT_EQ(outcomes.deliveries("queued"), 1);
}

TEST(ContinuousScheduler, DeadlinePassingInTheQueueFailsWhileTheSlotsRun) {
  Outcomes outcomes;
  FakeExecutor executor(1);
  Scheduler scheduler(make_config({1}, 0), executor);
  keep_the_slot_busy(scheduler, executor, outcomes, "busy");
  scheduler.submit(outcomes.make_task("late", SteadyClock::now() + 100ms));
  ASSERT_TRUE(outcomes.wait_for("late"));

  const auto late = outcomes.get("late");
  EXPECT_EQ(late->code, ErrorCode::kDeadlineExceeded);
  EXPECT_TRUE(contains(late->message, "ms in the queue")) << late->message;
  EXPECT_FALSE(outcomes.get("busy").has_value());  // still stepping
  EXPECT_EQ(executor.admitted_ids(), std::vector<std::string>{"busy"});
}

TEST(ContinuousScheduler, AdmitThrowingFailsExactlyTheJoiningTasks) {
  Outcomes outcomes;
  FakeExecutor executor(8);
  executor.throw_on_admission(1, [] { throw resource_exhausted("out of KV-cache memory"); });
  Scheduler scheduler(make_config({1, 2, 4, 8}, 0), executor);
  queue_behind_a_and_release(scheduler, executor, outcomes, {"B", "C"});

  const auto admissions = executor.admissions();
  ASSERT_GE(admissions.size(), 2u);
  EXPECT_EQ(admissions[1].ids, (std::vector<std::string>{"B", "C"}));
  for (const char* id : {"B", "C"}) {
    const auto outcome = outcomes.get(id);
    EXPECT_FALSE(outcome->ok) << id;
    EXPECT_EQ(outcome->code, ErrorCode::kResourceExhausted) << id;
    EXPECT_EQ(outcome->message, "out of KV-cache memory") << id;
  }
  EXPECT_TRUE(outcomes.get("A")->ok);  // the running slot went on
  EXPECT_EQ(executor.clear_calls(), 0u);

  EXPECT_TRUE(submit_and_wait(scheduler, outcomes, "D").ok);
}

TEST(ContinuousScheduler, ForeignExceptionFromAdmitBecomesInternal) {
  Outcomes outcomes;
  FakeExecutor executor(2);
  executor.throw_on_admission(0, [] { throw std::runtime_error("tokenizer exploded"); });
  Scheduler scheduler(make_config({1, 2}, 0), executor);
  const auto outcome = submit_and_wait(scheduler, outcomes, "A");
  EXPECT_EQ(outcome.code, ErrorCode::kInternal);
  EXPECT_TRUE(contains(outcome.message, "tokenizer exploded")) << outcome.message;
  EXPECT_TRUE(submit_and_wait(scheduler, outcomes, "B").ok);
}

TEST(ContinuousScheduler, StepThrowingClearsTheSlotsAndFailsTheirTasks) {
  Outcomes outcomes;
  FakeExecutor executor(8);
  // Step 0 is A's held step; step 1 runs A and B.
  executor.throw_on_step(1, [] { throw internal_error("CUDA error: an illegal memory access"); });
  Scheduler scheduler(make_config({1, 2, 4, 8}, 0), executor);
  queue_behind_a_and_release(scheduler, executor, outcomes, {"B"});

  for (const char* id : {"A", "B"}) {
    const auto outcome = outcomes.get(id);
    EXPECT_FALSE(outcome->ok) << id;
    EXPECT_EQ(outcome->code, ErrorCode::kInternal) << id;
    EXPECT_TRUE(contains(outcome->message, "illegal memory access")) << outcome->message;
    EXPECT_EQ(outcomes.deliveries(id), 1) << id;
  }
  EXPECT_EQ(executor.clear_calls(), 1u);
  EXPECT_LT(executor.position_of("cleared:A"), executor.events().size());
  EXPECT_LT(executor.position_of("cleared:B"), executor.events().size());

  // The worker survives with empty slots: later work runs.
  EXPECT_TRUE(submit_and_wait(scheduler, outcomes, "C").ok);
  EXPECT_TRUE(executor.violations().empty());
}

TEST(ContinuousScheduler, DrainWaitsForTheRunningSlots) {
  Outcomes outcomes;
  FakeExecutor executor(8);
  Scheduler scheduler(make_config({1, 2, 4, 8}, 0), executor);
  start_a_held_slot(scheduler, executor, outcomes);
  scheduler.submit(outcomes.make_task("B"));

  scheduler.begin_drain();
  const auto refused = submit_error(scheduler, outcomes.make_task("late"));
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->code(), ErrorCode::kUnavailable);

  std::thread releaser([&] {
    std::this_thread::sleep_for(100ms);
    executor.release();
  });
  const bool finished = scheduler.drain(kLongWait);
  releaser.join();

  EXPECT_TRUE(finished);
  ASSERT_EQ(outcomes.count(), 2u);  // both done before drain returned
  EXPECT_TRUE(outcomes.get("A")->ok);
  EXPECT_TRUE(outcomes.get("B")->ok);
  EXPECT_EQ(outcomes.deliveries("late"), 0);
  EXPECT_EQ(executor.position_of("cleared:A"), executor.events().size());
}

TEST(ContinuousScheduler, DrainGivesUpOnEndlessSlotsAndFailsThemUnavailable) {
  Outcomes outcomes;
  FakeExecutor executor(1);
  Scheduler scheduler(make_config({1}, 0), executor);
  keep_the_slot_busy(scheduler, executor, outcomes, "endless");
  scheduler.submit(outcomes.make_task("queued"));

  EXPECT_FALSE(scheduler.drain(200ms));

  EXPECT_EQ(outcomes.get("endless")->code, ErrorCode::kUnavailable);
  EXPECT_EQ(outcomes.get("queued")->code, ErrorCode::kUnavailable);
  EXPECT_EQ(outcomes.deliveries("endless"), 1);
  EXPECT_EQ(executor.clear_calls(), 1u);
  EXPECT_EQ(executor.active_slots(), 0);
}

TEST(ContinuousScheduler, DestructorFailsActiveSlotsUnavailableAndReturnsPromptly) {
  Outcomes outcomes;
  FakeExecutor executor(2);
  std::vector<std::shared_ptr<Task>> running;
  for (const char* id : {"A", "B"}) {
    executor.set_tokens(id, kEndless);
    running.push_back(outcomes.make_task(id));
  }
  const auto started = SteadyClock::now();
  {
    Scheduler scheduler(make_config({1, 2}, 0), executor);
    for (const auto& task : running) scheduler.submit(task);
    ASSERT_TRUE(executor.wait_for_admitted(2));
    scheduler.submit(outcomes.make_task("queued"));  // both slots busy: it waits
  }
  EXPECT_LT(elapsed_ms(started, SteadyClock::now()), 5'000.0);

  ASSERT_EQ(outcomes.count(), 3u);
  for (const char* id : {"A", "B"}) {
    const auto outcome = outcomes.get(id);
    EXPECT_EQ(outcome->code, ErrorCode::kUnavailable) << id;
    EXPECT_TRUE(contains(outcome->message, "shut down while the request was running"))
        << outcome->message;
    EXPECT_EQ(outcomes.deliveries(id), 1) << id;
  }
  for (const auto& task : running) EXPECT_TRUE(task->cancelled());  // any meshing work stops
  EXPECT_EQ(outcomes.get("queued")->code, ErrorCode::kUnavailable);
  EXPECT_EQ(executor.clear_calls(), 1u);
  EXPECT_EQ(executor.active_slots(), 0);
  EXPECT_EQ(executor.admitted_ids(), (std::vector<std::string>{"A", "B"}));
}

TEST(ContinuousScheduler, ManyThreadsSubmittingConcurrentlyEachGetExactlyOneOutcome) {
  constexpr int kThreads = 4;
  constexpr int kTasksPerThread = 50;
  constexpr size_t kTasks = kThreads * kTasksPerThread;
  Outcomes outcomes;
  FakeExecutor executor(8);
  Scheduler scheduler(make_config({1, 2, 4, 8}, 1, 2, /*max_queue_size=*/kTasks), executor);

  std::vector<std::thread> submitters;
  for (int t = 0; t < kThreads; ++t) {
    submitters.emplace_back([&, t] {
      for (int i = 0; i < kTasksPerThread; ++i) {
        scheduler.submit(outcomes.make_task(task_id(std::to_string(t), i)));
      }
    });
  }
  for (auto& submitter : submitters) submitter.join();
  ASSERT_TRUE(outcomes.wait_for(kTasks, 30s));

  EXPECT_EQ(executor.admitted_ids().size(), kTasks);
  EXPECT_LE(executor.max_active(), 8);
  EXPECT_EQ(executor.static_batches(), 0u);
  EXPECT_TRUE(executor.violations().empty());
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kTasksPerThread; ++i) {
      const std::string id = task_id(std::to_string(t), i);
      EXPECT_EQ(outcomes.deliveries(id), 1) << id;
      EXPECT_TRUE(outcomes.get(id)->ok) << id;
    }
  }
  EXPECT_TRUE(scheduler.drain(kLongWait));
}

}  // namespace test_continuous_scheduler
}  // namespace cube3d
