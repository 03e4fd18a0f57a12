// The executor's test-only fault injection (CUBE3D_FAULT_INJECTION's syntax) and what the real
// scheduler and EngineExecutor make of each fault on a tiny random-weight model on the CPU: an
// injected device fault in a decode step fails that step's requests INTERNAL and stops the
// scheduler for good; one in the mesh stage fails its request and reaches on_device_fault; an
// ordinary mesh error fails one request and the next one succeeds.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cube3d/core/device_fault.h"
#include "cube3d/core/error.h"
#include "cube3d/engine/engine.h"
#include "cube3d/scheduler/scheduler.h"
#include "cube3d/server/executor/engine_executor.h"
#include "cube3d/server/work/work_request.h"
#include "engine/test_model_fixture.h"
#include "scheduler/scheduler_test_support.h"

namespace cube3d {
namespace test_engine_executor_faults {

using namespace std::chrono_literals;

constexpr auto kWait = 60s;  // a tiny model on a loaded CPU: seconds at most

using Outcome = test::TaskOutcome;

// Tasks the tiny model can make quickly; their outcomes recorded, waited for up to kWait.
class Outcomes : public test::TaskOutcomes {
 public:
  Outcomes() : TaskOutcomes(kWait) {}
  std::shared_ptr<Task> make_task(const std::string& id) {
    WorkRequest request;
    request.request_id = id;
    request.prompt = "a small chair " + id;
    request.resolution_base = 3;
    request.format = MeshFormat::kRaw;
    TaskTicket ticket = ticket_of(request);  // before the request moves into the payload
    return TaskOutcomes::make_task(std::move(ticket), test::kNoDeadline, {}, std::move(request));
  }
};

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::unique_ptr<Engine> tiny_server_engine() {
  EngineOptions options;
  options.max_batch = 2;
  options.capture.buckets = {1, 2};
  options.capture.guided = true;
  options.capture.unguided = true;
  return Engine::load(test::tiny_config(), options);
}

SchedulerConfig continuous_config() {
  SchedulerConfig config;
  config.mode = BatchingMode::kContinuous;
  config.batch_buckets = {1, 2};
  config.max_queue_delay_ms = 100;  // both tasks of a test join at once
  return config;
}

// A scheduler over an EngineExecutor on the tiny model, wired as server_main wires them.
struct Served {
  explicit Served(FaultInjection faults) : engine(tiny_server_engine()) {
    ExecutorOptions options;
    options.batch_buckets = {1, 2};
    options.mesh_threads = 1;
    options.faults = faults;
    options.on_device_fault = [this](const DeviceFault& fault, const std::string& request_id) {
      {
        const std::lock_guard lock(mutex);
        hook_ids.push_back(request_id);
      }
      if (Scheduler* const s = scheduler_for_faults.load())
        s->report_device_fault(fault, {request_id});
    };
    executor = std::make_unique<EngineExecutor>(*engine, std::move(options));
    scheduler = std::make_unique<Scheduler>(
        continuous_config(), *executor, Scheduler::BatchObserver{},
        [this](const DeviceFault& fault, const std::vector<std::string>& ids) {
          const std::lock_guard lock(mutex);
          ++observer_calls;
          observed_stage = fault.stage();
          observed_ids = ids;
        });
    scheduler_for_faults = scheduler.get();
  }
  ~Served() {
    scheduler_for_faults = nullptr;
    scheduler.reset();
    executor->wait_idle(kWait);
  }

