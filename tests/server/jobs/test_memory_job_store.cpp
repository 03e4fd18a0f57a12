// What the memory job store promises beyond the JobStore contract (test_job_store_contract.cpp,
// which both stores pass): ids tagged by server run, a lookup of another run's job, the expiry
// seen before the sweep runs, bounded tombstones, answers inline or on the finishing or timer
// thread, the timers it leaves, and counts reported synchronously at each change.
#include "cube3d/server/jobs/memory_job_store.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/server/timing/timer_queue.h"
#include "eventually.h"
#include "server/jobs/job_store_test_helpers.h"

namespace cube3d {
namespace test_memory_job_store {

using std::chrono::milliseconds;
using testing::Capture;
using testing::CountsSeen;
using testing::eventually;
using testing::job_of;
using testing::result_of_size;
using testing::stage;
using testing::status_of;
using testing::unknown_id_like;
using Answer = JobStore::Answer;

// An answer that must come inline (an ended job, or wait 0).
Answer get_now(JobStore& store, const std::string& id, const std::string& owner = "") {
  std::optional<Answer> answer;
  store.get(id, owner, milliseconds(0), [&](Answer a) { answer = std::move(a); });
  EXPECT_TRUE(answer.has_value()) << "get with wait 0 did not answer inline";
  return answer ? std::move(*answer) : Answer(Status(ErrorCode::kInternal, "none"));
}

// Holds the timer thread inside an action until released: what the store's timers would do
// cannot run meanwhile. The action shares the gate, which it may still touch after release().
class TimerThreadBlock {
 public:
  explicit TimerThreadBlock(TimerQueue& timers) : gate_(std::make_shared<Gate>()) {
    timer_ = timers.schedule_after(milliseconds(0), [gate = gate_] {
      std::unique_lock lock(gate->mutex);
      gate->entered = true;
      gate->changed.notify_all();
      gate->changed.wait(lock, [&] { return gate->released; });
    });
    std::unique_lock lock(gate_->mutex);
    gate_->changed.wait(lock, [this] { return gate_->entered; });
  }
  ~TimerThreadBlock() {
    {
      const std::lock_guard lock(gate_->mutex);
      gate_->released = true;
    }
    gate_->changed.notify_all();
  }

