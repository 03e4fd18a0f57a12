// The order in which the scheduler takes waiting tasks, in both batching modes, against the fake
// executor (fake_executor.h): interactive before batch priority, batch work aged past
// batch_max_wait_ms competing as an equal, turns across clients and, within a client, across
// its end users; and the limit on waiting batch work (max_queued_batch). The executor is held
// (static: the running batch; continuous: the running steps or endless slots) while the queue
// fills, so every order asserted here is decided by the scheduler alone, not by timing; aging
// is waited for by sleeping past a time point taken after the task was queued.
#include <gtest/gtest.h>

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
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/scheduler/scheduler.h"
#include "cube3d/scheduler/task.h"
#include "fake_executor.h"
#include "scheduler_test_support.h"

namespace cube3d {
namespace test_scheduler_priority {

using namespace std::chrono_literals;
using test::FakeExecutor;
using test::kEndless;
using test::kNoDeadline;
using test::submit_error;
using test::task_id;
constexpr auto kBatch = TaskPriority::kBatch;
constexpr auto kInteractive = TaskPriority::kInteractive;

// Who asks and how urgently; the defaults are an interactive task of no client and no end user.
struct Spec {
  TaskPriority priority = kInteractive;
  std::string client;
  std::string end_user;
  SteadyClock::time_point deadline = kNoDeadline;
  bool progress_throws = false;  // the kQueued report throws (submit then throws it)
};

Spec batch_spec() {
  Spec spec;
  spec.priority = kBatch;
  return spec;
}

Spec user_spec(std::string client, std::string end_user, TaskPriority priority = kInteractive) {
  Spec spec;
  spec.priority = priority;
  spec.client = std::move(client);
  spec.end_user = std::move(end_user);
  return spec;
}

// Tasks made from a Spec; their outcomes recorded. Outlives the scheduler (declare it first).
class Outcomes : public test::TaskOutcomes {
 public:
  std::shared_ptr<Task> make_task(const std::string& id, const Spec& spec = {}) {
    TaskTicket request;
    request.request_id = id;
    request.client = spec.client;
    request.end_user = spec.end_user;
    request.priority = spec.priority;
    const bool progress_throws = spec.progress_throws;
    return TaskOutcomes::make_task(std::move(request), spec.deadline,
                                   [progress_throws](const TaskProgress&) {
                                     if (progress_throws) throw std::runtime_error("stream closed");
                                   });
  }
};

SchedulerConfig make_config(BatchingMode mode, std::vector<int64_t> buckets) {
  SchedulerConfig config;
  config.mode = mode;
  config.batch_buckets = std::move(buckets);
  config.max_queue_delay_ms = 0;
  config.max_joins_per_step = 2;
  return config;
}

std::vector<std::string> ids(const std::string& prefix, int from, int to) {
  std::vector<std::string> result;
  for (int i = from; i < to; ++i) result.push_back(task_id(prefix, i));
  return result;
}

std::vector<std::string> concat(std::initializer_list<std::vector<std::string>> parts) {
  std::vector<std::string> result;
  for (const auto& part : parts) result.insert(result.end(), part.begin(), part.end());
  return result;
}

// Static: holds the executor and runs task "A", so that whatever is submitted next waits.
void occupy_the_executor(Scheduler& scheduler, FakeExecutor& executor, Outcomes& outcomes) {
  executor.hold();
  scheduler.submit(outcomes.make_task("A"));
  ASSERT_TRUE(executor.wait_for_batches(1));
}

// Continuous, one slot: holds the steps and runs task "A" (its first step blocked), so that
// whatever is submitted next waits until release() and A's last step.
void start_a_held_slot(Scheduler& scheduler, FakeExecutor& executor, Outcomes& outcomes) {
  executor.hold();
  scheduler.submit(outcomes.make_task("A"));
  ASSERT_TRUE(executor.wait_for_steps_started(1));
}

// Every task id of every static batch after the first (task "A"), in order.
std::vector<std::string> ids_after_the_first_batch(const FakeExecutor& executor) {
  std::vector<std::string> result;
  const auto batches = executor.batches();
  for (size_t i = 1; i < batches.size(); ++i) {
    result.insert(result.end(), batches[i].ids.begin(), batches[i].ids.end());
  }
  return result;
}

// Submits `count` tasks "<prefix>-<i>" of `spec`.
void submit_tasks(Scheduler& scheduler, Outcomes& outcomes, const std::string& prefix, int count,
                  const Spec& spec) {
  for (int i = 0; i < count; ++i) scheduler.submit(outcomes.make_task(task_id(prefix, i), spec));
}

// Continuous, one slot, held by task "A" (start_a_held_slot): whatever is submitted queues until
// admitted_after_release(), so the order of admission is the scheduler's choice alone.
struct OneHeldSlot {
  explicit OneHeldSlot(const SchedulerConfig& config = make_config(BatchingMode::kContinuous, {1}))
      : scheduler(config, executor) {
    start_a_held_slot(scheduler, executor, outcomes);
  }
  void submit(const std::string& id, const Spec& spec = {}) {
    scheduler.submit(outcomes.make_task(id, spec));
  }
  // Releases the steps; once `count` tasks (A included) are done, the ids in order of admission.
  std::vector<std::string> admitted_after_release(size_t count) {
    executor.release();
    EXPECT_TRUE(outcomes.wait_for(count)) << outcomes.count() << " of " << count << " done";
    return executor.admitted_ids();
  }

