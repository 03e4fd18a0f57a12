// The JobStore contract (job_store.h), one suite run against both stores: the memory store and
// the Redis store (one replica over a redis-server of the test's own; skipped where none is
// installed). What a client of SubmitMeshJob, GetMeshJob and CancelMeshJob sees must not depend
// on jobs.store: the states and what each carries, owners, the NOT_FOUND reasons, the limits and
// their fair eviction, long-polls, cancellation, discard, draining and the counts. Everything
// goes through the asynchronous interface and waits for its answer, and a change made by a
// fire-and-forget call (progress, finish) is waited for, since the Redis store writes it on its
// client's thread. What only one store promises (the memory store's inline answers and timer
// thread, the Redis store's replicas, leases and takeovers) is tested beside that store.
#include <gtest/gtest.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/server/jobs/job_store.h"
#include "cube3d/server/jobs/memory_job_store.h"
#include "cube3d/server/jobs/redis_job_store.h"
#include "cube3d/server/timing/timer_queue.h"
#include "eventually.h"
#include "redis_test_server.h"
#include "server/jobs/job_store_test_helpers.h"
#include "server/redis_replica_test.h"

namespace cube3d::test_job_store_contract {

using std::chrono::milliseconds;
using testing::Capture;
using testing::CountsSeen;
using testing::eventually;
using testing::job_of;
using testing::RedisTestServer;
using testing::result_of_size;
using testing::stage;
using testing::status_of;
using testing::unknown_id_like;
using testing::wait_for;
using Answer = JobStore::Answer;

enum class StoreKind { kMemory, kRedis };

JobStore::Created try_create(JobStore& store, const std::string& owner,
                             const std::string& request_id) {
  NewJob job;
  job.owner = owner;
  job.request_id = request_id;
  job.request.set_prompt("a chair");
  job.request.set_request_id(request_id);
  return wait_for<JobStore::Created>(
      [&](auto done) { store.create(std::move(job), std::move(done)); });
}

std::string create(JobStore& store, const std::string& owner = "",
                   const std::string& request_id = "r") {
  const JobStore::Created created = try_create(store, owner, request_id);
  if (const auto* status = std::get_if<Status>(&created)) {
    ADD_FAILURE() << "create: " << status->message();
    return "";
  }
  return std::get<std::string>(created);
}

// The refusal of a create that must be refused ("" and a failure when it made a job).
Status refused_create(JobStore& store, const std::string& owner) {
  const JobStore::Created created = try_create(store, owner, "r");
  if (const auto* status = std::get_if<Status>(&created)) return *status;
  ADD_FAILURE() << "the create was not refused";
  return {};
}

Answer get(JobStore& store, const std::string& id, const std::string& owner = "",
           milliseconds wait = milliseconds(0)) {
  return wait_for<Answer>([&](auto done) { store.get(id, owner, wait, std::move(done)); },
                          wait + milliseconds(10'000));
}

Answer cancel(JobStore& store, const std::string& id, const std::string& owner = "") {
  return wait_for<Answer>([&](auto done) { store.cancel(id, owner, std::move(done)); });
}

v1::JobState state_of(JobStore& store, const std::string& id, const std::string& owner = "") {
  const Answer answer = get(store, id, owner);
  if (const auto* job = std::get_if<v1::MeshJob>(&answer)) return job->state();
  return v1::JOB_STATE_UNSPECIFIED;
}

// Waits until the job reads in `state` (the Redis store writes progress and finish later).
::testing::AssertionResult reaches(JobStore& store, const std::string& id, v1::JobState state,
                                   const std::string& owner = "") {
  if (eventually([&] { return state_of(store, id, owner) == state; })) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "job " << id << " is " << v1::JobState_Name(state_of(store, id, owner)) << ", not "
         << v1::JobState_Name(state);
}

// Waits until the job reads as NOT_FOUND to its owner; the message says why.
std::string gone_message(JobStore& store, const std::string& id, const std::string& owner = "") {
  const bool gone =
      eventually([&] { return std::holds_alternative<Status>(get(store, id, owner)); });
  if (!gone) {
    ADD_FAILURE() << "job " << id << " is still kept";
    return "";
  }
  const Status status = status_of(get(store, id, owner));
  EXPECT_EQ(status.code(), ErrorCode::kNotFound) << status.message();
  return status.message();
}

int64_t bytes_of(std::size_t encoded) {
  return static_cast<int64_t>(result_of_size(encoded).ByteSizeLong());
}

// The store under test, whichever kind, and what it runs on.
class StoreUnderTest {
 public:
  virtual ~StoreUnderTest() = default;
  virtual JobStore& store() = 0;
};

class MemoryStore final : public StoreUnderTest {
 public:
  MemoryStore(const JobStoreOptions& limits, TimerQueue& timers) : store_(limits, timers) {}
  JobStore& store() override { return store_; }

 private:
  MemoryJobStore store_;
};

class RedisStore final : public StoreUnderTest {
 public:
  RedisStore(const RedisTestServer& server, TimerQueue& timers, RedisJobStoreOptions options)
      : replica_(server, timers, std::move(options)) {}
  JobStore& store() override { return *replica_.built; }

 private:
  testing::RedisReplica<RedisJobStore, RedisJobStoreOptions, RedisJobStoreObserver> replica_;
};

class JobStoreContract : public ::testing::TestWithParam<StoreKind> {
 protected:
  static void SetUpTestSuite() {
    if (RedisTestServer::installed()) server_ = std::make_unique<RedisTestServer>();
  }
  static void TearDownTestSuite() { server_.reset(); }
  void SetUp() override {
    if (GetParam() == StoreKind::kRedis && !server_)
      GTEST_SKIP() << RedisTestServer::skip_message();
  }
  void TearDown() override { stores_.clear(); }  // before the timers

  // A store of the kind under test, kept until the test ends; each on keys of its own.
  JobStore& make_store(const JobStoreOptions& limits = {}) {
    if (GetParam() == StoreKind::kMemory) {
      stores_.push_back(std::make_unique<MemoryStore>(limits, timers_));
    } else {
      RedisJobStoreOptions options;
      options.limits = limits;
      options.lease_ms = 600;  // ticks (expiry, counts) every 200 ms
      options.key_prefix = "c" + std::to_string(++store_number_) + ":";
      stores_.push_back(std::make_unique<RedisStore>(*server_, timers_, std::move(options)));
    }
    return stores_.back()->store();
  }
  // Ends the store made last (its destructor runs now).
  void destroy_last_store() { stores_.pop_back(); }

  TimerQueue timers_;  // first: it outlives the stores, as in the server
  std::vector<std::unique_ptr<StoreUnderTest>> stores_;
  static inline std::unique_ptr<RedisTestServer> server_;
  static inline int store_number_ = 0;
};

INSTANTIATE_TEST_SUITE_P(Stores, JobStoreContract,
                         ::testing::Values(StoreKind::kMemory, StoreKind::kRedis),
                         [](const ::testing::TestParamInfo<StoreKind>& info) {
                           return info.param == StoreKind::kMemory ? "Memory" : "Redis";
                         });

// --- states ----------------------------------------------------------------------------------

TEST_P(JobStoreContract, AnIdempotencyKeyNamesOneJobOfOneRequest) {
  JobStore& store = make_store();
  testing::expect_idempotent_creates(store, store);
}

TEST_P(JobStoreContract, GoesFromQueuedThroughRunningToSucceeded) {
  JobStoreOptions options;
  options.poll_after_ms = 750;
  options.result_ttl_ms = 90'000;
  JobStore& store = make_store(options);
  const int64_t before_ms =
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  const std::string id = create(store, "studio", "req-1");
  ASSERT_TRUE(valid_job_id(id)) << id;

  v1::MeshJob job = job_of(get(store, id, "studio"));
  EXPECT_EQ(job.id(), id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(job.progress().stage(), v1::STAGE_QUEUED);
  EXPECT_EQ(job.poll_after_ms(), 750u);
  EXPECT_EQ(job.request_id(), "req-1");
  EXPECT_GE(job.created_unix_ms(), before_ms - 1'000);  // Redis' clock, not this one
  EXPECT_EQ(job.finished_unix_ms(), 0);
  EXPECT_EQ(job.expires_unix_ms(), 0);
  EXPECT_FALSE(job.has_result());
  EXPECT_FALSE(job.has_error());
  EXPECT_TRUE(eventually([&] { return store.counts().queued == 1; }));

  v1::Progress decoding = stage(v1::STAGE_DECODING, 100);
  decoding.set_tokens_total(1024);
  store.progress(id, decoding);
  ASSERT_TRUE(reaches(store, id, v1::JOB_STATE_RUNNING, "studio"));
  job = job_of(get(store, id, "studio"));
  EXPECT_EQ(job.progress().tokens_done(), 100u);
  EXPECT_EQ(job.progress().tokens_total(), 1024u);
  EXPECT_EQ(job.poll_after_ms(), 750u);
  EXPECT_TRUE(eventually([&] { return store.counts().running == 1; }));

  store.finish(id, Status(), result_of_size(64, "req-1"));
  ASSERT_TRUE(reaches(store, id, v1::JOB_STATE_SUCCEEDED, "studio"));
  job = job_of(get(store, id, "studio"));
  EXPECT_EQ(job.poll_after_ms(), 0u);
  ASSERT_TRUE(job.has_result());
  EXPECT_EQ(job.result().encoded().size(), 64u);
  EXPECT_EQ(job.result().request_id(), "req-1");
  EXPECT_FALSE(job.has_error());
  EXPECT_GE(job.finished_unix_ms(), job.created_unix_ms());
  EXPECT_EQ(job.expires_unix_ms(), job.finished_unix_ms() + 90'000);

  const int64_t bytes = static_cast<int64_t>(result_of_size(64, "req-1").ByteSizeLong());
  ASSERT_TRUE(eventually([&] { return store.counts().succeeded == 1; }));
  const JobStore::Counts counts = store.counts();
  EXPECT_EQ(counts.queued, 0);
  EXPECT_EQ(counts.running, 0);
  EXPECT_EQ(counts.result_bytes, bytes);
}

TEST_P(JobStoreContract, StageQueuedProgressLeavesTheJobQueued) {
  JobStore& store = make_store();
  const std::string id = create(store);
  store.progress(id, stage(v1::STAGE_QUEUED));  // still waiting for a batch
  store.progress(id, stage(v1::STAGE_QUEUED));
  // A later change, written after the two: once it shows, they have been seen too.
  const std::string marker = create(store);
  EXPECT_EQ(state_of(store, marker), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(state_of(store, id), v1::JOB_STATE_QUEUED);
}

TEST_P(JobStoreContract, FailedAndCancelledJobsCarryTheirStatus) {
  JobStore& store = make_store();
  const std::string failed = create(store, "", "r1");
  const std::string cancelled = create(store, "", "r2");
  store.finish(failed, Status(ErrorCode::kDeadlineExceeded, "took too long"), {});
  store.finish(cancelled, Status(ErrorCode::kCancelled, "cancelled by the client"), {});
  ASSERT_TRUE(reaches(store, failed, v1::JOB_STATE_FAILED));
  ASSERT_TRUE(reaches(store, cancelled, v1::JOB_STATE_CANCELLED));

  const v1::MeshJob f = job_of(get(store, failed));
  EXPECT_EQ(f.error().code(), 4);
  EXPECT_EQ(f.error().status(), "DEADLINE_EXCEEDED");
  EXPECT_EQ(f.error().message(), "took too long");
  EXPECT_FALSE(f.has_result());
  EXPECT_GT(f.expires_unix_ms(), 0);

  const v1::MeshJob c = job_of(get(store, cancelled));
  EXPECT_EQ(c.error().code(), 1);
  EXPECT_EQ(c.error().status(), "CANCELLED");
  EXPECT_EQ(c.error().message(), "cancelled by the client");

  ASSERT_TRUE(eventually([&] {
    const JobStore::Counts counts = store.counts();
    return counts.failed == 1 && counts.cancelled == 1;
  }));
  EXPECT_EQ(store.counts().result_bytes, 0);
}

TEST_P(JobStoreContract, TheFirstFinishWinsAndLateProgressIsIgnored) {
  JobStore& store = make_store();
  const std::string id = create(store);
  store.finish(id, Status(ErrorCode::kCancelled, "cancelled"), {});
  ASSERT_TRUE(reaches(store, id, v1::JOB_STATE_CANCELLED));
  store.finish(id, Status(), result_of_size(10));  // the work ended as it was cancelled
  store.progress(id, stage(v1::STAGE_MESHING));
  const std::string marker = create(store);  // written after the two
  EXPECT_EQ(state_of(store, marker), v1::JOB_STATE_QUEUED);
  const v1::MeshJob job = job_of(get(store, id));
  EXPECT_EQ(job.state(), v1::JOB_STATE_CANCELLED);
  EXPECT_FALSE(job.has_result());
  ASSERT_TRUE(eventually([&] { return store.counts().cancelled == 1; }));
  EXPECT_EQ(store.counts().succeeded, 0);
}

// --- owners and ids --------------------------------------------------------------------------

TEST_P(JobStoreContract, AnotherOwnerGetsTheSameNotFoundAsAnUnknownId) {
  JobStoreOptions options;
  options.result_ttl_ms = 50;
  JobStore& store = make_store(options);
  const std::string id = create(store, "alice");
  std::atomic<bool> cancelled{false};
  store.set_canceller(id, [&] { cancelled = true; });

  const Status foreign = status_of(get(store, id, "mallory"));
  EXPECT_EQ(foreign.code(), ErrorCode::kNotFound);
  EXPECT_EQ(foreign.message(), "no job " + id);
  const std::string unknown = unknown_id_like(id);
  const Status never = status_of(get(store, unknown, "mallory"));
  EXPECT_EQ(never.code(), ErrorCode::kNotFound);
  EXPECT_EQ(never.message(), "no job " + unknown);

  // Nor may another owner cancel it, or learn anything from trying.
  const Status refused = status_of(cancel(store, id, "mallory"));
  EXPECT_EQ(refused.code(), ErrorCode::kNotFound);
  EXPECT_EQ(refused.message(), "no job " + id);
  EXPECT_EQ(state_of(store, id, "alice"), v1::JOB_STATE_QUEUED);
  EXPECT_FALSE(cancelled);
  // The "" owner (a server without keys) is an owner like any other.
  EXPECT_EQ(status_of(get(store, id, "")).message(), "no job " + id);

  // Once expired, the owner is told why; another owner still is not.
  store.finish(id, Status(), result_of_size(10));
  EXPECT_NE(gone_message(store, id, "alice").find("result_ttl_s"), std::string::npos);
  EXPECT_EQ(status_of(get(store, id, "mallory")).message(), "no job " + id);
}

TEST_P(JobStoreContract, AnIdThatIsNotFortyLowercaseHexDigitsIsAnInvalidArgument) {
  JobStore& store = make_store();
  const std::string good = create(store);
  std::string upper = good;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::vector<std::string> ids = {"",
                                  "abc",
                                  good.substr(0, 39),
                                  good + "0",
                                  std::string(40, 'g'),
                                  good.substr(0, 39) + "\n",
                                  std::string(1000, 'a')};
  if (upper != good) ids.push_back(upper);
  for (const std::string& id : ids) {
    const Status got = status_of(get(store, id));
    EXPECT_EQ(got.code(), ErrorCode::kInvalidArgument) << id;
    EXPECT_EQ(got.message().rfind("id: job id must be 40 hex digits", 0), 0u) << got.message();
    EXPECT_LT(got.message().size(), 200u);  // a long id is not echoed whole
    EXPECT_EQ(status_of(cancel(store, id)).code(), ErrorCode::kInvalidArgument) << id;
  }
}

// --- how long jobs are kept -----------------------------------------------------------------

TEST_P(JobStoreContract, AnEndedJobExpiresAfterItsTtlAndItsResultIsFreed) {
  JobStoreOptions options;
  options.result_ttl_ms = 50;
  JobStore& store = make_store(options);
  const std::string id = create(store);
  store.finish(id, Status(), result_of_size(1000));
  const std::string message = gone_message(store, id);
  EXPECT_EQ(message.rfind("job " + id + " ended at 20", 0), 0u) << message;
  EXPECT_NE(message.find("Z and its result expired after jobs.result_ttl_s (50 ms); submit it "
                         "again"),
            std::string::npos)
      << message;
  // Freed without anyone asking.
  ASSERT_TRUE(eventually([&] { return store.counts().succeeded == 0; }));
  EXPECT_EQ(store.counts().result_bytes, 0);
}

TEST_P(JobStoreContract, ResultsBeyondMaxResultBytesEvictTheLeastRecentlyUsed) {
  const int64_t size = bytes_of(1000);
  JobStoreOptions options;
  options.max_result_bytes = 2 * size + size / 2;  // room for two
  JobStore& store = make_store(options);
  const std::string a = create(store, "", "a");
  const std::string b = create(store, "", "b");
  const std::string c = create(store, "", "c");
  const std::string d = create(store, "", "d");
  store.finish(a, Status(), result_of_size(1000));
  ASSERT_TRUE(reaches(store, a, v1::JOB_STATE_SUCCEEDED));
  store.finish(b, Status(), result_of_size(1000));
  ASSERT_TRUE(reaches(store, b, v1::JOB_STATE_SUCCEEDED));
  ASSERT_TRUE(eventually([&] { return store.counts().result_bytes == 2 * size; }));

  store.finish(c, Status(), result_of_size(1000));  // a, the least recently used, goes
  ASSERT_TRUE(reaches(store, c, v1::JOB_STATE_SUCCEEDED));
  const std::string evicted = gone_message(store, a);
  EXPECT_EQ(evicted.rfind("job " + a + " ended at ", 0), 0u) << evicted;
  EXPECT_NE(evicted.find("and its result was evicted to keep finished jobs within "
                         "jobs.max_result_bytes; submit it again"),
            std::string::npos)
      << evicted;
  ASSERT_TRUE(eventually([&] {
    const JobStore::Counts counts = store.counts();
    return counts.succeeded == 2 && counts.result_bytes == 2 * size;
  }));

  // Fetching b makes it the most recent: c goes next, not b.
  EXPECT_EQ(state_of(store, b), v1::JOB_STATE_SUCCEEDED);
  store.finish(d, Status(), result_of_size(1000));
  ASSERT_TRUE(reaches(store, d, v1::JOB_STATE_SUCCEEDED));
  EXPECT_NE(gone_message(store, c).find("max_result_bytes"), std::string::npos);
  EXPECT_EQ(state_of(store, b), v1::JOB_STATE_SUCCEEDED);

  // Failed jobs hold no result bytes and are not evicted for them.
  const std::string e = create(store, "", "e");
  store.finish(e, Status(ErrorCode::kInternal, "boom"), {});
  ASSERT_TRUE(reaches(store, e, v1::JOB_STATE_FAILED));
  EXPECT_EQ(state_of(store, b), v1::JOB_STATE_SUCCEEDED);
}

// One key's traffic (cache hits that finish at once, so max_jobs_per_key never bites) must not
// evict another key's finished, unfetched job while that key holds no more than the others: the
// key holding the most gives up its own first.
TEST_P(JobStoreContract, OneKeysResultsNeverEvictAnotherKeysWithinItsShare) {
  const int64_t size = bytes_of(1000);
  JobStoreOptions options;
  options.max_result_bytes = 4 * size;  // a share of 2 each for two keys
  JobStore& store = make_store(options);
  const std::string alices = create(store, "alice", "a");
  store.finish(alices, Status(), result_of_size(1000));
  ASSERT_TRUE(reaches(store, alices, v1::JOB_STATE_SUCCEEDED, "alice"));
  std::vector<std::string> bobs;
  for (int i = 0; i < 12; ++i) {
    bobs.push_back(create(store, "bob", "b" + std::to_string(i)));
    store.finish(bobs.back(), Status(), result_of_size(1000));
    ASSERT_TRUE(reaches(store, bobs.back(), v1::JOB_STATE_SUCCEEDED, "bob"));
  }
  EXPECT_EQ(state_of(store, alices, "alice"), v1::JOB_STATE_SUCCEEDED);
  ASSERT_TRUE(eventually([&] { return store.counts().result_bytes == 4 * size; }));
  // Bob keeps his newest three, losing his oldest.
  for (size_t i = 9; i < 12; ++i) {
    EXPECT_EQ(state_of(store, bobs[i], "bob"), v1::JOB_STATE_SUCCEEDED) << i;
  }
  EXPECT_NE(gone_message(store, bobs[0], "bob").find("max_result_bytes"), std::string::npos);

  // A key over its share gives up its own: alice, holding more than bob, loses hers first.
  JobStore& other = make_store(options);
  std::vector<std::string> alice_three;
  for (int i = 0; i < 3; ++i) {
    alice_three.push_back(create(other, "alice", "a"));
    other.finish(alice_three.back(), Status(), result_of_size(1000));
    ASSERT_TRUE(reaches(other, alice_three.back(), v1::JOB_STATE_SUCCEEDED, "alice"));
  }
  const std::string bobs_one = create(other, "bob", "b");
  other.finish(bobs_one, Status(), result_of_size(1000));
  ASSERT_TRUE(reaches(other, bobs_one, v1::JOB_STATE_SUCCEEDED, "bob"));
  const std::string bobs_two = create(other, "bob", "b");
  other.finish(bobs_two, Status(), result_of_size(1000));  // 5 > 4: alice's oldest goes
  ASSERT_TRUE(reaches(other, bobs_two, v1::JOB_STATE_SUCCEEDED, "bob"));
  EXPECT_NE(gone_message(other, alice_three[0], "alice").find("max_result_bytes"),
            std::string::npos);
  EXPECT_EQ(state_of(other, bobs_one, "bob"), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(state_of(other, alice_three[1], "alice"), v1::JOB_STATE_SUCCEEDED);
}

TEST_P(JobStoreContract, AResultBiggerThanMaxResultBytesIsEvictedAtOnce) {
  const int64_t small = bytes_of(100);
  JobStoreOptions options;
  options.max_result_bytes = 4 * small;
  JobStore& store = make_store(options);
  const std::string kept = create(store, "", "kept");
  const std::string big = create(store, "", "big");
  store.finish(kept, Status(), result_of_size(100));
  ASSERT_TRUE(reaches(store, kept, v1::JOB_STATE_SUCCEEDED));
  Capture poll;
  store.get(big, "", milliseconds(10'000), poll.done());
  store.finish(big, Status(), result_of_size(10'000));

  // The waiting long-poll and every later lookup read the same: evicted.
  ASSERT_TRUE(eventually([&] { return poll.count() == 1; }));
  const Status waited = status_of(poll.taken());
  EXPECT_EQ(waited.code(), ErrorCode::kNotFound);
  EXPECT_NE(waited.message().find("max_result_bytes"), std::string::npos) << waited.message();
  EXPECT_EQ(status_of(get(store, big)).message(), waited.message());
  // The others are not sacrificed for a result that could never fit.
  EXPECT_EQ(state_of(store, kept), v1::JOB_STATE_SUCCEEDED);
  ASSERT_TRUE(eventually([&] { return store.counts().result_bytes == small; }));
  EXPECT_EQ(store.counts().succeeded, 1);
}

TEST_P(JobStoreContract, MaxJobsPerKeyBoundsTheOpenJobsOfEachOwner) {
  JobStoreOptions options;
  options.max_jobs_per_key = 2;
  JobStore& store = make_store(options);
  const std::string first = create(store, "alice");
  create(store, "alice");
  const Status refused = refused_create(store, "alice");
  EXPECT_EQ(refused.code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("jobs.max_jobs_per_key"), std::string::npos)
      << refused.message();
  EXPECT_NE(refused.message().find("alice"), std::string::npos) << refused.message();

  create(store, "bob");  // another owner has places of its own
  // An ended job frees its place.
  store.finish(first, Status(ErrorCode::kCancelled, "cancelled"), {});
  ASSERT_TRUE(reaches(store, first, v1::JOB_STATE_CANCELLED, "alice"));
  create(store, "alice");
  EXPECT_EQ(refused_create(store, "alice").code(), ErrorCode::kResourceExhausted);
}

TEST_P(JobStoreContract, MaxJobsEvictsTheOldestFinishedAndRefusesWhenAllAreOpen) {
  JobStoreOptions options;
  options.max_jobs = 3;
  JobStore& store = make_store(options);
  const std::string a = create(store, "", "a");
  const std::string b = create(store, "", "b");
  const std::string c = create(store, "", "c");
  const Status refused = refused_create(store, "");
  EXPECT_EQ(refused.code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("jobs.max_jobs:"), std::string::npos) << refused.message();

  store.finish(b, Status(), result_of_size(10));
  ASSERT_TRUE(reaches(store, b, v1::JOB_STATE_SUCCEEDED));
  store.finish(a, Status(), result_of_size(10));
  ASSERT_TRUE(reaches(store, a, v1::JOB_STATE_SUCCEEDED));
  const std::string d = create(store, "", "d");  // b, finished first, makes room
  const Status gone = status_of(get(store, b));
  EXPECT_EQ(gone.code(), ErrorCode::kNotFound);
  EXPECT_NE(gone.message().find("evicted to keep the server within jobs.max_jobs"),
            std::string::npos)
      << gone.message();
  EXPECT_EQ(state_of(store, a), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(state_of(store, c), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(state_of(store, d), v1::JOB_STATE_QUEUED);
}

TEST_P(JobStoreContract, OneKeysCancelledJobsNeverEvictAnotherKeysRecords) {
  JobStoreOptions options;
  options.max_jobs = 10;
  JobStore& store = make_store(options);
  const std::string alices = create(store, "alice", "a");
  store.finish(alices, Status(ErrorCode::kDeadlineExceeded, "too slow"), {});
  ASSERT_TRUE(reaches(store, alices, v1::JOB_STATE_FAILED, "alice"));
  for (int i = 0; i < 25; ++i) {  // submitted and cancelled, one after another
    const std::string id = create(store, "bob", "b");
    EXPECT_TRUE(std::holds_alternative<v1::MeshJob>(cancel(store, id, "bob")));
    store.finish(id, Status(ErrorCode::kCancelled, "cancelled"), {});
    ASSERT_TRUE(reaches(store, id, v1::JOB_STATE_CANCELLED, "bob"));
  }
  EXPECT_EQ(state_of(store, alices, "alice"), v1::JOB_STATE_FAILED);
}

// --- long-polls ------------------------------------------------------------------------------

TEST_P(JobStoreContract, ALongPollIsAnsweredWhenTheJobEnds) {
  JobStore& store = make_store();
  const std::string id = create(store);
  Capture poll;
  store.get(id, "", milliseconds(10'000), poll.done());
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(poll.count(), 0);
  const auto finished_at = std::chrono::steady_clock::now();
  store.finish(id, Status(), result_of_size(10));
  ASSERT_TRUE(eventually([&] { return poll.count() == 1; }));
  EXPECT_LT(std::chrono::steady_clock::now() - finished_at, milliseconds(5'000));  // not its wait
  const v1::MeshJob job = job_of(poll.taken());
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(job.result().encoded().size(), 10u);
}

TEST_P(JobStoreContract, ALongPollAnswersTheOpenJobAtMaxWait) {
  JobStoreOptions options;
  options.max_wait_ms = 100;
  JobStore& store = make_store(options);
  const std::string id = create(store);
  store.progress(id, stage(v1::STAGE_TEXT_ENCODING));
  ASSERT_TRUE(reaches(store, id, v1::JOB_STATE_RUNNING));
  const auto start = std::chrono::steady_clock::now();
  const Answer answer = get(store, id, "", milliseconds(60'000));  // capped at max_wait
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, milliseconds(90));
  EXPECT_LT(waited, milliseconds(10'000));
  const v1::MeshJob job = job_of(answer);
  EXPECT_EQ(job.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(job.poll_after_ms(), 1'000u);
  EXPECT_EQ(job.progress().stage(), v1::STAGE_TEXT_ENCODING);
}

TEST_P(JobStoreContract, ALongPollOnAnEndedJobOrAnUnknownOneAnswersAtOnce) {
  JobStore& store = make_store();
  const std::string ended = create(store);
  store.finish(ended, Status(ErrorCode::kUnavailable, "no GPU"), {});
  ASSERT_TRUE(reaches(store, ended, v1::JOB_STATE_FAILED));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(job_of(get(store, ended, "", milliseconds(60'000))).state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(status_of(get(store, unknown_id_like(ended), "", milliseconds(60'000))).code(),
            ErrorCode::kNotFound);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(10'000));
}

TEST_P(JobStoreContract, EndingLongPollsAnswersThemWithTheJobAsItIsAndLaterOnesAtOnce) {
  JobStore& store = make_store();
  const std::string id = create(store);
  Capture pending;
  store.get(id, "", milliseconds(60'000), pending.done());
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(pending.count(), 0);
  store.end_long_polls();
  ASSERT_TRUE(eventually([&] { return pending.count() == 1; }));
  EXPECT_EQ(job_of(pending.taken()).state(), v1::JOB_STATE_QUEUED);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(job_of(get(store, id, "", milliseconds(60'000))).state(), v1::JOB_STATE_QUEUED);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(10'000));  // no wait any more
  // Jobs still end and are read as before.
  store.finish(id, Status(), result_of_size(10));
  EXPECT_TRUE(reaches(store, id, v1::JOB_STATE_SUCCEEDED));
}

TEST_P(JobStoreContract, TheDestructorAnswersPendingLongPolls) {
  JobStore& store = make_store();
  const std::string id = create(store);
  Capture first;
  Capture second;
  store.get(id, "", milliseconds(60'000), first.done());
  store.get(id, "", milliseconds(60'000), second.done());
  std::this_thread::sleep_for(milliseconds(50));
  destroy_last_store();
  for (Capture* poll : {&first, &second}) {
    ASSERT_EQ(poll->count(), 1);  // by the time the destructor returned
    const Status status = status_of(poll->taken());
    EXPECT_EQ(status.code(), ErrorCode::kUnavailable);
    EXPECT_EQ(status.message(), "the server is shutting down");
  }
}

// --- cancellation ----------------------------------------------------------------------------

TEST_P(JobStoreContract, CancelRunsTheCancellerWhichMayFinishReentrantly) {
  JobStore& store = make_store();
  const std::string id = create(store);
  std::atomic<int> runs{0};
  store.set_canceller(id, [&] {
    ++runs;
    // As the job glue does: the service core's cancel ends the call synchronously.
    store.finish(id, Status(ErrorCode::kCancelled, "cancelled by the client"), {});
  });
  Capture poll;
  store.get(id, "", milliseconds(10'000), poll.done());

  const v1::MeshJob job = job_of(cancel(store, id));
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(job.state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(job.error().status(), "CANCELLED");
  EXPECT_EQ(job.error().message(), kJobCancelledByClient);
  ASSERT_TRUE(eventually([&] { return poll.count() == 1; }));
  EXPECT_EQ(job_of(poll.taken()).state(), v1::JOB_STATE_CANCELLED);

  // Cancelling an ended job answers it unchanged and runs nothing.
  EXPECT_EQ(job_of(cancel(store, id)).state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(runs, 1);
}

TEST_P(JobStoreContract, ACancelBeforeTheCancellerIsSetRunsItWhenSet) {
  JobStore& store = make_store();
  const std::string id = create(store);
  EXPECT_EQ(job_of(cancel(store, id)).state(), v1::JOB_STATE_QUEUED);  // nothing to stop yet
  std::atomic<int> runs{0};
  store.set_canceller(id, [&] { ++runs; });
  EXPECT_TRUE(eventually([&] { return runs == 1; }));

  // A canceller that ends the work later: cancel answers the job as it is meanwhile.
  const std::string later = create(store);
  std::atomic<int> later_runs{0};
  store.set_canceller(later, [&] { ++later_runs; });
  store.progress(later, stage(v1::STAGE_MESHING));
  ASSERT_TRUE(reaches(store, later, v1::JOB_STATE_RUNNING));
  EXPECT_EQ(job_of(cancel(store, later)).state(), v1::JOB_STATE_RUNNING);
  EXPECT_TRUE(eventually([&] { return later_runs >= 1; }));
  EXPECT_EQ(job_of(cancel(store, later)).state(), v1::JOB_STATE_RUNNING);
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(later_runs, 1);  // once, however many cancels
  EXPECT_EQ(runs, 1);
}

TEST_P(JobStoreContract, ACancelWinsOverAFinishThatComesAfterIt) {
  JobStore& store = make_store();
  const std::string id = create(store);
  store.set_canceller(id, [] {});  // the work does not stop at once
  EXPECT_EQ(job_of(cancel(store, id)).state(), v1::JOB_STATE_QUEUED);
  store.finish(id, Status(), result_of_size(10));  // it got to the end anyway
  ASSERT_TRUE(reaches(store, id, v1::JOB_STATE_CANCELLED));
  const v1::MeshJob job = job_of(get(store, id));
  EXPECT_EQ(job.error().status(), "CANCELLED");
  EXPECT_EQ(job.error().message(), kJobCancelledByClient);
  EXPECT_FALSE(job.has_result());
  ASSERT_TRUE(eventually([&] { return store.counts().cancelled == 1; }));
  EXPECT_EQ(store.counts().result_bytes, 0);
}

TEST_P(JobStoreContract, CancellingAnEndedJobAnswersItUnchanged) {
  JobStore& store = make_store();
  const std::string id = create(store);
  std::atomic<bool> ran{false};
  store.set_canceller(id, [&] { ran = true; });
  store.finish(id, Status(), result_of_size(20));
  ASSERT_TRUE(reaches(store, id, v1::JOB_STATE_SUCCEEDED));
  const v1::MeshJob job = job_of(cancel(store, id));
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(job.result().encoded().size(), 20u);
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_FALSE(ran);
}

// --- discard, counts, options ----------------------------------------------------------------

TEST_P(JobStoreContract, ADiscardedJobIsAsIfNeverMade) {
  JobStoreOptions options;
  options.max_jobs_per_key = 1;
  JobStore& store = make_store(options);
  const std::string id = create(store, "alice");
  store.discard(id);
  EXPECT_EQ(gone_message(store, id, "alice"), "no job " + id);
  ASSERT_TRUE(eventually([&] {
    const JobStore::Counts counts = store.counts();
    return counts.queued + counts.running + counts.succeeded + counts.failed + counts.cancelled ==
           0;
  }));
  create(store, "alice");  // its place is free again
}

TEST_P(JobStoreContract, TheCountsObserverSeesEveryChange) {
  JobStoreOptions options;
  // Long enough for the Redis store's counts, read from Redis at each tick, to show the ended
  // jobs before they expire.
  options.result_ttl_ms = 1'500;
  JobStore& store = make_store(options);
  const CountsSeen seen(store);
  const auto last = [&] { return seen.last(); };
  ASSERT_EQ(seen.calls(), 1u);  // the present counts, at once
  EXPECT_EQ(seen.first().queued, 0);

  const std::string id = create(store);
  EXPECT_TRUE(eventually([&] { return last().queued == 1; }));
  store.progress(id, stage(v1::STAGE_DECODING));
  EXPECT_TRUE(eventually([&] { return last().queued == 0 && last().running == 1; }));
  store.finish(id, Status(), result_of_size(100));
  EXPECT_TRUE(eventually([&] { return last().running == 0 && last().succeeded == 1; }));
  EXPECT_EQ(last().result_bytes, bytes_of(100));
  // Expiry is a change too.
  EXPECT_TRUE(eventually([&] { return last().succeeded == 0 && last().result_bytes == 0; }));

  const std::string failed = create(store);
  store.finish(failed, Status(ErrorCode::kInternal, "boom"), {});
  EXPECT_TRUE(eventually([&] { return last().failed == 1; }));
  const std::string discarded = create(store);
  EXPECT_TRUE(eventually([&] { return last().queued == 1; }));
  store.discard(discarded);
  EXPECT_TRUE(eventually([&] { return last().queued == 0; }));
}

TEST_P(JobStoreContract, OptionsOutOfRangeAreRefusedNamingTheKey) {
  const auto refusal = [&](const JobStoreOptions& options) -> std::string {
    try {
      make_store(options);
    } catch (const std::exception& e) {
      return e.what();
    }
    ADD_FAILURE() << "the options were accepted";
    return "";
  };
  JobStoreOptions options;
  options.max_jobs = 0;
  EXPECT_NE(refusal(options).find("jobs.max_jobs"), std::string::npos);
  options = {};
  options.result_ttl_ms = -1;
  EXPECT_NE(refusal(options).find("jobs.result_ttl"), std::string::npos);
  options = {};
  options.poll_after_ms = int64_t{1} << 40;
  EXPECT_NE(refusal(options).find("jobs.poll_after"), std::string::npos);
}

}  // namespace cube3d::test_job_store_contract
