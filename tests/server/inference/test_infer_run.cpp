// An Open Inference Protocol request run on the real service (a scheduler over a fake executor,
// no model) through the endpoint both doors call: a batch as one service call a prompt, its
// answer once every mesh is made, the first failure failing the batch in the protocol's words
// and cancelling the rest, the caller's cancel, progress only when asked, readiness and the
// descriptions, and the statistics every request leaves.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cube3d/scheduler/scheduler.h"
#include "cube3d/server/inference/inference_endpoint.h"
#include "cube3d/server/observability/metrics.h"
#include "cube3d/server/wire/answer_codec.h"
#include "eventually.h"
#include "expect_error.h"
#include "server/inference/infer_builders.h"
#include "server/service/fake_mesh_executor.h"
#include "server/service/service_test_setup.h"

namespace cube3d::inference {
namespace {

using testing::bytes_tensor;
using testing::eventually;
using testing::expect_error;
using testing::infer_request;
using testing::numbers_tensor;

class InferRunTest : public testing::ServiceTest {
 protected:
  InferRunTest() {
    InferenceOptions inference;
    inference.batch_buckets = {1, 2, 4};
    endpoint_ = std::make_unique<InferenceEndpoint>(*service_, inference);
  }

  void attach() {
    ModelIdentity model;
    model.name = "demo";
    model.server_version = "0.1.0 (test)";
    service_->attach(scheduler_.get(), model);
  }

  // Runs `request` to its outcome (progress into progress_).
  InferOutcome run(InferRequest request, CallContext call = {}) {
    std::mutex mutex;
    std::condition_variable done;
    std::optional<InferOutcome> outcome;
    InferObserver observer;
    observer.progress = [this](size_t index, const v1::Progress& p) {
      const std::lock_guard lock(progress_mutex_);
      progress_.emplace_back(index, p.stage());
    };
    observer.done = [&](InferOutcome o) {
      const std::lock_guard lock(mutex);
      EXPECT_FALSE(outcome) << "a second outcome";
      outcome = std::move(o);
      done.notify_all();
    };
    run_ = endpoint_->infer(std::move(request), call, std::move(observer));
    std::unique_lock lock(mutex);
    EXPECT_TRUE(done.wait_for(lock, std::chrono::seconds(30), [&] { return outcome.has_value(); }));
    if (outcome) return std::move(*outcome);
    InferOutcome none;
    none.status = Status(ErrorCode::kInternal, "no outcome");
    return none;
  }