 private:
  struct Gate {
    std::mutex mutex;
    std::condition_variable changed;
    bool entered = false;
    bool released = false;
  };
  std::shared_ptr<Gate> gate_;
  TimerQueue::Timer timer_;
};

class JobStoreTest : public ::testing::Test {
 protected:
  TimerQueue timers_;  // first: it outlives the stores, as in the server
};

TEST_F(JobStoreTest, IdsAreFortyHexDigitsStartingWithTheRunTag) {
  MemoryJobStore store({}, timers_);
  MemoryJobStore other_run({}, timers_);
  const std::string a = store.create("", "r1");
  const std::string b = store.create("", "r2");
  const std::string c = other_run.create("", "r3");
  for (const std::string& id : {a, b, c}) {
    ASSERT_EQ(id.size(), 40u) << id;
    EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
  }
  EXPECT_NE(a, b);
  EXPECT_EQ(a.substr(0, 8), b.substr(0, 8));
  EXPECT_NE(a.substr(0, 8), c.substr(0, 8));  // 2^-32 odds of a false failure
  EXPECT_NE(a.substr(8), b.substr(8));
}

TEST_F(JobStoreTest, AJobOfAnotherServerRunSaysSo) {
  MemoryJobStore earlier({}, timers_);
  const std::string id = earlier.create("", "r");
  MemoryJobStore store({}, timers_);
  const Status got = status_of(get_now(store, id));
  EXPECT_EQ(got.code(), ErrorCode::kNotFound);
  EXPECT_EQ(got.message(), "job " + id +
                               " was not submitted to this server run: jobs do not survive "
                               "a restart, and each replica keeps its own; submit it again");
  EXPECT_EQ(status_of(store.cancel(id, "")).message(), got.message());
}

TEST_F(JobStoreTest, ALookupAfterTheTtlSaysExpiredBeforeTheSweepRuns) {
  JobStoreOptions options;
  options.result_ttl_ms = 20;
  MemoryJobStore store(options, timers_);
  const std::string id = store.create("", "r");
  const TimerThreadBlock block(timers_);  // the sweep cannot run
  store.finish(id, Status(), result_of_size(100));
  std::this_thread::sleep_for(milliseconds(40));
  const Status got = status_of(get_now(store, id));
  EXPECT_NE(got.message().find("expired after jobs.result_ttl_s"), std::string::npos)
      << got.message();
  EXPECT_EQ(store.counts().succeeded, 0);
  EXPECT_EQ(store.counts().result_bytes, 0);
}

// One key's traffic (cache hits that finish at once, so max_jobs_per_key never bites) must not
// evict another key's finished, unfetched job while that key holds no more than the others: the
// key holding the most gives up its own first.
TEST_F(JobStoreTest, TombstonesAreBounded) {
  JobStoreOptions options;
  options.max_jobs = 1;
  options.max_tombstones = 2;
  MemoryJobStore store(options, timers_);
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    ids.push_back(store.create("", "r"));  // evicts the one before
    store.finish(ids.back(), Status(), {});
  }
  store.create("", "r");
  // The last two evicted are remembered; the first two read as unknown.
  EXPECT_EQ(status_of(get_now(store, ids[0])).message(), "no job " + ids[0]);
  EXPECT_EQ(status_of(get_now(store, ids[1])).message(), "no job " + ids[1]);
  EXPECT_NE(status_of(get_now(store, ids[2])).message().find("jobs.max_jobs"), std::string::npos);
  EXPECT_NE(status_of(get_now(store, ids[3])).message().find("jobs.max_jobs"), std::string::npos);
}

TEST_F(JobStoreTest, ALongPollIsAnsweredByFinishOnTheFinishingThread) {
  MemoryJobStore store({}, timers_);
  const std::string id = store.create("", "r");
  Capture poll;
  store.get(id, "", milliseconds(10'000), poll.done());
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_EQ(poll.count(), 0);

  std::thread::id finisher;
  std::thread thread([&] {
    finisher = std::this_thread::get_id();
    store.finish(id, Status(), result_of_size(10));
  });
  thread.join();
  ASSERT_EQ(poll.count(), 1);
  EXPECT_EQ(poll.thread, finisher);
  const v1::MeshJob job = job_of(*poll.answer);
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(job.result().encoded().size(), 10u);
  EXPECT_EQ(timers_.pending(), 1u);  // the long-poll's timer went; the expiry sweep's remains
}

TEST_F(JobStoreTest, ALongPollTimesOutAtMaxWaitOnTheTimerThread) {
  JobStoreOptions options;
  options.max_wait_ms = 50;
  MemoryJobStore store(options, timers_);
  const std::string id = store.create("", "r");
  store.progress(id, stage(v1::STAGE_TEXT_ENCODING));
  Capture poll;
  const auto start = std::chrono::steady_clock::now();
  store.get(id, "", milliseconds(60'000), poll.done());
  ASSERT_TRUE(eventually([&] { return poll.count() == 1; }));
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, milliseconds(50));
  EXPECT_LT(waited, milliseconds(5'000));  // capped, not the minute asked for
  EXPECT_NE(poll.thread, std::this_thread::get_id());
  const v1::MeshJob job = job_of(*poll.answer);
  EXPECT_EQ(job.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(job.poll_after_ms(), 1'000u);
  EXPECT_EQ(job.progress().stage(), v1::STAGE_TEXT_ENCODING);

  // Finishing later answers no one twice.
  store.finish(id, Status(), {});
  EXPECT_EQ(poll.count(), 1);
}

TEST_F(JobStoreTest, ALongPollOnAnEndedJobOrWithoutWaitAnswersAtOnce) {
  MemoryJobStore store({}, timers_);
  const std::string open = store.create("", "r");
  const std::string ended = store.create("", "r");
  store.finish(ended, Status(ErrorCode::kUnavailable, "no GPU"), {});

  Capture on_ended;
  store.get(ended, "", milliseconds(10'000), on_ended.done());
  ASSERT_EQ(on_ended.count(), 1);  // inline: before get returned
  EXPECT_EQ(on_ended.thread, std::this_thread::get_id());
  EXPECT_EQ(job_of(*on_ended.answer).state(), v1::JOB_STATE_FAILED);

  Capture no_wait;
  store.get(open, "", milliseconds(0), no_wait.done());
  ASSERT_EQ(no_wait.count(), 1);
  EXPECT_EQ(job_of(*no_wait.answer).state(), v1::JOB_STATE_QUEUED);

  Capture unknown;
  store.get(unknown_id_like(open), "", milliseconds(10'000), unknown.done());
  ASSERT_EQ(unknown.count(), 1);
  EXPECT_EQ(status_of(*unknown.answer).code(), ErrorCode::kNotFound);
}

TEST_F(JobStoreTest, TheDestructorAnswersPendingLongPolls) {
  auto store = std::make_unique<MemoryJobStore>(JobStoreOptions{}, timers_);
  const std::string a = store->create("", "r");
  const std::string b = store->create("", "r");
  store->finish(b, Status(), result_of_size(10));  // arms the expiry sweep
  Capture first;
  Capture second;
  store->get(a, "", milliseconds(60'000), first.done());
  store->get(a, "", milliseconds(60'000), second.done());
  EXPECT_EQ(timers_.pending(), 3u);
  store.reset();
  for (Capture* poll : {&first, &second}) {
    ASSERT_EQ(poll->count(), 1);
    const Status status = status_of(*poll->answer);
    EXPECT_EQ(status.code(), ErrorCode::kUnavailable);
    EXPECT_EQ(status.message(), "the server is shutting down");
  }
  EXPECT_EQ(timers_.pending(), 0u);
}

TEST_F(JobStoreTest, EndingLongPollsAnswersThemWithTheJobAsItIsAndLaterOnesAtOnce) {
  MemoryJobStore store({}, timers_);
  const std::string id = store.create("", "r");
  Capture pending;
  store.get(id, "", milliseconds(60'000), pending.done());
  EXPECT_EQ(pending.count(), 0);
  store.end_long_polls();
  ASSERT_EQ(pending.count(), 1);
  EXPECT_EQ(job_of(*pending.answer).state(), v1::JOB_STATE_QUEUED);
  Capture later;
  store.get(id, "", milliseconds(60'000), later.done());
  ASSERT_EQ(later.count(), 1);  // no wait any more
  // Jobs still end and are read as before.
  store.finish(id, Status(), result_of_size(10));
  EXPECT_EQ(job_of(get_now(store, id, "")).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(timers_.pending(), 1u);  // the expiry sweep only; the long-poll's timer is gone
}

TEST_F(JobStoreTest, LongPollsRacingTimeoutsFinishesAndTheDestructorAnswerOnce) {
  JobStoreOptions options;
  options.max_wait_ms = 5;
  options.max_jobs_per_key = 1'000;
  auto store = std::make_unique<MemoryJobStore>(options, timers_);
  constexpr int kJobs = 200;
  std::vector<std::string> ids;
  for (int i = 0; i < kJobs; ++i) ids.push_back(store->create("", "r"));
  std::vector<std::unique_ptr<Capture>> polls;
  for (int i = 0; i < kJobs; ++i) {
    polls.push_back(std::make_unique<Capture>());
    store->get(ids[i], "", milliseconds(i % 10), polls.back()->done());
  }
  std::thread finisher([&] {
    for (int i = 0; i < kJobs / 2; ++i) store->finish(ids[i], Status(), {});
  });
  finisher.join();
  store.reset();
  for (const auto& poll : polls) EXPECT_EQ(poll->count(), 1);
}

TEST_F(JobStoreTest, TheCountsObserverSeesEveryChange) {
  JobStoreOptions options;
  options.result_ttl_ms = 30;
  MemoryJobStore store(options, timers_);
  const CountsSeen seen(store);
  const auto last = [&] { return seen.last(); };
  ASSERT_EQ(seen.calls(), 1u);  // the present counts, at once
  EXPECT_EQ(seen.first().queued, 0);

  const std::string id = store.create("", "r");
  EXPECT_EQ(last().queued, 1);
  store.progress(id, stage(v1::STAGE_DECODING));
  EXPECT_EQ(last().queued, 0);
  EXPECT_EQ(last().running, 1);
  const size_t calls = seen.calls();
  store.progress(id, stage(v1::STAGE_MESHING));  // no change of state: no call
  EXPECT_EQ(seen.calls(), calls);
  store.finish(id, Status(), result_of_size(100));
  EXPECT_EQ(last().running, 0);
  EXPECT_EQ(last().succeeded, 1);
  EXPECT_EQ(last().result_bytes, static_cast<int64_t>(result_of_size(100).ByteSizeLong()));

  // Expiry, on the timer thread, is a change too.
  ASSERT_TRUE(eventually([&] { return last().succeeded == 0; }));
  EXPECT_EQ(last().result_bytes, 0);

  const std::string failed = store.create("", "r");
  store.finish(failed, Status(ErrorCode::kInternal, "boom"), {});
  EXPECT_EQ(last().failed, 1);
  const std::string discarded = store.create("", "r");
  EXPECT_EQ(last().queued, 1);
  store.discard(discarded);
  EXPECT_EQ(last().queued, 0);
}

}  // namespace test_memory_job_store
}  // namespace cube3d