  std::mutex mutex;
  int observer_calls = 0;
  std::string observed_stage;
  std::vector<std::string> observed_ids;
  std::vector<std::string> hook_ids;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<EngineExecutor> executor;
  std::atomic<Scheduler*> scheduler_for_faults{nullptr};
  std::unique_ptr<Scheduler> scheduler;
};

TEST(FaultInjectionSpec, ParsesEachFaultAndCombinations) {
  EXPECT_FALSE(parse_fault_injection("").any());
  FaultInjection step;
  step.device_fault_at_step = 3;
  EXPECT_EQ(parse_fault_injection("device_fault_at_step:3"), step);
  FaultInjection all;
  all.device_fault_at_step = 130;
  all.mesh_error_at_request = 1;
  all.device_fault_at_mesh = 7;
  EXPECT_EQ(parse_fault_injection(
                "device_fault_at_step:130,mesh_error_at_request:1,device_fault_at_mesh:7"),
            all);
  EXPECT_TRUE(all.any());
  EXPECT_EQ(std::string(kFaultInjectionEnv), "CUBE3D_FAULT_INJECTION");
}

TEST(FaultInjectionSpec, RefusesWhatItDoesNotKnowNamingTheVariable) {
  for (const char* bad :
       {"device_fault_at_step", "device_fault_at_step:", "gpu_melt:1", "device_fault_at_step:0",
        "device_fault_at_step:-1", "device_fault_at_step:x", "mesh_error_at_request:1;rm",
        "device_fault_at_step:99999999999999"}) {
    try {
      (void)parse_fault_injection(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << bad;
      EXPECT_TRUE(has(e.what(), "CUBE3D_FAULT_INJECTION")) << e.what();
    }
  }
}

// Submits the task `id` to the served scheduler and waits for its outcome.
Outcome submit_and_wait(Served& served, Outcomes& outcomes, const std::string& id) {
  served.scheduler->submit(outcomes.make_task(id));
  return outcomes.wait(id);
}

TEST(EngineExecutorFaults, AnInjectedDeviceFaultInAStepFailsItsRequestsAndStopsAdmitting) {
  Outcomes outcomes;
  FaultInjection faults;
  faults.device_fault_at_step = 3;  // of the 11 steps after the prefill (T = 12)
  Served served(faults);
  served.scheduler->submit(outcomes.make_task("a"));
  served.scheduler->submit(outcomes.make_task("b"));
  for (const char* id : {"a", "b"}) {
    const Outcome o = outcomes.wait(id);
    EXPECT_FALSE(o.ok) << id;
    EXPECT_EQ(o.code, ErrorCode::kInternal) << id;
    EXPECT_TRUE(has(o.message,
                    "the device failed during decoding (CUDA error: an illegal memory "
                    "access was encountered [injected by CUBE3D_FAULT_INJECTION"))
        << o.message;
    EXPECT_TRUE(has(o.message, "this replica is restarting")) << o.message;
  }
  EXPECT_TRUE(served.scheduler->device_faulted());
  EXPECT_EQ(served.executor->active_slots(), 0);
  try {
    served.scheduler->submit(outcomes.make_task("c"));
    ADD_FAILURE() << "a submit after the fault was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
  }
  const std::lock_guard lock(served.mutex);
  EXPECT_EQ(served.observer_calls, 1);
  EXPECT_EQ(served.observed_stage, "decoding");
  EXPECT_EQ(served.observed_ids.size(), 2u);
}

TEST(EngineExecutorFaults, AnInjectedMeshErrorFailsOneRequestAndTheNextSucceeds) {
  Outcomes outcomes;
  Served served(FaultInjection{.mesh_error_at_request = 1});
  const Outcome bad = submit_and_wait(served, outcomes, "bad");
  EXPECT_EQ(bad.code, ErrorCode::kInternal);
  EXPECT_TRUE(has(bad.message, "mesh stage failed: injected by CUBE3D_FAULT_INJECTION"))
      << bad.message;
  EXPECT_FALSE(has(bad.message, "device failed")) << bad.message;

  const Outcome next = submit_and_wait(served, outcomes, "next");
  EXPECT_TRUE(next.ok) << next.message;
  EXPECT_FALSE(served.scheduler->device_faulted());
  const std::lock_guard lock(served.mutex);
  EXPECT_EQ(served.observer_calls, 0);
  EXPECT_TRUE(served.hook_ids.empty());
}

TEST(EngineExecutorFaults, AnInjectedDeviceFaultWhileMeshingFailsThatRequestAndReportsIt) {
  Outcomes outcomes;
  Served served(FaultInjection{.device_fault_at_mesh = 1});
  const Outcome a = submit_and_wait(served, outcomes, "a");
  EXPECT_EQ(a.code, ErrorCode::kInternal);
  EXPECT_TRUE(has(a.message, "the device failed during meshing")) << a.message;
  EXPECT_TRUE(served.scheduler->device_faulted());
  const std::lock_guard lock(served.mutex);
  EXPECT_EQ(served.hook_ids, (std::vector<std::string>{"a"}));
  EXPECT_EQ(served.observer_calls, 1);
  EXPECT_EQ(served.observed_stage, "meshing");
  EXPECT_EQ(served.observed_ids, (std::vector<std::string>{"a"}));
}

}  // namespace test_engine_executor_faults
}  // namespace cube3d
