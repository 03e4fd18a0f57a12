// Device faults (core/device_fault.h) against the fake executor: which exception texts are one,
// and what the scheduler does with one (fails exactly the tasks that held device state INTERNAL,
// answers the queue and every later submit UNAVAILABLE, calls its observer once), unlike an
// ordinary executor error, after which it goes on serving.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "cube3d/core/device_fault.h"
#include "cube3d/core/error.h"
#include "cube3d/scheduler/scheduler.h"
#include "cube3d/scheduler/task.h"
#include "fake_executor.h"
#include "scheduler_test_support.h"

namespace cube3d {
namespace test_device_fault {

using namespace std::chrono_literals;
using test::FakeExecutor;
using test::kEndless;
using test::kLongWait;
using test::submit_error;

constexpr const char* kIllegalAddress = "CUDA error: an illegal memory access was encountered";

using Outcome = test::TaskOutcome;
using Outcomes = test::TaskOutcomes;

// What the device-fault observer saw.
struct FaultLog {
  std::mutex mutex;
  int calls = 0;
  std::string message;
  std::vector<std::string> ids;
  Scheduler::DeviceFaultObserver observer() {
    return [this](const DeviceFault& fault, const std::vector<std::string>& request_ids) {
      const std::lock_guard lock(mutex);
      ++calls;
      message = fault.what();
      ids = request_ids;
    };
  }
  int count() {
    const std::lock_guard lock(mutex);
    return calls;
  }
};

SchedulerConfig continuous_config(std::vector<int64_t> buckets) {
  SchedulerConfig config;
  config.mode = BatchingMode::kContinuous;
  config.batch_buckets = std::move(buckets);
  config.max_queue_delay_ms = 0;
  return config;
}

// Static batching; `max_queue_delay_ms` lets a batch wait for company.
SchedulerConfig static_config(std::vector<int64_t> buckets, int64_t max_queue_delay_ms) {
  SchedulerConfig config;
  config.mode = BatchingMode::kStatic;
  config.batch_buckets = std::move(buckets);
  config.max_queue_delay_ms = max_queue_delay_ms;
  return config;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Each of `ids` failed INTERNAL with the message of a device fault during `stage`.
void expect_failed_by_the_fault(Outcomes& outcomes, std::initializer_list<const char*> ids,
                                const std::string& stage) {
  for (const char* id : ids) {
    const Outcome o = outcomes.wait(id);
    EXPECT_EQ(o.code, ErrorCode::kInternal) << id;
    EXPECT_TRUE(has(o.message, "the device failed during " + stage)) << id << ": " << o.message;
  }
}

// --- the rule ----------------------------------------------------------------------------------

TEST(DeviceFaultRule, CudaErrorTextsAreFaults) {
  for (const char* text :
       {"CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be "
        "asynchronously reported",
        "CUDA error: uncorrectable ECC error encountered", "device-side assert triggered",
        "CUDA error: unspecified launch failure", "an illegal memory access was encountered",
        "misaligned address", "cudaErrorLaunchFailure",
        "CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle, ...)`",
        "CUDA driver error: unknown error"}) {
    EXPECT_TRUE(is_device_error_text(text)) << text;
  }
}

TEST(DeviceFaultRule, OrdinaryErrorsAndOutOfMemoryAreNot) {
  for (const char* text :
       {"CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 139 GiB total capacity)",
        "CUDA error: out of memory", "CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate`",
        "mesh has 0 faces", "make_shape expects one object's token ids [T] or [1, T]",
        "shape '[2, 3]' is invalid for input of size 5", ""}) {
    EXPECT_FALSE(is_device_error_text(text)) << text;
  }
}

TEST(DeviceFaultRule, MessageNamesTheStageTheDeviceAndTheRestart) {
  const DeviceFault fault("decoding", kIllegalAddress);
  EXPECT_EQ(fault.code(), ErrorCode::kInternal);
  EXPECT_EQ(std::string(fault.what()),
            "the device failed during decoding (CUDA error: an illegal memory access was "
            "encountered); this replica is restarting");
  EXPECT_EQ(fault.stage(), "decoding");
  EXPECT_EQ(fault.detail(), kIllegalAddress);
  EXPECT_EQ(kExitDeviceFault, 70);
  EXPECT_EQ(device_error_summary("CUDA error: x\nException raised from ...\nframe #0"),
            "CUDA error: x");
  EXPECT_EQ(device_error_summary(std::string(1000, 'a')).size(), 300u);
}

// --- continuous batching -----------------------------------------------------------------------

TEST(DeviceFaultScheduler, FaultInAStepFailsItsSlotsInternalAndTheQueueUnavailable) {
  Outcomes outcomes;
  FaultLog faults;
  FakeExecutor executor(/*slots=*/2);
  executor.set_tokens("a", kEndless);
  executor.set_tokens("b", kEndless);
  executor.hold();
  executor.throw_on_step(0, [] { throw DeviceFault("decoding", kIllegalAddress); });
  // Company: the idle worker waits for b rather than admitting a alone and starting the held
  // step (b could then never be admitted before it; TSan's timing found that order).
  SchedulerConfig config = continuous_config({1, 2});
  config.max_queue_delay_ms = 5000;
  Scheduler scheduler(config, executor, {}, faults.observer());

  scheduler.submit(outcomes.make_task("a"));
  scheduler.submit(outcomes.make_task("b"));
  ASSERT_TRUE(executor.wait_for_admitted(2));
  ASSERT_TRUE(executor.wait_for_steps_started(1));  // held: c waits for a free slot
  scheduler.submit(outcomes.make_task("c"));
  EXPECT_EQ(scheduler.queue_depth(), 1);
  EXPECT_FALSE(scheduler.device_faulted());
  executor.release();

  for (const char* id : {"a", "b"}) {
    const Outcome o = outcomes.wait(id);
    EXPECT_FALSE(o.ok);
    EXPECT_EQ(o.code, ErrorCode::kInternal) << id;
    EXPECT_TRUE(has(o.message, "the device failed during decoding (CUDA error: an illegal memory"))
        << o.message;
    EXPECT_TRUE(has(o.message, "this replica is restarting")) << o.message;
  }
  const Outcome queued = outcomes.wait("c");
  EXPECT_EQ(queued.code, ErrorCode::kUnavailable);
  EXPECT_TRUE(has(queued.message, "not started")) << queued.message;
  EXPECT_TRUE(has(queued.message, "retry it on another replica")) << queued.message;

  EXPECT_TRUE(scheduler.device_faulted());
  EXPECT_TRUE(scheduler.draining());
  const std::optional<Error> refused = submit_error(scheduler, outcomes.make_task("d"));
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->code(), ErrorCode::kUnavailable);
  EXPECT_TRUE(has(refused->what(), "device failed")) << refused->what();

  // Once, with the ids of the step's tasks (not the queued one's).
  EXPECT_EQ(faults.count(), 1);
  {
    const std::lock_guard lock(faults.mutex);
    EXPECT_EQ(faults.ids, (std::vector<std::string>{"a", "b"}));
    EXPECT_TRUE(has(faults.message, "during decoding"));
  }
  // A later fault (another mesh thread) is not a second restart.
  scheduler.report_device_fault(DeviceFault("meshing", kIllegalAddress), {"x"});
  EXPECT_EQ(faults.count(), 1);
  EXPECT_EQ(executor.admitted_ids(), (std::vector<std::string>{"a", "b"}));  // c never ran
  EXPECT_GE(executor.clear_calls(), 1u);
  EXPECT_TRUE(scheduler.drain(kLongWait));
  for (const char* id : {"a", "b", "c"}) EXPECT_EQ(outcomes.deliveries(id), 1) << id;
  EXPECT_TRUE(executor.violations().empty());
}

TEST(DeviceFaultScheduler, FaultInAnAdmissionAlsoFailsTheRunningSlots) {
  Outcomes outcomes;
  FaultLog faults;
  FakeExecutor executor(/*slots=*/2);
  executor.set_tokens("running", kEndless);
  executor.throw_on_admission(1, [] { throw DeviceFault("prefill", kIllegalAddress); });
  Scheduler scheduler(continuous_config({1, 2}), executor, {}, faults.observer());

  scheduler.submit(outcomes.make_task("running"));
  ASSERT_TRUE(executor.wait_for_admitted(1));
  scheduler.submit(outcomes.make_task("joining"));
  expect_failed_by_the_fault(outcomes, {"running", "joining"}, "prefill");
  EXPECT_EQ(faults.count(), 1);
  EXPECT_EQ(executor.active_slots(), 0);
  EXPECT_EQ(submit_error(scheduler, outcomes.make_task("later"))->code(), ErrorCode::kUnavailable);
}

TEST(DeviceFaultScheduler, AnOrdinaryStepErrorFailsOnlyItsTasksAndServingGoesOn) {
  Outcomes outcomes;
  FaultLog faults;
  FakeExecutor executor(/*slots=*/1);
  executor.throw_on_step(0, [] { throw std::runtime_error("one request's mesh was bad"); });
  Scheduler scheduler(continuous_config({1}), executor, {}, faults.observer());

  scheduler.submit(outcomes.make_task("bad"));
  const Outcome bad = outcomes.wait("bad");
  EXPECT_EQ(bad.code, ErrorCode::kInternal);
  EXPECT_TRUE(has(bad.message, "one request's mesh was bad")) << bad.message;
  EXPECT_FALSE(has(bad.message, "device")) << bad.message;

  scheduler.submit(outcomes.make_task("next"));
  EXPECT_TRUE(outcomes.wait("next").ok);
  EXPECT_FALSE(scheduler.device_faulted());
  EXPECT_FALSE(scheduler.draining());
  EXPECT_EQ(faults.count(), 0);
}

TEST(DeviceFaultScheduler, AFaultReportedFromOutsideStopsAdmittingAndLetsRunningWorkAnswer) {
  // A mesh thread's fault: the tasks past their slots are the executor's to finish; the queue
  // is answered at once and nothing new is taken.
  Outcomes outcomes;
  FaultLog faults;
  FakeExecutor executor;  // static batches
  executor.hold();
  Scheduler scheduler(static_config({1}, 0), executor, {}, faults.observer());

  scheduler.submit(outcomes.make_task("running"));
  ASSERT_TRUE(executor.wait_for_batches(1));
  scheduler.submit(outcomes.make_task("queued"));
  scheduler.report_device_fault(DeviceFault("meshing", kIllegalAddress), {"meshed"});
  EXPECT_EQ(outcomes.wait("queued").code, ErrorCode::kUnavailable);
  EXPECT_EQ(faults.count(), 1);
  {
    const std::lock_guard lock(faults.mutex);
    EXPECT_EQ(faults.ids, (std::vector<std::string>{"meshed"}));
  }
  EXPECT_EQ(submit_error(scheduler, outcomes.make_task("new"))->code(), ErrorCode::kUnavailable);

  executor.release();
  EXPECT_TRUE(outcomes.wait("running").ok);  // drained, not failed
  EXPECT_TRUE(scheduler.drain(kLongWait));
  EXPECT_EQ(executor.executed_ids(), (std::set<std::string>{"running"}));
}

// --- static batching ---------------------------------------------------------------------------

TEST(DeviceFaultScheduler, FaultInAStaticBatchFailsItsTasksAndRefusesTheRest) {
  Outcomes outcomes;
  FaultLog faults;
  FakeExecutor executor;
  executor.throw_on_batch(0, [] { throw DeviceFault("decoding", kIllegalAddress); });
  // The queue delay gives "a" company: both tasks run in the one batch.
  Scheduler scheduler(static_config({1, 2}, 200), executor, {}, faults.observer());

  scheduler.submit(outcomes.make_task("a"));
  scheduler.submit(outcomes.make_task("b"));
  expect_failed_by_the_fault(outcomes, {"a", "b"}, "decoding");
  EXPECT_EQ(faults.count(), 1);
  EXPECT_EQ(submit_error(scheduler, outcomes.make_task("c"))->code(), ErrorCode::kUnavailable);
  EXPECT_EQ(executor.static_batches(), 1u);
}

TEST(DeviceFaultScheduler, AnOrdinaryBatchErrorLeavesTheSchedulerServing) {
  Outcomes outcomes;
  FaultLog faults;
  FakeExecutor executor;
  executor.throw_on_batch(0, [] { throw internal_error("mesh stage failed: bad"); });
  Scheduler scheduler(static_config({1}, 0), executor, {}, faults.observer());

  scheduler.submit(outcomes.make_task("bad"));
  EXPECT_EQ(outcomes.wait("bad").code, ErrorCode::kInternal);
  scheduler.submit(outcomes.make_task("next"));
  EXPECT_TRUE(outcomes.wait("next").ok);
  EXPECT_FALSE(scheduler.device_faulted());
  EXPECT_EQ(faults.count(), 0);
}

}  // namespace test_device_fault
}  // namespace cube3d
