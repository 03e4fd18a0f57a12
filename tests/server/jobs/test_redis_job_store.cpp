// What the Redis job store promises beyond the JobStore contract (test_job_store_contract.cpp,
// which both stores pass), against a redis-server of the test's own (redis_test_server.h) with
// two stores on it as two replicas: any replica answers any job, long-polls woken by the end of a
// job on the other replica, cancels that reach the replica running the job, the limits counted
// in Redis across replicas, leases and takeovers, durability, and a Redis that goes away.
#include "cube3d/server/jobs/redis_job_store.h"
#include "cube3d/server/jobs/redis_job_store_testing.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "cube3d/core/error.h"
#include "cube3d/server/timing/timer_queue.h"
#include "eventually.h"
#include "redis_test_server.h"
#include "server/jobs/job_store_test_helpers.h"
#include "server/redis_replica_test.h"

namespace cube3d::test_redis_job_store {

using cube3d::testing::eventually;
using cube3d::testing::job_of;
using cube3d::testing::RedisTestServer;
using cube3d::testing::result_of_size;
using cube3d::testing::stage;
using cube3d::testing::status_of;
using cube3d::testing::wait_for;
using std::chrono::milliseconds;
using Answer = JobStore::Answer;
using Clock = std::chrono::steady_clock;

// One replica: its client, subscriber and store over the shared Redis.
struct Replica : testing::RedisReplica<RedisJobStore, RedisJobStoreOptions, RedisJobStoreObserver> {
  using RedisReplica::RedisReplica;
  std::unique_ptr<RedisJobStore>& store = built;
};

std::string create(JobStore& store, const std::string& owner = "studio",
                   const std::string& prompt = "a chair") {
  NewJob job;
  job.owner = owner;
  job.request.set_prompt(prompt);
  job.request.set_request_id("req-" + prompt);
  job.request_id = job.request.request_id();
  const JobStore::Created created =
      wait_for<JobStore::Created>([&](auto done) { store.create(job, std::move(done)); });
  if (const auto* status = std::get_if<Status>(&created)) {
    ADD_FAILURE() << "create: " << status->message();
    return "";
  }
  return std::get<std::string>(created);
}

// What a create of `prompt` by `owner` that must be refused answers (a job made instead is a
// failure, and OK comes back).
Status refused_create(JobStore& store, const std::string& owner, const std::string& prompt) {
  NewJob job;
  job.owner = owner;
  job.request.set_prompt(prompt);
  const JobStore::Created created =
      wait_for<JobStore::Created>([&](auto done) { store.create(job, std::move(done)); });
  if (const auto* status = std::get_if<Status>(&created)) return *status;
  ADD_FAILURE() << "a job was made: " << std::get<std::string>(created);
  return Status();
}

Answer get(JobStore& store, const std::string& id, const std::string& owner = "studio",
           milliseconds wait = milliseconds(0)) {
  return wait_for<Answer>([&](auto done) { store.get(id, owner, wait, std::move(done)); },
                          wait + milliseconds(10'000));
}

// An observer that counts the takeovers that ended in `outcome` ("rerun", "failed").
RedisJobStoreObserver counting_takeovers(const std::string& outcome, std::atomic<int>& count) {
  RedisJobStoreObserver observer;
  observer.on_takeover = [outcome, &count](const char* seen) {
    if (seen == outcome) ++count;
  };
  return observer;
}

class RedisJobStoreTest : public testing::RedisReplicaTest<RedisJobStoreOptions> {
 protected:
  RedisJobStoreTest() : RedisReplicaTest("t") { options_.lease_ms = 600; }
};

TEST_F(RedisJobStoreTest, AnyReplicaAnswersAnyJob) {
  Replica a(*server_, timers_, options_), b(*server_, timers_, options_);
  const std::string id = create(*a.store);
  ASSERT_EQ(id.size(), 40u);
  v1::MeshJob job = job_of(get(*b.store, id));
  EXPECT_EQ(job.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(job.request_id(), "req-a chair");
  EXPECT_GT(job.created_unix_ms(), 0);
  EXPECT_EQ(job.poll_after_ms(), 1000u);

  a.store->progress(id, stage(v1::STAGE_DECODING, 7));
  ASSERT_TRUE(
      eventually([&] { return job_of(get(*b.store, id)).state() == v1::JOB_STATE_RUNNING; }));
  EXPECT_EQ(job_of(get(*b.store, id)).progress().tokens_done(), 7u);

  a.store->finish(id, Status(), result_of_size(1000));
  ASSERT_TRUE(
      eventually([&] { return job_of(get(*b.store, id)).state() == v1::JOB_STATE_SUCCEEDED; }));
  job = job_of(get(*b.store, id));
  EXPECT_EQ(job.result().encoded().size(), 1000u);
  EXPECT_GT(job.finished_unix_ms(), 0);
  EXPECT_EQ(job.expires_unix_ms(), job.finished_unix_ms() + options_.limits.result_ttl_ms);
  // The first finish wins.
  a.store->finish(id, Status(ErrorCode::kInternal, "late"), {});
  EXPECT_EQ(job_of(get(*a.store, id)).state(), v1::JOB_STATE_SUCCEEDED);
}

TEST_F(RedisJobStoreTest, AnIdempotencyKeyNamesOneJobOfOneRequestOnEveryReplica) {
  Replica a(*server_, timers_, options_), b(*server_, timers_, options_);
  testing::expect_idempotent_creates(*a.store, *b.store);
}

TEST_F(RedisJobStoreTest, LongPollOnOneReplicaWakesWhenTheOtherEndsTheJob) {
  Replica a(*server_, timers_, options_), b(*server_, timers_, options_);
  const std::string id = create(*a.store);
  ASSERT_TRUE(eventually([&] { return b.subscriber.connected(); }));
  const auto start = Clock::now();
  std::thread ender([&] {
    std::this_thread::sleep_for(milliseconds(300));
    a.store->finish(id, Status(ErrorCode::kInternal, "the mesh failed"), {});
  });
  const Answer answer = get(*b.store, id, "studio", milliseconds(20'000));
  const auto took = Clock::now() - start;
  ender.join();
  const v1::MeshJob job = job_of(answer);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(job.error().status(), "INTERNAL");
  EXPECT_EQ(job.error().message(), "the mesh failed");
  // Woken by the message, not by the 20 s timer.
  EXPECT_LT(took, milliseconds(5'000));
}

// The subscriber's reconnect (Redis restarted, failed over, or the connection dropped) re-reads
// every waiting long-poll's job, since messages sent meanwhile are lost; a job this replica runs
// is still open then, and its run must go on: it is stopped only when Redis says it ended.
TEST_F(RedisJobStoreTest, ASubscriberReconnectLeavesTheRunsOfLongPolledJobsAlone) {
  Replica a(*server_, timers_, options_);
  ASSERT_TRUE(eventually([&] { return a.subscriber.connected(); }));
  const std::string id = create(*a.store);
  std::atomic<int> cancelled{0};
  a.store->set_canceller(id, [&] { ++cancelled; });
  auto poll = std::make_shared<std::promise<Answer>>();
  std::future<Answer> polled = poll->get_future();
  a.store->get(id, "studio", milliseconds(30'000),
               [poll](Answer answer) { poll->set_value(std::move(answer)); });

  RedisConnection admin(server_->endpoint(), {});
  const auto deadline = [] { return Clock::now() + milliseconds(500); };
  ASSERT_GE(admin.command({"CLIENT", "KILL", "TYPE", "pubsub"}, deadline()).integer, 1);
  // Back: a publish reaches a subscriber again (its reconnect re-read the long-poll's job).
  ASSERT_TRUE(eventually([&] {
    return admin.command({"PUBSUB", "NUMSUB", options_.key_prefix + "job-ended"}, deadline())
               .elements.at(1)
               .integer >= 1;
  }));
  std::this_thread::sleep_for(milliseconds(200));  // the re-read's answer comes and goes
  EXPECT_EQ(cancelled, 0);
  EXPECT_EQ(polled.wait_for(milliseconds(0)), std::future_status::timeout);

  a.store->finish(id, Status(), result_of_size(10));  // the run's result is the job's
  ASSERT_EQ(polled.wait_for(milliseconds(10'000)), std::future_status::ready);
  EXPECT_EQ(job_of(polled.get()).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(cancelled, 0);
}

TEST_F(RedisJobStoreTest, CancelThroughAnotherReplicaStopsTheWorkWhereItRuns) {
  Replica a(*server_, timers_, options_), b(*server_, timers_, options_);
  ASSERT_TRUE(eventually([&] { return a.subscriber.connected(); }));
  const std::string id = create(*a.store);
  std::atomic<int> cancelled{0};
  a.store->set_canceller(id, [&] {
    ++cancelled;
    a.store->finish(id, Status(ErrorCode::kCancelled, "cancelled by CancelMeshJob"), {});
  });
  const auto start = Clock::now();
  const v1::MeshJob answered =
      job_of(wait_for<Answer>([&](auto done) { b.store->cancel(id, "studio", std::move(done)); }));
  EXPECT_TRUE(answered.state() == v1::JOB_STATE_QUEUED ||
              answered.state() == v1::JOB_STATE_CANCELLED);
  ASSERT_TRUE(eventually([&] { return cancelled.load() == 1; }));
  EXPECT_LT(Clock::now() - start, milliseconds(2'000));
  ASSERT_TRUE(
      eventually([&] { return job_of(get(*b.store, id)).state() == v1::JOB_STATE_CANCELLED; }));
  // Cancelling an ended job answers it unchanged; another owner's reads as unknown.
  EXPECT_EQ(job_of(wait_for<Answer>([&](auto done) {
              b.store->cancel(id, "studio", std::move(done));
            })).state(),
            v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(status_of(wait_for<Answer>([&](auto done) {
              b.store->cancel(id, "mallory", std::move(done));
            })).code(),
            ErrorCode::kNotFound);
}

TEST_F(RedisJobStoreTest, CancelOnTheReplicaThatRunsItAnswersCancelled) {
  Replica a(*server_, timers_, options_);
  const std::string id = create(*a.store);
  a.store->set_canceller(id, [&] {
    a.store->finish(id, Status(ErrorCode::kCancelled, "cancelled by CancelMeshJob"), {});
  });
  const v1::MeshJob job =
      job_of(wait_for<Answer>([&](auto done) { a.store->cancel(id, "studio", std::move(done)); }));
  EXPECT_EQ(job.state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(job.error().code(), 1);
}

// The replica's own subscriber hears the cancel message too, and may take the canceller before
// the cancel's reply does: the answer still waits for the canceller that ends the job.
TEST_F(RedisJobStoreTest, CancelAnswersCancelledWhicheverThreadRunsASlowCanceller) {
  Replica a(*server_, timers_, options_);
  ASSERT_TRUE(eventually([&] { return a.subscriber.connected(); }));
  for (int round = 0; round < 6; ++round) {
    const std::string id = create(*a.store);
    a.store->set_canceller(id, [&, id] {
      std::this_thread::sleep_for(milliseconds(60));
      a.store->finish(id, Status(ErrorCode::kCancelled, "cancelled by CancelMeshJob"), {});
    });
    const v1::MeshJob job = job_of(
        wait_for<Answer>([&](auto done) { a.store->cancel(id, "studio", std::move(done)); }));
    EXPECT_EQ(job.state(), v1::JOB_STATE_CANCELLED) << "round " << round;
  }
}

TEST_F(RedisJobStoreTest, ACancelBeforeTheCancellerRunsItWhenItIsSet) {
  Replica a(*server_, timers_, options_);
  const std::string id = create(*a.store);
  wait_for<Answer>([&](auto done) { a.store->cancel(id, "studio", std::move(done)); });
  bool ran = false;
  a.store->set_canceller(id, [&] { ran = true; });
  EXPECT_TRUE(ran);
}

TEST_F(RedisJobStoreTest, PerKeyLimitHoldsAcrossReplicas) {
  options_.limits.max_jobs_per_key = 2;
  Replica a(*server_, timers_, options_), b(*server_, timers_, options_);
  create(*a.store, "studio", "one");
  create(*b.store, "studio", "two");
  const Status refused = refused_create(*a.store, "studio", "");
  EXPECT_EQ(refused.code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("jobs.max_jobs_per_key"), std::string::npos);
  // Another key is not held back by this one.
  EXPECT_FALSE(create(*a.store, "other", "three").empty());
}

TEST_F(RedisJobStoreTest, ResultBytesAreCountedInRedisAndTheLargestHolderGivesUp) {
  options_.limits.max_result_bytes = 2500;
  Replica a(*server_, timers_, options_), b(*server_, timers_, options_);
  const std::string small = create(*a.store, "small", "s");
  a.store->finish(small, Status(), result_of_size(400));
  const std::string big1 = create(*a.store, "big", "b1");
  a.store->finish(big1, Status(), result_of_size(1000));
  // Finishes are written in the background, A's and B's on connections of their own: big1 is
  // in Redis before big2, so that it is the least recently used.
  ASSERT_TRUE(eventually(
      [&] { return job_of(get(*a.store, big1, "big")).state() == v1::JOB_STATE_SUCCEEDED; }));
  ASSERT_TRUE(eventually(
      [&] { return job_of(get(*a.store, small, "small")).state() == v1::JOB_STATE_SUCCEEDED; }));
  const std::string big2 = create(*b.store, "big", "b2");
  b.store->finish(big2, Status(), result_of_size(1000));
  ASSERT_TRUE(eventually(
      [&] { return job_of(get(*a.store, big2, "big")).state() == v1::JOB_STATE_SUCCEEDED; }));
  // Over 2500: "big" holds the most and gives up its least recently used (big1), not "small".
  const std::string big3 = create(*b.store, "big", "b3");
  b.store->finish(big3, Status(), result_of_size(1000));
  // Wait on big3, not big1: a fetch makes a result the most recently used, so polling big1
  // before big3's finish reached Redis (a busy machine) would save it and give up big2.
  ASSERT_TRUE(eventually(
      [&] { return job_of(get(*b.store, big3, "big")).state() == v1::JOB_STATE_SUCCEEDED; }));
  const Status gone = status_of(get(*a.store, big1, "big"));
  EXPECT_EQ(gone.code(), ErrorCode::kNotFound);
  EXPECT_NE(gone.message().find("jobs.max_result_bytes"), std::string::npos) << gone.message();
  EXPECT_EQ(job_of(get(*a.store, small, "small")).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(job_of(get(*a.store, big2, "big")).state(), v1::JOB_STATE_SUCCEEDED);
  // The shared counts, on every replica, after a renewal has read them.
  ASSERT_TRUE(eventually([&] { return b.store->counts().result_bytes > 0; }));
  EXPECT_LE(b.store->counts().result_bytes, 2500 + 200);  // protobuf framing on top of 2400
}

TEST_F(RedisJobStoreTest, AJobWhoseReplicaDiedIsTakenOverAndRunAgain) {
  std::atomic<int> reruns{0};
  Replica a(*server_, timers_, options_);
  Replica b(*server_, timers_, options_, counting_takeovers("rerun", reruns));
  std::mutex mutex;
  std::optional<TakenOverJob> taken;
  b.store->on_takeover(
      [&](TakenOverJob job) {
        const std::lock_guard lock(mutex);
        taken = std::move(job);
      },
      [] { return true; });
  const std::string id = create(*a.store, "studio", "a boat");
  a.store->progress(id, stage(v1::STAGE_DECODING, 7));
  const auto killed = Clock::now();
  RedisJobStoreTesting::stop_renewing(*a.store);  // as a SIGKILL leaves it
  ASSERT_TRUE(eventually([&] {
    const std::lock_guard lock(mutex);
    return taken.has_value();
  }));
  const auto took = Clock::now() - killed;
  {
    const std::lock_guard lock(mutex);
    EXPECT_EQ(taken->id, id);
    EXPECT_EQ(taken->job.owner, "studio");
    EXPECT_EQ(taken->job.request.prompt(), "a boat");
    EXPECT_EQ(taken->takeover, 1);
  }
  EXPECT_EQ(reruns.load(), 1);
  // Within the lease and a renewal period (600 + 200 ms), with room for a loaded machine.
  EXPECT_LT(took, milliseconds(5'000));
  v1::MeshJob job = job_of(get(*b.store, id));
  EXPECT_EQ(job.state(), v1::JOB_STATE_QUEUED);  // run again from the start
  // Counted once the new run is under way (B's first renewal), not at the claim.
  ASSERT_TRUE(eventually([&] { return job_of(get(*b.store, id)).takeovers() == 1u; }));
  // The dead replica's late outcome is not the job's; the new holder's is.
  a.store->finish(id, Status(ErrorCode::kInternal, "late"), {});
  b.store->finish(id, Status(), result_of_size(5));
  ASSERT_TRUE(
      eventually([&] { return job_of(get(*b.store, id)).state() == v1::JOB_STATE_SUCCEEDED; }));
}

// How many job records the store's keys hold in Redis (a ghost job would be one).
int64_t records_in_redis(const RedisTestServer& server, const std::string& prefix) {
  RedisClient raw(testing::replica_client_options(server));
  const auto result = raw.run_sync({{"HGET", prefix + "counts", "records"}});
  if (const auto* status = std::get_if<Status>(&result)) {
    ADD_FAILURE() << status->message();
    return -1;
  }
  return std::get<std::vector<RedisReply>>(result).front().as_int(0);
}

TEST_F(RedisJobStoreTest, AnEarlierRunsResultIsTheJobsAndTheLaterRunStops) {
  std::atomic<int> reruns{0};
  Replica a(*server_, timers_, options_);
  Replica b(*server_, timers_, options_, counting_takeovers("rerun", reruns));
  std::atomic<int> b_stopped{0};
  b.store->on_takeover(
      [&](TakenOverJob job) { b.store->set_canceller(job.id, [&] { ++b_stopped; }); },
      [] { return true; });
  ASSERT_TRUE(eventually([&] { return b.subscriber.connected(); }));
  const std::string id = create(*a.store, "studio", "a lamp");
  RedisJobStoreTesting::stop_renewing(*a.store);  // cut off from Redis: its lease lapses
  ASSERT_TRUE(eventually([&] { return reruns.load() == 1; }));
  // A's run ends with the mesh after all: it is the job's (the same request makes the same
  // mesh), and B's run, now needless, is stopped.
  a.store->finish(id, Status(), result_of_size(321));
  ASSERT_TRUE(
      eventually([&] { return job_of(get(*b.store, id)).state() == v1::JOB_STATE_SUCCEEDED; }));
  EXPECT_EQ(job_of(get(*b.store, id)).result().encoded().size(), 321u);
  ASSERT_TRUE(eventually([&] { return b_stopped.load() == 1; }));
  // B's own outcome, when its stopped run reports it, changes nothing.
  b.store->finish(id, Status(ErrorCode::kCancelled, "stopped"), {});
  EXPECT_EQ(job_of(get(*a.store, id)).state(), v1::JOB_STATE_SUCCEEDED);
}

TEST_F(RedisJobStoreTest, ACancelWinsOverAFinishThatComesAfterIt) {
  Replica a(*server_, timers_, options_), b(*server_, timers_, options_);
  const std::string id = create(*a.store);
  a.store->set_canceller(id, [] {});  // the work does not stop at once
  job_of(wait_for<Answer>([&](auto done) { b.store->cancel(id, "studio", std::move(done)); }));
  a.store->finish(id, Status(), result_of_size(10));  // it got to the end anyway
  ASSERT_TRUE(
      eventually([&] { return job_of(get(*b.store, id)).state() == v1::JOB_STATE_CANCELLED; }));
  EXPECT_NE(job_of(get(*b.store, id)).error().message().find("cancelled by its client"),
            std::string::npos);
}

TEST_F(RedisJobStoreTest, ARedisStalledForTwiceTheLeaseCostsNoWork) {
  RedisTestServer own;
  std::atomic<int> reruns{0};
  // A renews its jobs less often than B claims: after the stall, B is all but sure to look for
  // lapsed leases before A renews its own, as a replica would in a larger fleet.
  RedisJobStoreOptions slow = options_;
  slow.lease_ms = 1500;
  Replica a(own, timers_, slow);
  Replica b(own, timers_, options_, counting_takeovers("rerun", reruns));
  b.store->on_takeover([](TakenOverJob) {}, [] { return true; });
  ASSERT_TRUE(eventually([&] { return a.store->health().ok() && b.store->health().ok(); }));
  const std::string done_in_stall = create(*a.store, "studio", "a cup");
  const std::string after_stall = create(*a.store, "studio", "a bowl");
  std::this_thread::sleep_for(milliseconds(300));  // both ticked: Redis' clock is known
  own.pause();                                     // SIGSTOP: Redis answers nothing
  // A finishes one job during the stall; its outcome cannot be written.
  std::this_thread::sleep_for(milliseconds(200));
  a.store->finish(done_in_stall, Status(), result_of_size(77));
  std::this_thread::sleep_for(milliseconds(2 * slow.lease_ms + 200));
  own.resume();
  // The result written once Redis is back, nobody's work taken over, the other job still A's.
  ASSERT_TRUE(eventually(
      [&] { return job_of(get(*b.store, done_in_stall)).state() == v1::JOB_STATE_SUCCEEDED; }));
  EXPECT_EQ(job_of(get(*b.store, done_in_stall)).result().encoded().size(), 77u);
  std::this_thread::sleep_for(milliseconds(2 * slow.lease_ms));  // time for a takeover
  EXPECT_EQ(reruns.load(), 0);
  const v1::MeshJob open = job_of(get(*b.store, after_stall));
  EXPECT_EQ(open.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(open.takeovers(), 0u);
  a.store->finish(after_stall, Status(), result_of_size(5));
  ASSERT_TRUE(eventually(
      [&] { return job_of(get(*b.store, after_stall)).state() == v1::JOB_STATE_SUCCEEDED; }));
}

TEST_F(RedisJobStoreTest, LeasesCountOnlyTheTimeRedisCouldBeReached) {
  RedisTestServer own;
  RedisJobStoreOptions dying = options_;
  dying.lease_ms = 3000;
  Replica a(own, timers_, dying);
  Replica b(own, timers_, options_);
  std::atomic<int64_t> taken_at_ms{0};
  b.store->on_takeover(
      [&](TakenOverJob) {
        taken_at_ms =
            std::chrono::duration_cast<milliseconds>(Clock::now().time_since_epoch()).count();
      },
      [] { return true; });
  ASSERT_TRUE(eventually([&] { return a.store->health().ok() && b.store->health().ok(); }));
  const std::string id = create(*a.store);
  std::this_thread::sleep_for(milliseconds(300));
  // A dies with 1 to 2 s of its lease left, and nothing of it in flight (its last command's
  // deadline has passed); then Redis stalls for longer than that.
  RedisJobStoreTesting::stop_renewing(*a.store);
  std::this_thread::sleep_for(milliseconds(1050));
  own.pause();
  std::this_thread::sleep_for(milliseconds(2500));
  own.resume();
  const int64_t resumed_ms =
      std::chrono::duration_cast<milliseconds>(Clock::now().time_since_epoch()).count();
  ASSERT_TRUE(eventually([&] { return taken_at_ms.load() > 0; }, milliseconds(10'000)));
  // The lease ran out while nobody could reach Redis: it is taken over with what was left of it
  // after Redis is back (at least ~1 s), not at once.
  EXPECT_GT(taken_at_ms.load() - resumed_ms, 600) << "taken over as soon as Redis came back";
  EXPECT_EQ(job_of(get(*b.store, id)).state(), v1::JOB_STATE_QUEUED);
}

TEST_F(RedisJobStoreTest, ASubmitAnsweredUnavailableInAStallMakesNoJob) {
  RedisTestServer own;
  Replica a(own, timers_, options_);
  ASSERT_TRUE(eventually([&] { return a.store->health().ok(); }));
  std::this_thread::sleep_for(milliseconds(300));  // ticked: Redis' clock is known
  own.pause();
  const Status refused = refused_create(*a.store, "studio", "a ghost");
  EXPECT_EQ(refused.code(), ErrorCode::kUnavailable);
  EXPECT_NE(refused.message().find("not made"), std::string::npos);
  std::this_thread::sleep_for(milliseconds(500));
  own.resume();  // the create that sat in Redis' socket runs now: too late, it does nothing
  ASSERT_TRUE(eventually([&] { return a.store->health().ok(); }));
  std::this_thread::sleep_for(milliseconds(options_.lease_ms));  // a tick settles the rest
  EXPECT_EQ(records_in_redis(own, options_.key_prefix), 0);
}

TEST_F(RedisJobStoreTest, AClaimThatNeverStartedSpendsNoTakeover) {
  Replica a(*server_, timers_, options_);
  Replica lost(*server_, timers_, options_);
  // A replica whose claim's reply is as good as lost: it holds the claim and never runs it.
  lost.store->on_takeover([&](TakenOverJob) { RedisJobStoreTesting::stop_renewing(*lost.store); },
                          [] { return true; });
  const std::string id = create(*a.store);
  RedisJobStoreTesting::stop_renewing(*a.store);
  ASSERT_TRUE(eventually([&] {
    const v1::MeshJob job = job_of(get(*a.store, id));
    return job.state() == v1::JOB_STATE_QUEUED && job.takeovers() == 0u;
  }));
  std::this_thread::sleep_for(milliseconds(2 * options_.lease_ms));  // claimed by `lost`
  std::mutex mutex;
  std::optional<TakenOverJob> taken;
  Replica b(*server_, timers_, options_);
  b.store->on_takeover(
      [&](TakenOverJob job) {
        const std::lock_guard lock(mutex);
        taken = std::move(job);
      },
      [] { return true; });
  ASSERT_TRUE(eventually([&] {
    const std::lock_guard lock(mutex);
    return taken.has_value();
  }));
  {
    const std::lock_guard lock(mutex);
    EXPECT_EQ(taken->takeover, 1) << "the claim that never ran counted";
  }
  ASSERT_TRUE(eventually([&] { return job_of(get(*b.store, id)).takeovers() == 1u; }));
}

TEST_F(RedisJobStoreTest, PastMaxTakeoversTheJobFailsRetryably) {
  options_.max_takeovers = 0;
  std::atomic<int> failed{0};
  Replica a(*server_, timers_, options_);
  Replica b(*server_, timers_, options_, counting_takeovers("failed", failed));
  b.store->on_takeover([](TakenOverJob) { ADD_FAILURE() << "taken over past the limit"; },
                       [] { return true; });
  const std::string id = create(*a.store);
  RedisJobStoreTesting::stop_renewing(*a.store);
  ASSERT_TRUE(
      eventually([&] { return job_of(get(*b.store, id)).state() == v1::JOB_STATE_FAILED; }));
  const v1::MeshJob job = job_of(get(*b.store, id));
  EXPECT_EQ(job.error().status(), "UNAVAILABLE");
  EXPECT_EQ(job.error().code(), 14);
  EXPECT_NE(job.error().message().find("jobs.max_takeovers"), std::string::npos);
  EXPECT_EQ(failed.load(), 1);
}

TEST_F(RedisJobStoreTest, AReplicaThatCannotRunTakesNothingOver) {
  Replica a(*server_, timers_, options_), b(*server_, timers_, options_);
  std::atomic<int> runs{0};
  b.store->on_takeover([&](TakenOverJob) { ++runs; }, [] { return false; });
  const std::string id = create(*a.store);
  RedisJobStoreTesting::stop_renewing(*a.store);
  std::this_thread::sleep_for(milliseconds(1500));
  EXPECT_EQ(runs.load(), 0);
  EXPECT_EQ(job_of(get(*b.store, id)).state(), v1::JOB_STATE_QUEUED);
}

TEST_F(RedisJobStoreTest, AStoppedReplicaHandsItsJobsBack) {
  Replica b(*server_, timers_, options_);
  std::atomic<int> runs{0};
  b.store->on_takeover([&](TakenOverJob) { ++runs; }, [] { return true; });
  std::string id;
  {
    Replica a(*server_, timers_, options_);
    id = create(*a.store);
  }  // a clean stop: the lease is given up at once
  ASSERT_TRUE(eventually([&] { return runs.load() == 1; }, milliseconds(3000)));
}

// jobs.durable_replicas: a submit is answered only once a replica of Redis has the job (a
// failover to it then loses no job a client was given); short of one, it is refused and the job
// removed, so that the 503 "not made" holds.
TEST_F(RedisJobStoreTest, ADurableSubmitWaitsForAReplicaOfRedis) {
  RedisTestServer primary({"--repl-diskless-sync-delay", "0"});
  options_.durable_replicas = 1;
  options_.durable_timeout_ms = 300;
  Replica a(primary, timers_, options_);
  const Status refused = refused_create(*a.store, "studio", "a chair");
  EXPECT_EQ(refused.code(), ErrorCode::kUnavailable);
  EXPECT_NE(refused.message().find("jobs.durable_replicas: 0 of 1 "), std::string::npos)
      << refused.message();
  RedisConnection look(primary.endpoint(), {});
  const auto jobs_in_redis = [&] {
    return look.command({"KEYS", options_.key_prefix + "job:*"}, Clock::now() + milliseconds(500))
        .elements.size();
  };
  ASSERT_TRUE(eventually([&] { return jobs_in_redis() == 0; }));

  RedisTestServer replica({"--replicaof", "127.0.0.1", std::to_string(primary.port())});
  // Streaming: after its first sync a replica hears the primary's writes only from its first
  // acknowledgement on (up to a second).
  ASSERT_TRUE(eventually(
      [&] {
        look.command({"SET", options_.key_prefix + "probe", "1"}, Clock::now() + milliseconds(500));
        return look.command({"WAIT", "1", "100"}, Clock::now() + milliseconds(500)).integer == 1;
      },
      milliseconds(10'000)));
  // A store that waits longer for the replica: a loaded machine (CI) may take more than the
  // refusal's short wait to acknowledge.
  options_.durable_timeout_ms = 10'000;
  Replica b(primary, timers_, options_);
  const std::string id = create(*b.store);
  ASSERT_FALSE(id.empty());
  RedisConnection on_replica(replica.endpoint(), {});
  EXPECT_EQ(
      on_replica
          .command({"EXISTS", options_.key_prefix + "job:" + id}, Clock::now() + milliseconds(500))
          .integer,
      1);
  b.store->finish(id, Status(), result_of_size(1000));
  ASSERT_TRUE(eventually([&] {
    return on_replica
               .command({"HGET", options_.key_prefix + "job:" + id, "state"},
                        Clock::now() + milliseconds(500))
               .text == "SUCCEEDED";
  }));
}

TEST_F(RedisJobStoreTest, RedisGoneRefusesSubmitsAtOnceAndTheHealthSaysWhy) {
  RedisTestServer own;
  Replica a(own, timers_, options_);
  ASSERT_TRUE(eventually([&] { return a.store->health().ok(); }));
  const std::string id = create(*a.store);
  own.stop();
  const auto start = Clock::now();
  for (int i = 0; i < 3; ++i) {
    const Status refused = refused_create(*a.store, "studio", "");
    EXPECT_EQ(refused.code(), ErrorCode::kUnavailable);
    EXPECT_NE(refused.message().find("jobs.store redis"), std::string::npos);
  }
  EXPECT_EQ(status_of(get(*a.store, id)).code(), ErrorCode::kUnavailable);
  EXPECT_LT(Clock::now() - start, milliseconds(5'000));
  ASSERT_TRUE(eventually([&] { return !a.store->health().ok(); }));
  EXPECT_NE(a.store->health().message().find("Redis"), std::string::npos);
  ASSERT_TRUE(own.start());
  ASSERT_TRUE(eventually([&] { return a.store->health().ok(); }, milliseconds(15'000)));
}

}  // namespace cube3d::test_redis_job_store