  // Declared in this order so that the scheduler goes first and the outcomes last.
  Outcomes outcomes;
  FakeExecutor executor{1};
  Scheduler scheduler;
};

// A static config whose queue holds `max_queue_size` tasks, at most `max_queued_batch` of them
// batch work.
SchedulerConfig batch_limited_config(int64_t max_queue_size, int64_t max_queued_batch) {
  auto config = make_config(BatchingMode::kStatic, {1, 2, 4, 8});
  config.max_queue_size = max_queue_size;
  config.max_queued_batch = max_queued_batch;
  return config;
}

// Submits `limit` batch tasks "<prefix>-<i>", then one more, "<prefix>-<limit>", which
// max_queued_batch refuses as RESOURCE_EXHAUSTED; returns the refusal's message ("" and a
// failure when it was accepted).
std::string refused_past_the_batch_limit(Scheduler& scheduler, Outcomes& outcomes,
                                         const std::string& prefix, int limit) {
  submit_tasks(scheduler, outcomes, prefix, limit, batch_spec());
  const auto one_more = task_id(prefix, limit);
  const auto refused = submit_error(scheduler, outcomes.make_task(one_more, batch_spec()));
  if (!refused) {
    ADD_FAILURE() << one_more << " was accepted past the batch limit of " << limit;
    return "";
  }
  EXPECT_EQ(refused->code(), ErrorCode::kResourceExhausted) << refused->what();
  return refused->what();
}

// Sleeps until batch work queued before `queued_by` has aged past `batch_max_wait_ms`.
void wait_until_aged(SteadyClock::time_point queued_by, int64_t batch_max_wait_ms) {
  std::this_thread::sleep_until(queued_by + std::chrono::milliseconds(batch_max_wait_ms) + 2ms);
}

// --- priority: interactive before batch ------------------------------------------------------

TEST(SchedulerPriority, StaticInteractiveTaskLeadsTheNextBatchAheadOfFortyBatchTasks) {
  Outcomes outcomes;
  FakeExecutor executor;
  Scheduler scheduler(make_config(BatchingMode::kStatic, {1, 2, 4, 8}), executor);
  occupy_the_executor(scheduler, executor, outcomes);
  submit_tasks(scheduler, outcomes, "batch", 40, batch_spec());
  scheduler.submit(outcomes.make_task("player"));
  EXPECT_EQ(scheduler.queued_batch(), 40);
  executor.release();
  ASSERT_TRUE(outcomes.wait_for(42));

  const auto batches = executor.batches();
  ASSERT_GE(batches.size(), 2u);
  EXPECT_EQ(batches[1].ids, concat({{"player"}, ids("batch", 0, 7)}));
  // The batch work then runs FIFO.
  EXPECT_EQ(ids_after_the_first_batch(executor), concat({{"player"}, ids("batch", 0, 40)}));
  EXPECT_EQ(scheduler.queued_batch(), 0);
}

TEST(SchedulerPriority, ContinuousInteractiveTaskTakesTheFreedSlotAheadOfFortyBatchTasks) {
  OneHeldSlot slot;
  submit_tasks(slot.scheduler, slot.outcomes, "batch", 40, batch_spec());
  slot.submit("player");
  EXPECT_EQ(slot.admitted_after_release(42), concat({{"A", "player"}, ids("batch", 0, 40)}));
  // The very admission after A's slot freed.
  EXPECT_EQ(slot.executor.position_of("admit:player"), slot.executor.position_of("done:A") + 1);
  EXPECT_TRUE(slot.executor.violations().empty());
}

TEST(SchedulerPriority, ContinuousInteractiveTaskJoinsAtTheStepThatFreesASlot) {
  // Four endless slots keep stepping; the queue fills behind them; freeing one slot (its task
  // cancelled, dropped at the next step) lets the interactive task in at that step's admission.
  Outcomes outcomes;
  FakeExecutor executor(4);
  Scheduler scheduler(make_config(BatchingMode::kContinuous, {1, 2, 4}), executor);
  std::vector<std::shared_ptr<Task>> fillers;
  for (int i = 0; i < 4; ++i) {
    executor.set_tokens(task_id("filler", i), kEndless);
    fillers.push_back(outcomes.make_task(task_id("filler", i)));
  }
  executor.hold();
  scheduler.submit(fillers[0]);
  ASSERT_TRUE(executor.wait_for_steps_started(1));
  for (int i = 1; i < 4; ++i) scheduler.submit(fillers[static_cast<size_t>(i)]);
  executor.release();
  ASSERT_TRUE(executor.wait_for_admitted(4));

  submit_tasks(scheduler, outcomes, "batch", 40, batch_spec());
  scheduler.submit(outcomes.make_task("player"));
  fillers[0]->cancel();
  ASSERT_TRUE(executor.wait_for_admitted(5));

  // The player's task is finite: once done, batch work takes its slot, perhaps before this
  // thread looks, so only the first five admissions are the scheduler's answer here.
  auto admitted = executor.admitted_ids();
  ASSERT_GE(admitted.size(), 5u);
  admitted.resize(5);
  EXPECT_EQ(admitted, concat({ids("filler", 0, 4), {"player"}}));
  EXPECT_EQ(executor.position_of("admit:player"), executor.position_of("dropped:filler-0") + 1);
  EXPECT_TRUE(executor.violations().empty());
}

// --- aging ---------------------------------------------------------------------------------

TEST(SchedulerPriority, StaticAgedBatchTaskCompetesAsAnEqualWithInteractiveWork) {
  constexpr int64_t kMaxWaitMs = 50;
  Outcomes outcomes;
  FakeExecutor executor;
  auto config = make_config(BatchingMode::kStatic, {1, 2, 4, 8});
  config.batch_max_wait_ms = kMaxWaitMs;
  Scheduler scheduler(config, executor);
  occupy_the_executor(scheduler, executor, outcomes);
  scheduler.submit(outcomes.make_task("early"));
  scheduler.submit(outcomes.make_task("old", batch_spec()));
  wait_until_aged(SteadyClock::now(), kMaxWaitMs);
  // A supply of interactive work, more than the next batch holds, and a fresh batch task.
  submit_tasks(scheduler, outcomes, "player", 9, {});
  scheduler.submit(outcomes.make_task("fresh", batch_spec()));
  executor.release();
  ASSERT_TRUE(outcomes.wait_for(13));

  // "old" takes its place in arrival order: after "early", before the later interactive tasks
  // (not ahead of everything); unaged, it would have waited behind all of them.
  EXPECT_EQ(executor.batches()[1].ids, concat({{"early", "old"}, ids("player", 0, 6)}));
  EXPECT_EQ(ids_after_the_first_batch(executor),
            concat({{"early", "old"}, ids("player", 0, 9), {"fresh"}}));
}

TEST(SchedulerPriority, ContinuousAgedBatchTaskIsAdmittedDespiteWaitingInteractiveWork) {
  constexpr int64_t kMaxWaitMs = 50;
  auto config = make_config(BatchingMode::kContinuous, {1});
  config.batch_max_wait_ms = kMaxWaitMs;
  OneHeldSlot slot(config);
  submit_tasks(slot.scheduler, slot.outcomes, "early", 2, {});
  slot.submit("old", batch_spec());
  submit_tasks(slot.scheduler, slot.outcomes, "player", 10, {});
  wait_until_aged(SteadyClock::now(), kMaxWaitMs);
  EXPECT_EQ(slot.admitted_after_release(14),
            concat({{"A"}, ids("early", 0, 2), {"old"}, ids("player", 0, 10)}));
}

TEST(SchedulerPriority, ZeroMaxWaitAgesBatchWorkAtOnceSoTheQueueIsFifo) {
  auto config = make_config(BatchingMode::kContinuous, {1});
  config.batch_max_wait_ms = 0;
  OneHeldSlot slot(config);
  slot.submit("b-0", batch_spec());
  slot.submit("i-0");
  slot.submit("b-1", batch_spec());
  slot.submit("i-1");
  EXPECT_EQ(slot.admitted_after_release(5),
            (std::vector<std::string>{"A", "b-0", "i-0", "b-1", "i-1"}));
}

TEST(SchedulerPriority, UnagedBatchWorkRunsWhenNothingElseWaitsWithoutWaitingToAge) {
  // Priorities only order the queue: batch work alone runs at once, not after its max wait.
  Outcomes outcomes;
  FakeExecutor executor;
  auto config = make_config(BatchingMode::kStatic, {1, 2, 4});
  config.batch_max_wait_ms = kMaxBatchWaitMs;
  Scheduler scheduler(config, executor);
  submit_tasks(scheduler, outcomes, "batch", 3, batch_spec());
  ASSERT_TRUE(outcomes.wait_for(3));
  for (const auto& id : ids("batch", 0, 3)) EXPECT_TRUE(outcomes.get(id)->ok) << id;
}

// --- end users -----------------------------------------------------------------------------

TEST(SchedulerEndUsers, ContinuousEndUsersOfOneClientTakeTurns) {
  OneHeldSlot slot;
  submit_tasks(slot.scheduler, slot.outcomes, "a", 20, user_spec("studio", "user-a"));
  submit_tasks(slot.scheduler, slot.outcomes, "b", 2, user_spec("studio", "user-b"));
  EXPECT_EQ(slot.admitted_after_release(23),
            concat({{"A", "a-0", "b-0", "a-1", "b-1"}, ids("a", 2, 20)}));
}

TEST(SchedulerEndUsers, StaticEndUsersOfOneClientTakeTurnsWithinABatch) {
  Outcomes outcomes;
  FakeExecutor executor;
  Scheduler scheduler(make_config(BatchingMode::kStatic, {1, 2, 4, 8}), executor);
  occupy_the_executor(scheduler, executor, outcomes);
  submit_tasks(scheduler, outcomes, "a", 20, user_spec("", "user-a"));
  submit_tasks(scheduler, outcomes, "b", 2, user_spec("", "user-b"));
  executor.release();
  ASSERT_TRUE(outcomes.wait_for(23));

  EXPECT_EQ(executor.batches()[1].ids, concat({{"a-0", "b-0", "a-1", "b-1"}, ids("a", 2, 6)}));
  EXPECT_EQ(ids_after_the_first_batch(executor),
            concat({{"a-0", "b-0", "a-1", "b-1"}, ids("a", 2, 20)}));
}

TEST(SchedulerEndUsers, ClientsStillTakeTurnsWhenTheirEndUsersDo) {
  // Client x has two end users (6 tasks and 2), client y none (3 tasks): the clients alternate,
  // and x's turns alternate between its users.
  OneHeldSlot slot;
  submit_tasks(slot.scheduler, slot.outcomes, "x1", 6, user_spec("x", "u1"));
  submit_tasks(slot.scheduler, slot.outcomes, "x2", 2, user_spec("x", "u2"));
  submit_tasks(slot.scheduler, slot.outcomes, "y", 3, user_spec("y", ""));
  EXPECT_EQ(slot.admitted_after_release(12),
            concat({{"A", "x1-0", "y-0", "x2-0", "y-1", "x1-1", "y-2", "x2-1"}, ids("x1", 2, 6)}));
}

TEST(SchedulerEndUsers, PriorityComesBeforeEndUserTurns) {
  // After a-player, user b's turn would be next, but b has only batch work: a's second
  // interactive task goes first. Then the batch work takes turns from where they left off.
  OneHeldSlot slot;
  slot.submit("a-batch", user_spec("", "a", kBatch));
  slot.submit("b-batch", user_spec("", "b", kBatch));
  slot.submit("a-player", user_spec("", "a"));
  slot.submit("a-player2", user_spec("", "a"));
  EXPECT_EQ(slot.admitted_after_release(5),
            (std::vector<std::string>{"A", "a-player", "a-player2", "b-batch", "a-batch"}));
}

// --- max_queued_batch ----------------------------------------------------------------------

TEST(SchedulerBatchQueue, BatchWorkPastItsLimitIsRefusedWhileInteractiveWorkIsAccepted) {
  Outcomes outcomes;
  FakeExecutor executor;
  Scheduler scheduler(batch_limited_config(10, 3), executor);
  occupy_the_executor(scheduler, executor, outcomes);
  EXPECT_EQ(refused_past_the_batch_limit(scheduler, outcomes, "batch", 3),
            "batch queue full (3 batch jobs waiting, batching.max_queued_batch); retry later");
  EXPECT_FALSE(submit_error(scheduler, outcomes.make_task("player")).has_value());
  EXPECT_EQ(scheduler.queue_depth(), 4);
  EXPECT_EQ(scheduler.queued_batch(), 3);

  executor.release();
  ASSERT_TRUE(outcomes.wait_for(5));
  EXPECT_FALSE(outcomes.get("batch-3").has_value());
  EXPECT_EQ(executor.batches()[1].ids,
            (std::vector<std::string>{"player", "batch-0", "batch-1", "batch-2"}));
  EXPECT_EQ(scheduler.queued_batch(), 0);
}

TEST(SchedulerBatchQueue, TheBatchCountStaysRightThroughCancellationExpiryAndRefusedReports) {
  Outcomes outcomes;
  FakeExecutor executor;
  Scheduler scheduler(batch_limited_config(10, 3), executor);
  occupy_the_executor(scheduler, executor, outcomes);

  // A batch task whose kQueued report throws is not counted.
  auto broken = batch_spec();
  broken.progress_throws = true;
  EXPECT_THROW(scheduler.submit(outcomes.make_task("broken", broken)), std::runtime_error);
  EXPECT_EQ(scheduler.queued_batch(), 0);

  auto gone = outcomes.make_task("gone", batch_spec());
  const auto deadline = SteadyClock::now() + 50ms;
  scheduler.submit(gone);
  auto late = batch_spec();
  late.deadline = deadline;
  scheduler.submit(outcomes.make_task("late", late));
  scheduler.submit(outcomes.make_task("runs", batch_spec()));
  EXPECT_EQ(scheduler.queued_batch(), 3);
  gone->cancel();
  std::this_thread::sleep_until(deadline + 5ms);  // "late" is surely expired now
  executor.release();
  ASSERT_TRUE(outcomes.wait_for(4));
  EXPECT_EQ(outcomes.get("gone")->code, ErrorCode::kCancelled);
  EXPECT_EQ(outcomes.get("late")->code, ErrorCode::kDeadlineExceeded);
  EXPECT_TRUE(outcomes.get("runs")->ok);
  EXPECT_EQ(scheduler.queued_batch(), 0);

  // The whole limit is free again: exactly three more batch tasks are accepted.
  executor.hold();
  scheduler.submit(outcomes.make_task("A2"));
  ASSERT_TRUE(executor.wait_for_batches(3));
  const auto refused = refused_past_the_batch_limit(scheduler, outcomes, "again", 3);
  EXPECT_NE(refused.find("3 batch jobs waiting"), std::string::npos) << refused;

  // Stopping fails them and empties the count.
  EXPECT_FALSE(scheduler.drain(0ms));
  EXPECT_EQ(outcomes.get("again-0")->code, ErrorCode::kUnavailable);
  EXPECT_EQ(scheduler.queued_batch(), 0);
  EXPECT_EQ(scheduler.queue_depth(), 0);
}

TEST(SchedulerBatchQueue, ContinuousAdmissionsKeepTheBatchCountRight) {
  Outcomes outcomes;
  FakeExecutor executor(2);
  auto config = make_config(BatchingMode::kContinuous, {1, 2});
  config.max_queue_size = 4;
  config.max_queued_batch = 2;
  Scheduler scheduler(config, executor);
  start_a_held_slot(scheduler, executor, outcomes);
  refused_past_the_batch_limit(scheduler, outcomes, "batch", 2);
  executor.release();
  ASSERT_TRUE(outcomes.wait_for(3));
  EXPECT_EQ(scheduler.queued_batch(), 0);

  // Held again: "B" is admitted and its first step blocks (the worker steps right after an
  // admission), so the next tasks wait; the limit holds two again.
  executor.hold();
  scheduler.submit(outcomes.make_task("B"));
  ASSERT_TRUE(executor.wait_for_admitted(4));
  refused_past_the_batch_limit(scheduler, outcomes, "next", 2);
  EXPECT_EQ(scheduler.queued_batch(), 2);
  executor.release();
  ASSERT_TRUE(outcomes.wait_for(6));
  EXPECT_EQ(scheduler.queued_batch(), 0);
  EXPECT_TRUE(executor.violations().empty());
}

// --- configuration -------------------------------------------------------------------------

TEST(SchedulerPriorityConfig, ValidationNamesTheNewFields) {
  SchedulerConfig config;
  config.batch_max_wait_ms = -1;
  test::expect_config_rejected(config, "batch_max_wait_ms");
  config.batch_max_wait_ms = kMaxBatchWaitMs + 1;
  test::expect_config_rejected(config, "batch_max_wait_ms");
  for (const int64_t ok : {int64_t{0}, int64_t{50}, kMaxBatchWaitMs}) {
    config.batch_max_wait_ms = ok;
    EXPECT_NO_THROW(validate_scheduler_config(config)) << ok;
  }

  config = SchedulerConfig{};
  config.max_queue_size = 10;
  config.max_queued_batch = -1;
  test::expect_config_rejected(config, "max_queued_batch");
  config.max_queued_batch = 11;
  test::expect_config_rejected(config, "max_queued_batch");
  for (const int64_t ok : {int64_t{0}, int64_t{1}, int64_t{10}}) {
    config.max_queued_batch = ok;
    EXPECT_NO_THROW(validate_scheduler_config(config)) << ok;
  }
}

TEST(SchedulerPriorityConfig, EffectiveMaxQueuedBatchDefaultsToThreeQuartersOfTheQueue) {
  const auto effective = [](int64_t max_queue_size, int64_t max_queued_batch) {
    SchedulerConfig config;
    config.max_queue_size = max_queue_size;
    config.max_queued_batch = max_queued_batch;
    return effective_max_queued_batch(config);
  };
  EXPECT_EQ(effective_max_queued_batch(SchedulerConfig{}), 48);  // of the default 64
  EXPECT_EQ(effective(1, 0), 1);
  EXPECT_EQ(effective(2, 0), 1);
  EXPECT_EQ(effective(4, 0), 3);
  EXPECT_EQ(effective(10, 7), 7);
  EXPECT_EQ(effective(10, 10), 10);
}

TEST(SchedulerPriorityConfig, PriorityNames) {
  EXPECT_STREQ(to_string(TaskPriority::kInteractive), "interactive");
  EXPECT_STREQ(to_string(TaskPriority::kBatch), "batch");
  EXPECT_EQ(TaskTicket{}.priority, TaskPriority::kInteractive);
}

}  // namespace test_scheduler_priority
}  // namespace cube3d