  std::unique_ptr<InferenceEndpoint> endpoint_;
  std::shared_ptr<InferRun> run_;
  std::mutex progress_mutex_;
  std::vector<std::pair<size_t, v1::Stage>> progress_;
};

TEST_F(InferRunTest, WhileLoadingNothingIsReadyAndInferIsUnavailable) {
  EXPECT_FALSE(endpoint_->ready());
  EXPECT_FALSE(endpoint_->model_ready("demo", ""));
  expect_error([&] { endpoint_->describe_for(""); }, ErrorCode::kUnavailable, "loading");
  expect_error([&] { endpoint_->infer(infer_request({bytes_tensor(kPrompt, {"a"})}), {}, {}); },
               ErrorCode::kUnavailable, "loading");
  attach();
  EXPECT_TRUE(endpoint_->ready());
  EXPECT_TRUE(endpoint_->model_ready("demo", "1"));
  EXPECT_FALSE(endpoint_->model_ready("demo", "2"));
  EXPECT_FALSE(endpoint_->model_ready("other", ""));
  EXPECT_EQ(endpoint_->describe_for("").max_batch_size, 4);
  expect_error([&] { endpoint_->describe_for("", "other", ""); }, ErrorCode::kNotFound,
               {"unknown model 'other'", "serves 'demo'"});
  expect_error([&] { endpoint_->describe_for("", "demo", "3"); }, ErrorCode::kNotFound,
               {"no version '3'", "one version is 1"});
  endpoint_->set_draining(true);
  EXPECT_FALSE(endpoint_->ready());
  expect_error([&] { endpoint_->infer(infer_request({bytes_tensor(kPrompt, {"a"})}), {}, {}); },
               ErrorCode::kUnavailable, "draining");
}

TEST_F(InferRunTest, ABatchIsOneCallAPromptAndOneAnswer) {
  attach();
  executor_.vertices = 5;
  InferRequest request = infer_request({bytes_tensor(kPrompt, {"a", "b", "c"}, {3, 1})});
  request.outputs = {kMesh, kVertices};
  const InferOutcome outcome = run(std::move(request));
  ASSERT_TRUE(outcome.status.ok()) << outcome.status.message();
  const auto seen = executor_.seen();
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_TRUE(seen[0].return_raw_mesh);
  ASSERT_EQ(outcome.answer.outputs.size(), 2u);
  EXPECT_EQ(outcome.answer.outputs[0].shape, (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(bytes_elements(outcome.answer.outputs[0].data, 3, "MESH")[2], "ggggg");
  EXPECT_EQ(outcome.answer.outputs[1].shape, (std::vector<int64_t>{3, 5, 3}));
  // One request of three inferences in the statistics, as Triton counts a batch of three.
  const auto stats = endpoint_->statistics();
  EXPECT_EQ(stats.success.count, 1u);
  EXPECT_EQ(stats.inference_count, 3u);
  EXPECT_EQ(stats.queue.count, 1u);
  EXPECT_GT(stats.last_inference_ms, 0u);
  // Progress is only for a request that asks.
  const std::lock_guard lock(progress_mutex_);
  EXPECT_TRUE(progress_.empty());
}

TEST_F(InferRunTest, ProgressComesForARequestThatAsksWithItsPromptsPlace) {
  attach();
  InferRequest request = infer_request({bytes_tensor(kPrompt, {"a", "b"})});
  request.parameters["progress"] = true;
  const InferOutcome outcome = run(std::move(request));
  ASSERT_TRUE(outcome.status.ok()) << outcome.status.message();
  EXPECT_TRUE(outcome.progress);
  const std::lock_guard lock(progress_mutex_);
  bool saw_second = false;
  for (const auto& [index, stage] : progress_) saw_second = saw_second || index == 1;
  EXPECT_TRUE(saw_second);
}

TEST_F(InferRunTest, TheFirstFailingPromptFailsTheBatchInTheProtocolsWords) {
  attach();
  // The second prompt's guidance scale is out of range: the service refuses that one call.
  InferRequest request =
      infer_request({bytes_tensor(kPrompt, {"a", "b"}),
                     numbers_tensor<float>(kGuidanceScale, DataType::kFp32, {1.f, 500.f})});
  const InferOutcome outcome = run(std::move(request));
  EXPECT_EQ(outcome.status.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(outcome.status.message().rfind("PROMPT[1]: input GUIDANCE_SCALE: guidance_scale", 0),
            0u)
      << outcome.status.message();
  EXPECT_GE(endpoint_->statistics().fail.count, 1u);
}

// As Triton counts a batch: one failed request, whatever its prompts did (the first computed,
// the second refused), and one for a batch the caller cancelled.
TEST_F(InferRunTest, AFailedOrCancelledBatchIsOneFailedRequestInTheStatistics) {
  attach();
  const InferOutcome refused =
      run(infer_request({bytes_tensor(kPrompt, {"a", "b"}),
                         numbers_tensor<float>(kGuidanceScale, DataType::kFp32, {1.f, 500.f})}));
  EXPECT_EQ(refused.status.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(endpoint_->statistics().fail.count, 1u);
  EXPECT_EQ(endpoint_->statistics().success.count, 0u);

  executor_.hold = true;
  InferObserver observer;
  observer.done = [](InferOutcome) {};
  const auto active =
      endpoint_->infer(infer_request({bytes_tensor(kPrompt, {"c", "d"})}), {}, std::move(observer));
  ASSERT_TRUE(eventually([&] { return executor_.held_count() == 2; }));
  active->cancel(Status(ErrorCode::kCancelled, "the client went away"));
  ASSERT_TRUE(eventually([&] { return endpoint_->statistics().fail.count == 2; }));
  EXPECT_EQ(endpoint_->statistics().success.count, 0u);
}

TEST_F(InferRunTest, TheCallersCancelEndsEveryPromptsWork) {
  attach();
  executor_.hold = true;
  std::mutex mutex;
  std::optional<InferOutcome> outcome;
  InferObserver observer;
  observer.done = [&](InferOutcome o) {
    const std::lock_guard lock(mutex);
    outcome = std::move(o);
  };
  const auto active =
      endpoint_->infer(infer_request({bytes_tensor(kPrompt, {"a", "b"})}), {}, std::move(observer));
  ASSERT_TRUE(eventually([&] { return executor_.held_count() == 2; }));
  EXPECT_FALSE(active->finished());
  active->cancel(Status(ErrorCode::kCancelled, "the client went away"));
  ASSERT_TRUE(eventually([&] {
    const std::lock_guard lock(mutex);
    return outcome.has_value();
  }));
  EXPECT_TRUE(active->finished());
  EXPECT_EQ(outcome->status.code(), ErrorCode::kCancelled);
  EXPECT_EQ(outcome->status.message(), "the client went away");
  EXPECT_TRUE(executor_.held_job(0)->cancelled());
  EXPECT_TRUE(executor_.held_job(1)->cancelled());
}

// The observer is told outside the run's locks: a report may cancel its own run (the stream
// door would, on a write that failed). The outcome comes once that report returns, after the
// prompt whose report it was has ended too.
TEST_F(InferRunTest, AnObserverMayCancelItsRunFromAProgressReport) {
  attach();
  executor_.hold = true;
  std::mutex mutex;
  std::vector<std::string> seen;
  std::shared_ptr<ActiveCall> handle;
  InferObserver observer;
  observer.progress = [&](size_t index, const v1::Progress& p) {
    std::shared_ptr<ActiveCall> run;
    {
      const std::lock_guard lock(mutex);
      seen.push_back(std::to_string(index) + " " + v1::Stage_Name(p.stage()));
      if (p.stage() == v1::STAGE_DECODING) run = handle;
    }
    if (!run) return;
    run->cancel(Status(ErrorCode::kCancelled, "the stream's write failed"));
    const std::lock_guard lock(mutex);
    seen.push_back("report returns");
  };
  observer.done = [&](InferOutcome o) {
    const std::lock_guard lock(mutex);
    seen.push_back("done " + std::string(to_string(o.status.code())) + ": " + o.status.message());
  };
  InferRequest request = infer_request({bytes_tensor(kPrompt, {"a", "b"})});
  request.parameters["progress"] = true;
  {
    auto active = endpoint_->infer(std::move(request), {}, std::move(observer));
    const std::lock_guard lock(mutex);
    handle = std::move(active);
  }
  ASSERT_TRUE(eventually([&] { return executor_.held_count() == 2; }));
  TaskProgress decoding;
  decoding.stage = TaskStage::kDecoding;
  executor_.held_job(1)->progress(decoding);
  ASSERT_TRUE(eventually([&] { return handle->finished(); }));
  executor_.held_job(0)->progress(decoding);  // after the outcome: not told
  const std::lock_guard lock(mutex);
  ASSERT_GE(seen.size(), 3u);
  EXPECT_EQ(seen[seen.size() - 3], "1 STAGE_DECODING");
  EXPECT_EQ(seen[seen.size() - 2], "report returns");
  EXPECT_EQ(seen.back(), "done CANCELLED: the stream's write failed");
  EXPECT_TRUE(executor_.held_job(0)->cancelled());
  EXPECT_TRUE(executor_.held_job(1)->cancelled());
}

TEST_F(InferRunTest, TheTimeoutParameterIsTheCallsDeadline) {
  attach();
  executor_.hold = true;
  InferRequest request = infer_request({bytes_tensor(kPrompt, {"a"})});
  request.parameters["timeout"] = int64_t{50'000};  // microseconds
  const InferOutcome outcome = run(std::move(request));
  EXPECT_EQ(outcome.status.code(), ErrorCode::kDeadlineExceeded) << outcome.status.message();
}

TEST_F(InferRunTest, ARequestRefusedBeforeAnyWorkThrowsAndStartsNothing) {
  attach();
  expect_error(
      [&] { endpoint_->infer(infer_request({bytes_tensor(kPrompt, {"a"})}, "other"), {}, {}); },
      ErrorCode::kNotFound, "unknown model 'other'");
  expect_error([&] { endpoint_->infer(infer_request({}), {}, {}); }, ErrorCode::kInvalidArgument,
               "input PROMPT is missing");
  EXPECT_TRUE(executor_.seen().empty());
}

}  // namespace
}  // namespace cube3d::inference
