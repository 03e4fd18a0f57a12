// Test support shared by the job store tests (the memory store and the Redis store): an answer
// read as the job or the status it must be, and the progress and results a worker reports.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
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

namespace cube3d::testing {

// What a store's counts observer (JobStore::on_counts) has been told, from any thread. What it
// is told lives with the observer (the store may outlive this, and tell it of an expiry later).
class CountsSeen {
 public:
  explicit CountsSeen(JobStore& store) {
    store.on_counts([told = told_](const JobStore::Counts& counts) {
      const std::lock_guard lock(told->mutex);
      told->seen.push_back(counts);
    });
  }
  JobStore::Counts last() const {
    const std::lock_guard lock(told_->mutex);
    return told_->seen.back();
  }
  JobStore::Counts first() const {
    const std::lock_guard lock(told_->mutex);
    return told_->seen.front();
  }
  size_t calls() const {
    const std::lock_guard lock(told_->mutex);
    return told_->seen.size();
  }

 private:
  struct Told {
    std::mutex mutex;
    std::vector<JobStore::Counts> seen;
  };
  std::shared_ptr<Told> told_ = std::make_shared<Told>();
};

inline v1::MeshJob job_of(const JobStore::Answer& answer) {
  if (const auto* status = std::get_if<Status>(&answer)) {
    ADD_FAILURE() << "expected a job, got status " << to_string(status->code()) << ": "
                  << status->message();
    return {};
  }
  return std::get<v1::MeshJob>(answer);
}

inline Status status_of(const JobStore::Answer& answer) {
  if (const auto* status = std::get_if<Status>(&answer)) return *status;
  ADD_FAILURE() << "expected a status, got a job in state "
                << std::get<v1::MeshJob>(answer).state();
  return {};
}

// A result of `bytes` encoded bytes, as the executor writes it (with the request's id).
inline v1::GenerateMeshResponse result_of_size(std::size_t bytes,
                                               const std::string& request_id = "r") {
  v1::GenerateMeshResponse response;
  response.set_request_id(request_id);
  response.set_format(v1::MESH_FORMAT_GLB);
  response.set_encoded(std::string(bytes, 'g'));
  return response;
}

// A create through the store's asynchronous interface with an idempotency key, waited for.
inline JobStore::Created create_keyed(JobStore& store, const std::string& owner,
                                      const std::string& key, const std::string& prompt) {
  NewJob job;
  job.owner = owner;
  job.request.set_prompt(prompt);
  job.request_id = "r-" + prompt;
  job.request.set_request_id(job.request_id);
  job.idempotency_key = key;
  job.request_digest = idempotency_digest(job.request);
  auto promise = std::make_shared<std::promise<JobStore::Created>>();
  auto future = promise->get_future();
  store.create(std::move(job),
               [promise](JobStore::Created c) { promise->set_value(std::move(c)); });
  if (future.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "no answer to create";
    return Status(ErrorCode::kInternal, "no answer");
  }
  return future.get();
}

// What both stores promise of idempotency keys: `first` and `retry` are two replicas of one
// store (the same store for the memory one). `discard` drops a job as a refused submit does.
inline void expect_idempotent_creates(JobStore& first, JobStore& retry) {
  const JobStore::Created made = create_keyed(first, "studio", "key-1", "a chair");
  ASSERT_TRUE(std::holds_alternative<std::string>(made));
  const std::string id = std::get<std::string>(made);
  // The same key and request, from anywhere: the job made the first time.
  const JobStore::Created again = create_keyed(retry, "studio", "key-1", "a chair");
  ASSERT_TRUE(std::holds_alternative<ExistingJob>(again));
  EXPECT_EQ(std::get<ExistingJob>(again).id, id);
  // The same key with another request: refused, naming the key and its job.
  const JobStore::Created other = create_keyed(retry, "studio", "key-1", "a lamp");
  ASSERT_TRUE(std::holds_alternative<Status>(other));
  EXPECT_EQ(std::get<Status>(other).code(), ErrorCode::kAlreadyExists);
  EXPECT_NE(std::get<Status>(other).message().find("\"key-1\""), std::string::npos);
  EXPECT_NE(std::get<Status>(other).message().find(id), std::string::npos);
  // Keys are each owner's own.
  EXPECT_TRUE(std::holds_alternative<std::string>(create_keyed(retry, "other", "key-1", "a lamp")));
  // A job that goes (a refused submit's, before any retry was given it) frees its key.
  const JobStore::Created refused = create_keyed(first, "studio", "key-2", "a chair");
  ASSERT_TRUE(std::holds_alternative<std::string>(refused));
  first.discard(std::get<std::string>(refused));
  for (int i = 0; i < 100; ++i) {
    const JobStore::Created after = create_keyed(retry, "studio", "key-2", "a lamp");
    if (std::holds_alternative<std::string>(after)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ADD_FAILURE() << "the discarded job's key was never freed";
}

// Waits for an answer that comes by callback (a failure, and an INTERNAL status, when none
// comes within `timeout`).
template <typename T>
T wait_for(const std::function<void(std::function<void(T)>)>& call,
           std::chrono::milliseconds timeout = std::chrono::milliseconds(10'000)) {
  auto promise = std::make_shared<std::promise<T>>();
  std::future<T> future = promise->get_future();
  call([promise](T value) { promise->set_value(std::move(value)); });
  if (future.wait_for(timeout) != std::future_status::ready) {
    ADD_FAILURE() << "no answer within " << timeout.count() << " ms";
    return T(Status(ErrorCode::kInternal, "no answer"));
  }
  return future.get();
}

// One long-poll's answer, as its `done` saw it, and the thread it came on.
struct Capture {
  std::mutex mutex;
  std::optional<JobStore::Answer> answer;
  int calls = 0;
  std::thread::id thread;

  std::function<void(JobStore::Answer)> done() {
    return [this](JobStore::Answer given) {
      const std::lock_guard lock(mutex);
      answer = std::move(given);
      ++calls;
      thread = std::this_thread::get_id();
    };
  }
  int count() {
    const std::lock_guard lock(mutex);
    return calls;
  }
  JobStore::Answer taken() {
    const std::lock_guard lock(mutex);
    return answer ? *answer : JobStore::Answer(Status(ErrorCode::kInternal, "no answer"));
  }
};

// A well-formed id of the same server run as `like` (its tag), never issued.
inline std::string unknown_id_like(const std::string& like) {
  std::string id = like;
  for (std::size_t i = 8; i < id.size(); ++i) id[i] = id[i] == '0' ? '1' : '0';
  return id;
}

inline v1::Progress stage(v1::Stage value, std::uint32_t tokens_done = 0) {
  v1::Progress progress;
  progress.set_stage(value);
  progress.set_tokens_done(tokens_done);
  return progress;
}

}  // namespace cube3d::testing
