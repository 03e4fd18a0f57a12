// The memory job store behind SubmitMeshJob, GetMeshJob and CancelMeshJob: states, owners,
// NOT_FOUND reasons, limits, long-polls, cancellation and shutdown.
#include "cube3d/server/jobs/memory_job_store.h"

#include <gtest/gtest.h>

#include <cctype>
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
using testing::eventually;
using testing::job_of;
using testing::result_of_size;
using testing::stage;
using testing::status_of;
using Answer = JobStore::Answer;

// One long-poll's answer, as `done` saw it.
struct Capture {
  std::mutex mutex;
  std::optional<Answer> answer;
  int calls = 0;
  std::thread::id thread;

  std::function<void(Answer)> done() {
    return [this](Answer answer) {
      const std::lock_guard lock(mutex);
      this->answer = std::move(answer);
      ++calls;
      thread = std::this_thread::get_id();
    };
  }
  int count() {
    const std::lock_guard lock(mutex);
    return calls;
  }
};

// An answer that must come inline (an ended job, or wait 0).
Answer get_now(JobStore& store, const std::string& id, const std::string& owner = "") {
  std::optional<Answer> answer;
  store.get(id, owner, milliseconds(0), [&](Answer a) { answer = std::move(a); });
  EXPECT_TRUE(answer.has_value()) << "get with wait 0 did not answer inline";
  return answer ? std::move(*answer) : Answer(Status(ErrorCode::kInternal, "none"));
}

// A hex id of the same run as `like`, never issued.
std::string unknown_id_like(const std::string& like) {
  std::string id = like;
  for (size_t i = 8; i < id.size(); ++i) id[i] = id[i] == '0' ? '1' : '0';
  return id;
}

