// The load shapes over a fake transport: which requests go out (plan order, contiguous
// indices), one sender per closed-loop worker kept across phases, and an open loop that never
// waits for a sender.
#include "cube3d/clients/load_driver.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "clients/fake_sender.h"
#include "cube3d/core/error.h"

namespace cube3d {
namespace test_load_driver {

using namespace std::chrono_literals;
using testing::FakeSenderFactory;

RequestPlan plan() {
  RequestPlan p;
  p.prompts = {"p0", "p1", "p2"};
  p.base_seed = 1000;
  return p;
}

LoadConfig closed(uint64_t concurrency) {
  LoadConfig c;
  c.concurrency = concurrency;
  return c;
}

LoadConfig open(double rate) {
  LoadConfig c;
  c.open_loop = true;
  c.rate_rps = rate;
  return c;
}

TEST(LoadDriverTest, ClosedLoopSendsThePlanInOrderOfIndex) {
  const auto factory = std::make_shared<FakeSenderFactory>(1ms);
  LoadDriver driver(closed(3), plan(), factory);
  const PhaseResult phase = driver.run_phase(5, 30, 0, 0);
  ASSERT_EQ(phase.records.size(), 30u);
  for (uint64_t i = 0; i < 30; ++i) {
    EXPECT_EQ(phase.records[i].index, i);
    EXPECT_EQ(phase.records[i].status, "OK");
  }
  EXPECT_GT(phase.wall_s, 0.0);
  // Requests 5..34 of the plan, each once.
  std::set<uint64_t> seeds;
  for (const auto& s : factory->sent()) {
    seeds.insert(s.seed);
    EXPECT_EQ(s.prompt, plan().prompts[(s.seed - 1000) % 3]);
  }
  ASSERT_EQ(seeds.size(), 30u);
  EXPECT_EQ(*seeds.begin(), 1005u);
  EXPECT_EQ(*seeds.rbegin(), 1034u);
}

TEST(LoadDriverTest, EachClosedLoopWorkerKeepsOneSenderAcrossPhases) {
  const auto factory = std::make_shared<FakeSenderFactory>(2ms);
  LoadDriver driver(closed(4), plan(), factory);
  driver.run_phase(0, 8, 0, 0);  // the warm-up
  driver.run_phase(8, 40, 0, 0);
  EXPECT_EQ(factory->made(), 4);  // the warm-up's senders carried on
  EXPECT_EQ(driver.pool().idle(), 4u);
  // Within a phase a sender is one worker's: always the same thread.
  std::map<int, std::set<std::thread::id>> threads_of_sender;
  for (const auto& s : factory->sent()) {
    if (s.seed >= 1008) threads_of_sender[s.sender].insert(s.thread);
  }
  for (const auto& [sender, threads] : threads_of_sender) EXPECT_EQ(threads.size(), 1u) << sender;
  EXPECT_LE(factory->in_flight_peak(), 4);
}

TEST(LoadDriverTest, ClosedLoopCutByDurationKeepsIndicesContiguous) {
  const auto factory = std::make_shared<FakeSenderFactory>(5ms);
  LoadDriver driver(closed(2), plan(), factory);
  const PhaseResult phase = driver.run_phase(0, 0, 0.2, 0);
  ASSERT_FALSE(phase.records.empty());
  for (uint64_t i = 0; i < phase.records.size(); ++i) EXPECT_EQ(phase.records[i].index, i);
  EXPECT_LT(phase.records.size(), 200u);
  EXPECT_GE(phase.wall_s, 0.2);
}

TEST(LoadDriverTest, OpenLoopFollowsTheScheduleAndReusesIdleSenders) {
  const auto factory = std::make_shared<FakeSenderFactory>(5ms);
  LoadDriver driver(open(100), plan(), factory);
  const PhaseResult phase = driver.run_phase(0, 40, 0, 7);
  const std::vector<double> schedule = poisson_schedule(100, 7, 40, 0);
  ASSERT_EQ(phase.records.size(), 40u);
  for (size_t i = 0; i < 40; ++i) {
    EXPECT_EQ(phase.records[i].index, i);
    // Sent on time (sleep_until never wakes early; allow some lateness on a busy machine).
    EXPECT_GE(phase.records[i].send_offset_s, schedule[i] - 1e-3);
    EXPECT_LT(phase.records[i].send_offset_s, schedule[i] + 0.5);
  }
  // A sender per request in flight at once, not per request.
  EXPECT_LT(factory->made(), 40);
  EXPECT_EQ(driver.pool().idle(), static_cast<size_t>(factory->made()));
}

TEST(LoadDriverTest, OpenLoopNeverWaitsForASender) {
  // Service far slower than the arrivals: every request needs a sender of its own.
  const auto factory = std::make_shared<FakeSenderFactory>(300ms);
  LoadDriver driver(open(200), plan(), factory);
  const PhaseResult phase = driver.run_phase(0, 10, 0, 3);
  ASSERT_EQ(phase.records.size(), 10u);
  EXPECT_EQ(factory->made(), 10);
  EXPECT_EQ(factory->in_flight_peak(), 10);
  EXPECT_LT(phase.wall_s, 2.0);  // in parallel, not one after another (3 s)
}

TEST(LoadDriverTest, RefusesWhatCannotRun) {
  const auto factory = std::make_shared<FakeSenderFactory>();
  EXPECT_THROW(LoadDriver(closed(0), plan(), factory), Error);
  EXPECT_THROW(LoadDriver(closed(1), RequestPlan{}, factory), Error);
  LoadDriver driver(closed(1), plan(), factory);
  EXPECT_THROW(driver.run_phase(0, 0, 0, 0), Error);  // no bound
}

}  // namespace test_load_driver
}  // namespace cube3d