ErrorCode error_code_of_create(MemoryJobStore& store, const std::string& owner,
                               std::string* message) {
  try {
    store.create(owner, "r");
  } catch (const Error& e) {
    *message = e.what();
    return e.code();
  }
  ADD_FAILURE() << "create was not refused";
  return ErrorCode::kInternal;
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

TEST_F(JobStoreTest, AnIdempotencyKeyNamesOneJobOfOneRequest) {
  MemoryJobStore store({}, timers_);
  testing::expect_idempotent_creates(store, store);
}

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

TEST_F(JobStoreTest, GoesFromQueuedThroughRunningToSucceeded) {
  JobStoreOptions options;
  options.poll_after_ms = 750;
  options.result_ttl_ms = 90'000;
  MemoryJobStore store(options, timers_);
  const int64_t before_ms =
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  const std::string id = store.create("studio", "req-1");

  v1::MeshJob job = job_of(get_now(store, id, "studio"));
  EXPECT_EQ(job.id(), id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(job.progress().stage(), v1::STAGE_QUEUED);
  EXPECT_EQ(job.poll_after_ms(), 750u);
  EXPECT_EQ(job.request_id(), "req-1");
  EXPECT_GE(job.created_unix_ms(), before_ms);
  EXPECT_EQ(job.finished_unix_ms(), 0);
  EXPECT_EQ(job.expires_unix_ms(), 0);
  EXPECT_FALSE(job.has_result());
  EXPECT_FALSE(job.has_error());

  store.progress(id, stage(v1::STAGE_QUEUED));  // still waiting for a batch
  EXPECT_EQ(job_of(get_now(store, id, "studio")).state(), v1::JOB_STATE_QUEUED);

  v1::Progress decoding = stage(v1::STAGE_DECODING);
  decoding.set_tokens_done(100);
  decoding.set_tokens_total(1024);
  store.progress(id, decoding);
  job = job_of(get_now(store, id, "studio"));
  EXPECT_EQ(job.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(job.progress().tokens_done(), 100u);
  EXPECT_EQ(job.progress().tokens_total(), 1024u);
  EXPECT_EQ(job.poll_after_ms(), 750u);
  EXPECT_EQ(store.counts().running, 1);

  store.finish(id, Status(), result_of_size(64, "req-1"));
  job = job_of(get_now(store, id, "studio"));
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(job.poll_after_ms(), 0u);
  ASSERT_TRUE(job.has_result());
  EXPECT_EQ(job.result().encoded().size(), 64u);
  EXPECT_EQ(job.result().request_id(), "req-1");
  EXPECT_FALSE(job.has_error());
  EXPECT_GE(job.finished_unix_ms(), job.created_unix_ms());
  EXPECT_EQ(job.expires_unix_ms(), job.finished_unix_ms() + 90'000);

  const JobStore::Counts counts = store.counts();
  EXPECT_EQ(counts.queued, 0);
  EXPECT_EQ(counts.running, 0);
  EXPECT_EQ(counts.succeeded, 1);
  EXPECT_EQ(counts.result_bytes, static_cast<int64_t>(result_of_size(64, "req-1").ByteSizeLong()));
}

TEST_F(JobStoreTest, FailedAndCancelledJobsCarryTheirStatus) {
  MemoryJobStore store({}, timers_);
  const std::string failed = store.create("", "r1");
  const std::string cancelled = store.create("", "r2");
  store.finish(failed, Status(ErrorCode::kDeadlineExceeded, "took too long"), {});
  store.finish(cancelled, Status(ErrorCode::kCancelled, "cancelled by the client"), {});

  const v1::MeshJob f = job_of(get_now(store, failed));
  EXPECT_EQ(f.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(f.error().code(), 4);
  EXPECT_EQ(f.error().status(), "DEADLINE_EXCEEDED");
  EXPECT_EQ(f.error().message(), "took too long");
  EXPECT_FALSE(f.has_result());
  EXPECT_GT(f.expires_unix_ms(), 0);

  const v1::MeshJob c = job_of(get_now(store, cancelled));
  EXPECT_EQ(c.state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(c.error().code(), 1);
  EXPECT_EQ(c.error().status(), "CANCELLED");
  EXPECT_EQ(c.error().message(), "cancelled by the client");

  const JobStore::Counts counts = store.counts();
  EXPECT_EQ(counts.failed, 1);
  EXPECT_EQ(counts.cancelled, 1);
  EXPECT_EQ(counts.result_bytes, 0);
}

TEST_F(JobStoreTest, TheFirstFinishWinsAndLateProgressIsIgnored) {
  MemoryJobStore store({}, timers_);
  const std::string id = store.create("", "r");
  store.finish(id, Status(ErrorCode::kCancelled, "cancelled"), {});
  store.finish(id, Status(), result_of_size(10));  // the work ended as it was cancelled
  store.progress(id, stage(v1::STAGE_MESHING));
  const v1::MeshJob job = job_of(get_now(store, id));
  EXPECT_EQ(job.state(), v1::JOB_STATE_CANCELLED);
  EXPECT_FALSE(job.has_result());
  EXPECT_EQ(store.counts().succeeded, 0);
  EXPECT_EQ(store.counts().cancelled, 1);
}

TEST_F(JobStoreTest, AnotherOwnerGetsTheSameNotFoundAsAnUnknownId) {
  JobStoreOptions options;
  options.result_ttl_ms = 50;
  MemoryJobStore store(options, timers_);
  const std::string id = store.create("alice", "r");
  bool cancelled = false;
  store.set_canceller(id, [&] { cancelled = true; });

  const Status foreign = status_of(get_now(store, id, "mallory"));
  EXPECT_EQ(foreign.code(), ErrorCode::kNotFound);
  EXPECT_EQ(foreign.message(), "no job " + id);
  const std::string unknown = unknown_id_like(id);
  const Status never = status_of(get_now(store, unknown, "mallory"));
  EXPECT_EQ(never.code(), ErrorCode::kNotFound);
  EXPECT_EQ(never.message(), "no job " + unknown);

  // Nor may another owner cancel it, or learn anything from trying.
  const Status cancel = status_of(store.cancel(id, "mallory"));
  EXPECT_EQ(cancel.code(), ErrorCode::kNotFound);
  EXPECT_EQ(cancel.message(), "no job " + id);
  EXPECT_FALSE(cancelled);
  EXPECT_EQ(job_of(get_now(store, id, "alice")).state(), v1::JOB_STATE_QUEUED);
  // The "" owner (a server without keys) is an owner like any other.
  EXPECT_EQ(status_of(get_now(store, id, "")).message(), "no job " + id);

  // Once expired, the owner is told why; another owner still is not.
  store.finish(id, Status(), result_of_size(10));
  ASSERT_TRUE(
      eventually([&] { return std::holds_alternative<Status>(get_now(store, id, "alice")); }));
  EXPECT_NE(status_of(get_now(store, id, "alice")).message().find("result_ttl_s"),
            std::string::npos);
  EXPECT_EQ(status_of(get_now(store, id, "mallory")).message(), "no job " + id);
}

TEST_F(JobStoreTest, AnIdThatIsNotFortyLowercaseHexDigitsIsAnInvalidArgument) {
  MemoryJobStore store({}, timers_);
  const std::string good = store.create("", "r");
  std::string upper = good;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const std::vector<std::string> bad = {"",
                                        "abc",
                                        good.substr(0, 39),
                                        good + "0",
                                        std::string(40, 'g'),
                                        good.substr(0, 39) + "\n",
                                        std::string(1000, 'a')};
  std::vector<std::string> ids = bad;
  if (upper != good) ids.push_back(upper);
  for (const std::string& id : ids) {
    const Status got = status_of(get_now(store, id));
    EXPECT_EQ(got.code(), ErrorCode::kInvalidArgument) << id;
    EXPECT_EQ(got.message().rfind("id: job id must be 40 hex digits", 0), 0u) << got.message();
    EXPECT_LT(got.message().size(), 200u);  // a long id is not echoed whole
    const Status cancel = status_of(store.cancel(id, ""));
    EXPECT_EQ(cancel.code(), ErrorCode::kInvalidArgument) << id;
  }
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

TEST_F(JobStoreTest, AnEndedJobExpiresAfterItsTtlAndItsResultIsFreed) {
  JobStoreOptions options;
  options.result_ttl_ms = 50;
  MemoryJobStore store(options, timers_);
  const std::string id = store.create("", "r");
  store.finish(id, Status(), result_of_size(1000));
  EXPECT_EQ(job_of(get_now(store, id)).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_GT(store.counts().result_bytes, 0);

  // Freed by the sweep, without anyone asking.
  ASSERT_TRUE(eventually([&] { return store.counts().succeeded == 0; }));
  EXPECT_EQ(store.counts().result_bytes, 0);
  const Status got = status_of(get_now(store, id));
  EXPECT_EQ(got.code(), ErrorCode::kNotFound);
  const std::string& message = got.message();
  EXPECT_EQ(message.rfind("job " + id + " ended at 20", 0), 0u) << message;
  EXPECT_NE(message.find("Z and its result expired after jobs.result_ttl_s (50 ms); submit it "
                         "again"),
            std::string::npos)
      << message;
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

TEST_F(JobStoreTest, ResultsBeyondMaxResultBytesEvictTheLeastRecentlyUsed) {
  const int64_t size = static_cast<int64_t>(result_of_size(1000).ByteSizeLong());
  JobStoreOptions options;
  options.max_result_bytes = 2 * size + size / 2;  // room for two
  MemoryJobStore store(options, timers_);
  const std::string a = store.create("", "a");
  const std::string b = store.create("", "b");
  const std::string c = store.create("", "c");
  const std::string d = store.create("", "d");
  store.finish(a, Status(), result_of_size(1000));
  store.finish(b, Status(), result_of_size(1000));
  EXPECT_EQ(store.counts().result_bytes, 2 * size);

  store.finish(c, Status(), result_of_size(1000));  // a, the oldest, goes
  EXPECT_EQ(store.counts().result_bytes, 2 * size);
  EXPECT_EQ(store.counts().succeeded, 2);
  const Status evicted = status_of(get_now(store, a));
  EXPECT_EQ(evicted.code(), ErrorCode::kNotFound);
  EXPECT_EQ(evicted.message().rfind("job " + a + " ended at ", 0), 0u);
  EXPECT_NE(evicted.message().find(
                "and its result was evicted to keep finished jobs within jobs.max_result_bytes; "
                "submit it again"),
            std::string::npos)
      << evicted.message();

  // Fetching b makes it the most recent: c goes next, not b.
  EXPECT_EQ(job_of(get_now(store, b)).state(), v1::JOB_STATE_SUCCEEDED);
  store.finish(d, Status(), result_of_size(1000));
  EXPECT_EQ(job_of(get_now(store, b)).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(job_of(get_now(store, d)).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_NE(status_of(get_now(store, c)).message().find("max_result_bytes"), std::string::npos);

  // Failed jobs hold no result bytes and are not evicted for them.
  const std::string e = store.create("", "e");
  store.finish(e, Status(ErrorCode::kInternal, "boom"), {});
  EXPECT_EQ(job_of(get_now(store, e)).state(), v1::JOB_STATE_FAILED);
}

// One key's traffic (cache hits that finish at once, so max_jobs_per_key never bites) must not
// evict another key's finished, unfetched job while that key holds no more than the others: the
// key holding the most gives up its own first.
TEST_F(JobStoreTest, OneKeysResultsNeverEvictAnotherKeysWithinItsShare) {
  const int64_t size = static_cast<int64_t>(result_of_size(1000).ByteSizeLong());
  JobStoreOptions options;
  options.max_result_bytes = 4 * size;  // a share of 2 each for two keys
  MemoryJobStore store(options, timers_);
  const std::string alices = store.create("alice", "a");
  store.finish(alices, Status(), result_of_size(1000));
  std::vector<std::string> bobs;
  for (int i = 0; i < 50; ++i) {
    bobs.push_back(store.create("bob", "b" + std::to_string(i)));
    store.finish(bobs.back(), Status(), result_of_size(1000));
  }
  EXPECT_EQ(job_of(get_now(store, alices, "alice")).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(store.counts().result_bytes, 4 * size);
  // Bob keeps his newest three, losing his oldest.
  for (int i = 47; i < 50; ++i) {
    EXPECT_EQ(job_of(get_now(store, bobs[i], "bob")).state(), v1::JOB_STATE_SUCCEEDED) << i;
  }
  EXPECT_EQ(status_of(get_now(store, bobs[0], "bob")).code(), ErrorCode::kNotFound);
  // A key over its share gives up its own: alice, holding more than bob, loses hers first.
  MemoryJobStore other(options, timers_);
  std::vector<std::string> alice_three;
  for (int i = 0; i < 3; ++i) {
    alice_three.push_back(other.create("alice", "a"));
    other.finish(alice_three.back(), Status(), result_of_size(1000));
  }
  const std::string bobs_one = other.create("bob", "b");
  other.finish(bobs_one, Status(), result_of_size(1000));
  const std::string bobs_two = other.create("bob", "b");
  other.finish(bobs_two, Status(), result_of_size(1000));  // 5 > 4: alice's oldest goes
  EXPECT_EQ(status_of(get_now(other, alice_three[0], "alice")).code(), ErrorCode::kNotFound);
  EXPECT_EQ(job_of(get_now(other, bobs_one, "bob")).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(job_of(get_now(other, bobs_two, "bob")).state(), v1::JOB_STATE_SUCCEEDED);
}

TEST_F(JobStoreTest, OneKeysCancelledJobsNeverEvictAnotherKeysRecords) {
  JobStoreOptions options;
  options.max_jobs = 10;
  MemoryJobStore store(options, timers_);
  const std::string alices = store.create("alice", "a");
  store.finish(alices, Status(ErrorCode::kDeadlineExceeded, "too slow"), {});
  for (int i = 0; i < 45; ++i) {  // submitted and cancelled, one after another
    const std::string id = store.create("bob", "b");
    EXPECT_TRUE(std::holds_alternative<v1::MeshJob>(store.cancel(id, "bob")));
    store.finish(id, Status(ErrorCode::kCancelled, "cancelled"), {});
  }
  EXPECT_EQ(job_of(get_now(store, alices, "alice")).state(), v1::JOB_STATE_FAILED);
}

TEST_F(JobStoreTest, AResultBiggerThanMaxResultBytesIsEvictedAtOnce) {
  const int64_t small = static_cast<int64_t>(result_of_size(100).ByteSizeLong());
  JobStoreOptions options;
  options.max_result_bytes = 4 * small;
  MemoryJobStore store(options, timers_);
  const std::string kept = store.create("", "kept");
  const std::string big = store.create("", "big");
  store.finish(kept, Status(), result_of_size(100));
  Capture poll;
  store.get(big, "", milliseconds(10'000), poll.done());
  store.finish(big, Status(), result_of_size(10'000));

  // The waiting long-poll and every later lookup read the same: evicted.
  ASSERT_EQ(poll.count(), 1);
  const Status waited = status_of(*poll.answer);
  EXPECT_EQ(waited.code(), ErrorCode::kNotFound);
  EXPECT_NE(waited.message().find("max_result_bytes"), std::string::npos);
  EXPECT_EQ(status_of(get_now(store, big)).message(), waited.message());
  // The others are not sacrificed for a result that could never fit.
  EXPECT_EQ(job_of(get_now(store, kept)).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(store.counts().succeeded, 1);
  EXPECT_EQ(store.counts().result_bytes, small);
}

TEST_F(JobStoreTest, MaxJobsPerKeyBoundsTheOpenJobsOfEachOwner) {
  JobStoreOptions options;
  options.max_jobs_per_key = 2;
  MemoryJobStore store(options, timers_);
  const std::string first = store.create("alice", "r");
  store.create("alice", "r");
  std::string message;
  EXPECT_EQ(error_code_of_create(store, "alice", &message), ErrorCode::kResourceExhausted);
  EXPECT_NE(message.find("jobs.max_jobs_per_key"), std::string::npos) << message;
  EXPECT_NE(message.find("alice"), std::string::npos) << message;

  store.create("bob", "r");  // another owner has places of its own
  // An ended job frees its place.
  store.finish(first, Status(ErrorCode::kCancelled, "cancelled"), {});
  store.create("alice", "r");
  EXPECT_EQ(error_code_of_create(store, "alice", &message), ErrorCode::kResourceExhausted);
}

TEST_F(JobStoreTest, MaxJobsEvictsTheOldestFinishedAndRefusesWhenAllAreOpen) {
  JobStoreOptions options;
  options.max_jobs = 3;
  MemoryJobStore store(options, timers_);
  const std::string a = store.create("", "a");
  const std::string b = store.create("", "b");
  const std::string c = store.create("", "c");
  std::string message;
  EXPECT_EQ(error_code_of_create(store, "", &message), ErrorCode::kResourceExhausted);
  EXPECT_NE(message.find("jobs.max_jobs:"), std::string::npos) << message;

  store.finish(b, Status(), result_of_size(10));
  store.finish(a, Status(), result_of_size(10));
  const std::string d = store.create("", "d");  // b, finished first, makes room
  const Status gone = status_of(get_now(store, b));
  EXPECT_EQ(gone.code(), ErrorCode::kNotFound);
  EXPECT_NE(gone.message().find("evicted to keep the server within jobs.max_jobs"),
            std::string::npos)
      << gone.message();
  EXPECT_EQ(job_of(get_now(store, a)).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(job_of(get_now(store, c)).state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(job_of(get_now(store, d)).state(), v1::JOB_STATE_QUEUED);
}

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

TEST_F(JobStoreTest, CancelRunsTheCancellerWhichMayFinishReentrantly) {
  MemoryJobStore store({}, timers_);
  const std::string id = store.create("", "r");
  int runs = 0;
  store.set_canceller(id, [&] {
    ++runs;
    // As the lead's glue does: the service core's cancel ends the call synchronously.
    store.finish(id, Status(ErrorCode::kCancelled, "cancelled by the client"), {});
  });
  Capture poll;
  store.get(id, "", milliseconds(10'000), poll.done());

  const v1::MeshJob job = job_of(store.cancel(id, ""));
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(job.state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(job.error().status(), "CANCELLED");
  EXPECT_EQ(job.error().message(), "cancelled by the client");
  ASSERT_EQ(poll.count(), 1);
  EXPECT_EQ(job_of(*poll.answer).state(), v1::JOB_STATE_CANCELLED);

  // Cancelling an ended job answers it unchanged and runs nothing.
  EXPECT_EQ(job_of(store.cancel(id, "")).state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(runs, 1);
}

TEST_F(JobStoreTest, ACancelBeforeTheCancellerIsSetRunsItWhenSet) {
  MemoryJobStore store({}, timers_);
  const std::string id = store.create("", "r");
  EXPECT_EQ(job_of(store.cancel(id, "")).state(), v1::JOB_STATE_QUEUED);  // nothing to stop yet
  int runs = 0;
  store.set_canceller(id, [&] { ++runs; });
  EXPECT_EQ(runs, 1);

  // A canceller that ends the work later: cancel answers the job as it is meanwhile.
  const std::string later = store.create("", "r");
  int later_runs = 0;
  store.set_canceller(later, [&] { ++later_runs; });
  store.progress(later, stage(v1::STAGE_MESHING));
  EXPECT_EQ(job_of(store.cancel(later, "")).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(job_of(store.cancel(later, "")).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(later_runs, 1);  // once, however many cancels
}

TEST_F(JobStoreTest, CancellingAnEndedJobAnswersItUnchanged) {
  MemoryJobStore store({}, timers_);
  const std::string id = store.create("", "r");
  bool ran = false;
  store.set_canceller(id, [&] { ran = true; });
  store.finish(id, Status(), result_of_size(20));
  const v1::MeshJob job = job_of(store.cancel(id, ""));
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(job.result().encoded().size(), 20u);
  EXPECT_FALSE(ran);
}

TEST_F(JobStoreTest, ADiscardedJobIsAsIfNeverMade) {
  JobStoreOptions options;
  options.max_jobs_per_key = 1;
  MemoryJobStore store(options, timers_);
  const std::string id = store.create("alice", "r");
  store.discard(id);
  EXPECT_EQ(status_of(get_now(store, id, "alice")).message(), "no job " + id);
  const JobStore::Counts counts = store.counts();
  EXPECT_EQ(counts.queued + counts.running + counts.succeeded + counts.failed + counts.cancelled,
            0);
  store.create("alice", "r");  // its place is free again
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
  std::mutex mutex;
  std::vector<JobStore::Counts> seen;
  store.on_counts([&](const JobStore::Counts& counts) {
    const std::lock_guard lock(mutex);
    seen.push_back(counts);
  });
  const auto last = [&] {
    const std::lock_guard lock(mutex);
    return seen.back();
  };
  ASSERT_EQ(seen.size(), 1u);  // the present counts, at once
  EXPECT_EQ(seen[0].queued, 0);

  const std::string id = store.create("", "r");
  EXPECT_EQ(last().queued, 1);
  store.progress(id, stage(v1::STAGE_DECODING));
  EXPECT_EQ(last().queued, 0);
  EXPECT_EQ(last().running, 1);
  const size_t calls = seen.size();
  store.progress(id, stage(v1::STAGE_MESHING));  // no change of state: no call
  EXPECT_EQ(seen.size(), calls);
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

TEST_F(JobStoreTest, OptionsOutOfRangeAreRefused) {
  JobStoreOptions options;
  options.max_jobs = 0;
  EXPECT_THROW({ const MemoryJobStore store(options, timers_); }, Error);
  options = {};
  options.result_ttl_ms = -1;
  EXPECT_THROW({ const MemoryJobStore store(options, timers_); }, Error);
  options = {};
  options.poll_after_ms = int64_t{1} << 40;
  EXPECT_THROW({ const MemoryJobStore store(options, timers_); }, Error);
}

}  // namespace test_memory_job_store
}  // namespace cube3d
