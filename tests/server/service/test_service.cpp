// The service core without a network: a real scheduler over a fake executor, calls made
// directly on the core (what the gRPC and HTTP front doors call). Covers what the end-to-end tests
// cannot reach cheaply: the response size limit, the answers before the model is ready, and the
// completion contract (one outcome, progress before it, none after, on whichever thread).
#include <gtest/gtest.h>

#include <array>
#include <cctype>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cube3d/scheduler/scheduler.h"
#include "cube3d/server/admission/api_keys.h"
#include "cube3d/server/admission/end_user.h"
#include "cube3d/server/admission/prompt_policy.h"
#include "cube3d/server/cache/result_cache.h"
#include "cube3d/server/observability/metrics.h"
#include "cube3d/server/service/service.h"
#include "cube3d/server/wire/answer_codec.h"
#include "cube3d/server/wire/progress_codec.h"
#include "cube3d/server/wire/request_codec.h"
#include "eventually.h"
#include "server/service/fake_mesh_executor.h"
#include "server/service/service_test_setup.h"

namespace cube3d {
namespace test_service {

using testing::eventually;
using testing::FakeMeshExecutor;

class MeshServiceTest : public testing::ServiceTest {
 protected:
  // A front door that waits: starts the call and blocks until its outcome (the trailers the
  // core asked for are kept in `trailers_`).
  Status call(const v1::GenerateMeshRequest& request, v1::GenerateMeshResponse* response,
              const CallContext& context = {}) {
    std::mutex mutex;
    std::condition_variable done;
    std::optional<CallOutcome> outcome;
    CallObserver observer;
    observer.done = [&](CallOutcome o) {
      const std::lock_guard lock(mutex);
      outcome = std::move(o);
      done.notify_all();
    };
    const auto active = service_->start(client_request_of(request), context, std::move(observer));
    std::unique_lock lock(mutex);
    EXPECT_TRUE(done.wait_for(lock, std::chrono::seconds(30), [&] { return outcome.has_value(); }))
        << "no outcome within 30 s";
    if (!outcome) return Status(ErrorCode::kInternal, "no outcome");
    EXPECT_TRUE(active->finished());
    for (const auto& [k, v] : outcome->trailers) trailers_[k] = v;
    if (outcome->status.ok()) *response = response_message(outcome->answer);
    return outcome->status;
  }

  Status call_with(const CallContext& context, v1::GenerateMeshResponse* response) {
    return call(request(v1::MESH_FORMAT_GLB), response, context);
  }

  // A call that presents the API key `secret`.
  static CallContext bearer(const std::string& secret) {
    CallContext context;
    context.authorization = "Bearer " + secret;
    return context;
  }

  // Expects `status` to be `code`, with a message that mentions each of `needles`.
  static void expect_status(const Status& status, ErrorCode code,
                            std::initializer_list<std::string_view> needles) {
    EXPECT_EQ(status.code(), code) << status.message();
    for (const std::string_view needle : needles) {
      EXPECT_NE(status.message().find(needle), std::string::npos)
          << "no '" << needle << "' in: " << status.message();
    }
  }

  static v1::GenerateMeshRequest request(v1::MeshFormat format) {
    v1::GenerateMeshRequest r;
    r.set_prompt("a chair");
    r.set_format(format);
    return r;
  }

  std::map<std::string, std::string> trailers_;
};

TEST_F(MeshServiceTest, AnswersUnavailableUntilTheModelIsReady) {
  v1::GenerateMeshResponse response;
  expect_status(call(request(v1::MESH_FORMAT_GLB), &response), ErrorCode::kUnavailable,
                {"loading"});
}

TEST_F(MeshServiceTest, ReturnsTheMeshOnceAttached) {
  service_->attach(scheduler_.get());
  v1::GenerateMeshResponse response;
  const Status status = call(request(v1::MESH_FORMAT_RAW), &response);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(response.raw().vertices_size(), 9);
  EXPECT_EQ(response.raw().indices_size(), 3);
  EXPECT_EQ(response.batch_bucket(), 1u);
  EXPECT_EQ(response.request_id().size(), 32u);  // generated
}

TEST_F(MeshServiceTest, AFileAnswerCarriesTheArraysOnlyWhenAskedFor) {
  service_->attach(scheduler_.get());
  v1::GenerateMeshResponse response;
  ASSERT_TRUE(call(request(v1::MESH_FORMAT_GLB), &response).ok());
  EXPECT_EQ(response.encoded().size(), 3u);
  EXPECT_FALSE(response.has_raw());
  v1::GenerateMeshRequest both = request(v1::MESH_FORMAT_GLB);
  both.set_return_raw_mesh(true);
  ASSERT_TRUE(call(both, &response).ok());
  EXPECT_EQ(response.encoded().size(), 3u);  // the file, and from the same work its arrays
  EXPECT_EQ(response.raw().vertices_size(), 9);
  EXPECT_EQ(response.raw().indices_size(), 3);
  EXPECT_TRUE(executor_.seen().back().return_raw_mesh);
}

TEST_F(MeshServiceTest, InvalidRequestsNeverReachTheScheduler) {
  service_->attach(scheduler_.get());
  v1::GenerateMeshRequest bad = request(v1::MESH_FORMAT_GLB);
  bad.set_top_p(2.0f);
  v1::GenerateMeshResponse response;
  expect_status(call(bad, &response), ErrorCode::kInvalidArgument, {"top_p"});
}

TEST_F(MeshServiceTest, AMeshOverTheMessageLimitIsResourceExhaustedAndSaysHowToAskForLess) {
  service_->attach(scheduler_.get());
  executor_.vertices = 200'000;  // 2.4 MB of raw floats, over the 1 MiB limit
  v1::GenerateMeshResponse response;
  expect_status(call(request(v1::MESH_FORMAT_RAW), &response), ErrorCode::kResourceExhausted,
                {"1048576", "resolution_base", "target_face_count"});
  EXPECT_EQ(response.ByteSizeLong(), 0u);  // nothing half-filled goes out
}

TEST_F(MeshServiceTest, ExecutorErrorsKeepTheirStatus) {
  service_->attach(scheduler_.get());
  executor_.error = failed_precondition("no CLIP text encoder");
  v1::GenerateMeshResponse response;
  expect_status(call(request(v1::MESH_FORMAT_GLB), &response), ErrorCode::kFailedPrecondition,
                {"CLIP"});
}

TEST_F(MeshServiceTest, ACallerThatLeftGetsTheStatusItsTransportSaysAndTheJobIsCancelled) {
  service_->attach(scheduler_.get());
  executor_.hold = true;
  std::mutex mutex;
  std::optional<CallOutcome> outcome;
  int outcomes = 0;
  CallObserver observer;
  observer.done = [&](CallOutcome o) {
    const std::lock_guard lock(mutex);
    ++outcomes;
    outcome = std::move(o);
  };
  const auto active =
      service_->start(client_request_of(request(v1::MESH_FORMAT_GLB)), {}, observer);
  ASSERT_TRUE(eventually([&] { return executor_.held_count() == 1; }));
  EXPECT_FALSE(active->finished());
  active->cancel(Status(ErrorCode::kCancelled, "the client closed the connection"));
  EXPECT_TRUE(active->finished());
  {
    const std::lock_guard lock(mutex);
    ASSERT_TRUE(outcome);
    EXPECT_EQ(outcome->status.code(), ErrorCode::kCancelled);
    EXPECT_EQ(outcome->status.message(), "the client closed the connection");
  }
  EXPECT_TRUE(executor_.held_job(0)->cancelled());
  // The job's own end, later, and a second cancel change nothing: one outcome per call.
  executor_.held_job(0)->fail(cancelled("the request was cancelled"));
  active->cancel(Status(ErrorCode::kDeadlineExceeded, "late"));
  const std::lock_guard lock(mutex);
  EXPECT_EQ(outcomes, 1);
  EXPECT_EQ(outcome->status.code(), ErrorCode::kCancelled);
}

TEST_F(MeshServiceTest, ProgressComesInOrderBeforeTheOutcomeAndNeverAfter) {
  service_->attach(scheduler_.get());
  executor_.hold = true;
  std::mutex mutex;
  std::vector<std::string> seen;
  CallObserver observer;
  observer.progress = [&](const TaskProgress& event) {
    const v1::Progress p = progress_message(event);
    const std::lock_guard lock(mutex);
    seen.push_back("progress " + std::string(v1::Stage_Name(p.stage())));
  };
  observer.done = [&](CallOutcome o) {
    const std::lock_guard lock(mutex);
    seen.push_back("done " + std::to_string(canonical_code(o.status.code())));
  };
  const auto active =
      service_->start(client_request_of(request(v1::MESH_FORMAT_GLB)), {}, observer);
  ASSERT_TRUE(eventually([&] { return executor_.held_count() == 1; }));
  TaskProgress decoding;
  decoding.stage = TaskStage::kDecoding;
  executor_.held_job(0)->progress(decoding);
  active->cancel(Status(ErrorCode::kCancelled, "gone"));
  executor_.held_job(0)->progress(decoding);  // after the outcome: dropped
  const std::lock_guard lock(mutex);
  EXPECT_EQ(seen, (std::vector<std::string>{"progress STAGE_QUEUED", "progress STAGE_DECODING",
                                            "done 1"}));
}

// The observer is told outside the call's lock: it may call back into its call (here cancel()
// from a progress event, which ends the call while that event is being told). The outcome is
// told once, after the progress event returns; before, this deadlocked on the call's mutex.
TEST_F(MeshServiceTest, AnObserverMayCancelItsCallFromAProgressEvent) {
  service_->attach(scheduler_.get());
  executor_.hold = true;
  std::mutex mutex;
  std::vector<std::string> seen;
  std::shared_ptr<ActiveCall> handle;
  CallObserver observer;
  observer.progress = [&](const TaskProgress& event) {
    const v1::Progress p = progress_message(event);
    std::shared_ptr<ActiveCall> call;
    {
      const std::lock_guard lock(mutex);
      seen.push_back("progress " + std::string(v1::Stage_Name(p.stage())));
      if (p.stage() == v1::STAGE_DECODING) call = handle;
    }
    if (call) {
      EXPECT_FALSE(call->finished());
      call->cancel(Status(ErrorCode::kCancelled, "the client went away mid-stream"));
      EXPECT_TRUE(call->finished());
      const std::lock_guard lock(mutex);
      seen.push_back("progress returns");
    }
  };
  observer.done = [&](CallOutcome o) {
    const std::lock_guard lock(mutex);
    seen.push_back("done " + std::to_string(canonical_code(o.status.code())));
  };
  {
    auto active = service_->start(client_request_of(request(v1::MESH_FORMAT_GLB)), {}, observer);
    const std::lock_guard lock(mutex);
    handle = std::move(active);
  }
  ASSERT_TRUE(eventually([&] { return executor_.held_count() == 1; }));
  TaskProgress decoding;
  decoding.stage = TaskStage::kDecoding;
  executor_.held_job(0)->progress(decoding);
  executor_.held_job(0)->progress(decoding);  // after the outcome: dropped
  const std::lock_guard lock(mutex);
  EXPECT_EQ(seen, (std::vector<std::string>{"progress STAGE_QUEUED", "progress STAGE_DECODING",
                                            "progress returns", "done 1"}));
  EXPECT_TRUE(handle->finished());
}

TEST_F(MeshServiceTest, ACallThatEndsAtOnceIsDeliveredInsideStart) {
  // Not ready: the outcome comes before start() returns, and the handle says so.
  bool delivered = false;
  CallObserver observer;
  observer.done = [&](CallOutcome o) {
    delivered = true;
    EXPECT_EQ(o.status.code(), ErrorCode::kUnavailable);
  };
  const auto active =
      service_->start(client_request_of(request(v1::MESH_FORMAT_GLB)), {}, observer);
  EXPECT_TRUE(delivered);
  EXPECT_TRUE(active->finished());
}

TEST_F(MeshServiceTest, TheCallersDeadlineIsDeadlineExceeded) {
  service_->attach(scheduler_.get());
  executor_.hold = true;
  CallContext call;
  call.deadline = SteadyClock::now() + std::chrono::milliseconds(50);
  v1::GenerateMeshResponse response;
  const Status status = call_with(call, &response);
  EXPECT_EQ(status.code(), ErrorCode::kDeadlineExceeded);
  ASSERT_EQ(executor_.held_count(), 1u);
  EXPECT_TRUE(executor_.held_job(0)->cancelled());
}

TEST_F(MeshServiceTest, WithApiKeysACallNeedsAKnownKeyWithinItsLimits) {
  service_->attach(scheduler_.get());
  ApiKey studio;
  studio.name = "studio-a";
  studio.sha256 = sha256("key-a");
  studio.requests_per_minute = 2;
  ApiKeys keys({studio});
  service_->use_api_keys(&keys);
  v1::GenerateMeshResponse response;
  CallContext context;
  EXPECT_EQ(call_with(context, &response).code(), ErrorCode::kUnauthenticated);
  context.authorization = "Bearer wrong";
  EXPECT_EQ(call_with(context, &response).code(), ErrorCode::kUnauthenticated);

  context.authorization = "Bearer key-a";
  const Status ok = call_with(context, &response);
  ASSERT_TRUE(ok.ok()) << ok.message();
  // The scheme is case-insensitive (RFC 9110); the key is not.
  context.authorization = "bearer key-a";
  const Status lower = call_with(context, &response);
  ASSERT_TRUE(lower.ok()) << lower.message();
  context.authorization = "Bearer KEY-A";
  EXPECT_EQ(call_with(context, &response).code(), ErrorCode::kUnauthenticated);
  context.authorization = "Bearer key-a";
  const Status over = call_with(context, &response);
  EXPECT_EQ(over.code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(over.message().find("requests_per_minute"), std::string::npos);
  EXPECT_EQ(trailers_["retry-after"], "30");
  // An unauthenticated caller learns nothing about its request: no validation ran.
  v1::GenerateMeshRequest bad = request(v1::MESH_FORMAT_GLB);
  bad.set_top_p(7.0f);
  EXPECT_EQ(call(bad, &response).code(), ErrorCode::kUnauthenticated);
  service_->use_api_keys(nullptr);
}

ApiKey named_key(const std::string& name, const std::string& secret) {
  ApiKey key;
  key.name = name;
  key.sha256 = sha256(secret);
  return key;
}

TEST_F(MeshServiceTest, ShapeTokensAreNeededAtAdmissionAndChargedWhenTheWorkIsDone) {
  service_->attach(scheduler_.get());
  ApiKey studio = named_key("studio-a", "key-a");
  studio.shape_tokens_per_minute = 256;  // two requests with guidance: 2 x 64 tokens each
  ApiKeys keys({studio});
  service_->use_api_keys(&keys);
  CallContext context = bearer("key-a");
  v1::GenerateMeshResponse response;
  ASSERT_TRUE(call_with(context, &response).ok());
  ASSERT_TRUE(call_with(context, &response).ok());
  const Status over = call_with(context, &response);
  EXPECT_EQ(over.code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(over.message().find("shape_tokens_per_minute (256)"), std::string::npos)
      << over.message();
  EXPECT_NE(over.message().find("needs 128 shape tokens"), std::string::npos);
  EXPECT_GE(std::stoi(trailers_["retry-after"]), 1);
  // Without guidance a request decodes one row: 64 tokens, still more than is left.
  v1::GenerateMeshRequest unguided = request(v1::MESH_FORMAT_GLB);
  unguided.set_guidance_scale(0);
  const Status still_over = call(unguided, &response, context);
  EXPECT_NE(still_over.message().find("needs 64 shape tokens"), std::string::npos)
      << still_over.message();

  const Metrics::KeyUsage usage = metrics_.key_usage("studio-a");
  EXPECT_EQ(usage.shape_tokens, 256);
  EXPECT_EQ(usage.occupancy_points, 2000);
  EXPECT_EQ(usage.mesh_bytes, 2 * 3);  // the fake's 3-byte files
  EXPECT_EQ(usage.requests_by_code.at("OK"), 2);
  EXPECT_EQ(usage.requests_by_code.at("RESOURCE_EXHAUSTED"), 2);
  EXPECT_EQ(executor_.seen().size(), 2u) << "a refused request never reached the executor";
  service_->use_api_keys(nullptr);
}

TEST_F(MeshServiceTest, EndUsersReachTheSchedulerAsPseudonymsAndBadIdsAreRefused) {
  service_->attach(scheduler_.get());
  CallContext context;
  context.end_user = "player:42";
  v1::GenerateMeshResponse response;
  ASSERT_TRUE(call_with(context, &response).ok());
  context.end_user = "player:43";
  ASSERT_TRUE(call_with(context, &response).ok());
  const std::vector<WorkRequest> seen = executor_.seen();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].end_user, end_user_pseudonym("", "player:42"));
  EXPECT_EQ(seen[0].end_user.find("player"), std::string::npos);
  EXPECT_NE(seen[0].end_user, seen[1].end_user);

  context.end_user = "player 42\n";
  const Status bad = call_with(context, &response);
  EXPECT_EQ(bad.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("X-End-User-Id"), std::string::npos) << bad.message();
  EXPECT_EQ(metrics_.key_usage("").requests_by_code.at("INVALID_ARGUMENT"), 1);

  // Sent empty is not "no end user" (it would escape the per-user limits): refused.
  context.end_user = "";
  context.end_user_count = 1;
  const Status empty = call_with(context, &response);
  EXPECT_EQ(empty.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(empty.message().find("empty"), std::string::npos) << empty.message();
  // Sent twice (a client's own before the one a proxy appends): refused, whichever is valid.
  context.end_user = "player:42";
  context.end_user_count = 2;
  const Status twice = call_with(context, &response);
  EXPECT_EQ(twice.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(twice.message().find("sent 2 times"), std::string::npos) << twice.message();
  EXPECT_NE(twice.message().find("end-user-id"), std::string::npos) << twice.message();
  EXPECT_EQ(executor_.seen().size(), 2u);
}

TEST_F(MeshServiceTest, PriorityComesFromTheRequestOrIsForcedByTheKey) {
  service_->attach(scheduler_.get());
  ApiKey batch = named_key("catalog", "key-c");
  batch.batch_only = true;
  ApiKeys keys({named_key("studio-a", "key-a"), batch});
  service_->use_api_keys(&keys);
  CallContext context = bearer("key-a");
  v1::GenerateMeshResponse response;
  v1::GenerateMeshRequest r = request(v1::MESH_FORMAT_GLB);
  ASSERT_TRUE(call(r, &response, context).ok());
  r.set_priority(v1::PRIORITY_BATCH);
  ASSERT_TRUE(call(r, &response, context).ok());
  context.authorization = "Bearer key-c";
  r.set_priority(v1::PRIORITY_INTERACTIVE);
  ASSERT_TRUE(call(r, &response, context).ok());
  const std::vector<WorkRequest> seen = executor_.seen();
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].priority, TaskPriority::kInteractive);
  EXPECT_EQ(seen[1].priority, TaskPriority::kBatch);
  EXPECT_EQ(seen[2].priority, TaskPriority::kBatch) << "the key runs everything as batch";

  r.set_priority(static_cast<v1::Priority>(7));
  const Status bad = call(r, &response, context);
  EXPECT_EQ(bad.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("priority 7"), std::string::npos) << bad.message();
  service_->use_api_keys(nullptr);
}

TEST_F(MeshServiceTest, ThePromptPolicyRefusesWhatTheModelWouldReadBeforeAnyWork) {
  ServiceOptions options = service_->options();
  // As the server's: the model's own clean-up (here, lower case is enough to show it is used).
  options.model_text = [](std::string_view prompt) {
    std::string text(prompt);
    for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return text;
  };
  service_ = std::make_unique<Service>(options, metrics_, answer_codec_);
  service_->attach(scheduler_.get());
  PromptPolicy policy(PromptDenylist::parse("# no weapons\nforbidden thing\n", "deny.txt"));
  service_->use_prompt_policy(&policy);
  v1::GenerateMeshResponse response;
  v1::GenerateMeshRequest r = request(v1::MESH_FORMAT_GLB);
  r.set_prompt("A FORBIDDEN THING on a table");
  const Status refused = call(r, &response);
  EXPECT_EQ(refused.code(), ErrorCode::kPermissionDenied);
  EXPECT_EQ(refused.message(), std::string(PromptPolicy::kRefusal));
  EXPECT_EQ(refused.message().find("forbidden"), std::string::npos) << "names the pattern";
  EXPECT_TRUE(executor_.seen().empty());
  r.set_prompt("a permitted thing");
  EXPECT_TRUE(call(r, &response).ok());
  const Metrics::KeyUsage usage = metrics_.key_usage("");
  EXPECT_EQ(usage.prompt_refusals, 1);
  EXPECT_EQ(usage.requests_by_code.at("PERMISSION_DENIED"), 1);
  EXPECT_EQ(usage.shape_tokens, 128) << "the refused prompt cost no tokens";
  service_->use_prompt_policy(nullptr);
}

// The result cache: hits, coalescing of identical calls in flight, and the bypass.
class MeshServiceCacheTest : public MeshServiceTest {
 protected:
  MeshServiceCacheTest() : cache_(ResultCacheOptions{}) {
    ServiceOptions options = testing::test_service_options();
    options.cache_enabled = true;
    service_ = std::make_unique<Service>(options, metrics_, answer_codec_);
    service_->use_cache(&cache_);
    service_->attach(scheduler_.get(), ModelIdentity{"demo", "w", "c", "v"});
  }

  struct Pending {
    std::mutex mutex;
    std::optional<ResponseOutcome> outcome;  // the answer as the API's message
    std::vector<v1::Progress> progress;
    std::shared_ptr<ActiveCall> active;
    bool done() {
      const std::lock_guard lock(mutex);
      return outcome.has_value();
    }
  };
  std::shared_ptr<Pending> start(const v1::GenerateMeshRequest& r, const CallContext& c = {}) {
    auto pending = std::make_shared<Pending>();
    CallObserver observer;
    observer.done = [pending](CallOutcome o) {
      const std::lock_guard lock(pending->mutex);
      pending->outcome = response_outcome(std::move(o));
    };
    observer.progress = [pending](const TaskProgress& p) {
      const std::lock_guard lock(pending->mutex);
      pending->progress.push_back(progress_message(p));
    };
    pending->active = service_->start(client_request_of(r), c, std::move(observer));
    return pending;
  }
  // The held job's outcome, as the fake executor would have made it.
  void release(size_t i) {
    const auto job = executor_.held_job(i);
    WorkResult result;
    result.request_id = job->ticket().request_id;
    result.format = job->payload<WorkRequest>().format;
    result.encoded = "mesh of " + job->payload<WorkRequest>().prompt;
    result.vertex_count = 3;
    result.face_count = 1;
    job->succeed(std::move(result));
  }
  double cache_metric(const std::string& result) {
    const std::string text = metrics_.exposition();
    const std::string name = "cube3d_cache_requests_total{result=\"" + result + "\"} ";
    const size_t at = text.find(name);
    return at == std::string::npos ? -1 : std::stod(text.substr(at + name.size()));
  }

  ResultCache cache_;
};

TEST_F(MeshServiceCacheTest, IdenticalCallsInFlightShareOneComputationThenHitTheCache) {
  executor_.hold = true;
  v1::GenerateMeshRequest r = request(v1::MESH_FORMAT_GLB);
  std::vector<std::shared_ptr<Pending>> calls;
  for (int i = 0; i < 5; ++i) {
    r.set_request_id("call-" + std::to_string(i));
    calls.push_back(start(r));
  }
  ASSERT_TRUE(eventually([&] { return executor_.held_count() == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(executor_.held_count(), 1u);  // one computation for the five
  release(0);
  for (const auto& call : calls) ASSERT_TRUE(eventually([&] { return call->done(); }));
  int misses = 0;
  for (size_t i = 0; i < calls.size(); ++i) {
    const ResponseOutcome& o = *calls[i]->outcome;
    ASSERT_TRUE(o.status.ok()) << o.status.message();
    EXPECT_EQ(o.response.encoded(), "mesh of a chair");
    EXPECT_EQ(o.response.request_id(), "call-" + std::to_string(i));  // each its own id
    EXPECT_EQ(o.response.effective().computed_by_request_id(), "call-0");
    misses += o.response.cache_status() == v1::CACHE_STATUS_MISS;
    if (i > 0) {
      EXPECT_EQ(o.response.cache_status(), v1::CACHE_STATUS_COALESCED);
    }
  }
  EXPECT_EQ(misses, 1);
  EXPECT_EQ(cache_metric("miss"), 1);
  EXPECT_EQ(cache_metric("coalesced"), 4);

  // Afterwards: a hit, answered inside start(), with the first computation's bytes.
  r.set_request_id("later");
  const auto hit = start(r);
  ASSERT_TRUE(hit->done());
  EXPECT_EQ(hit->outcome->response.cache_status(), v1::CACHE_STATUS_HIT);
  EXPECT_EQ(hit->outcome->response.encoded(), "mesh of a chair");
  EXPECT_EQ(hit->outcome->response.request_id(), "later");
  EXPECT_EQ(hit->outcome->response.effective().computed_by_request_id(), "call-0");
  EXPECT_EQ(hit->outcome->response.effective().model(), "demo");
  EXPECT_EQ(executor_.held_count(), 1u);
  EXPECT_EQ(cache_metric("hit"), 1);
}

// Issue 58: a job answered from the cache read JOB_STATE_SUCCEEDED with progress STAGE_QUEUED and
// no tokens; a hit now ends with the progress a computed answer ends with (done, every token).
TEST_F(MeshServiceCacheTest, AHitEndsWithTheProgressOfADoneComputation) {
  executor_.hold = true;
  v1::GenerateMeshRequest r = request(v1::MESH_FORMAT_GLB);
  const auto first = start(r);
  ASSERT_TRUE(eventually([&] { return executor_.held_count() == 1; }));
  release(0);
  ASSERT_TRUE(eventually([&] { return first->done(); }));
  const auto hit = start(r);
  ASSERT_TRUE(hit->done());
  ASSERT_EQ(hit->outcome->response.cache_status(), v1::CACHE_STATUS_HIT);
  ASSERT_EQ(hit->progress.size(), 1u);
  const v1::Progress& last = hit->progress.back();
  EXPECT_EQ(last.stage(), v1::STAGE_DONE);
  EXPECT_GT(last.tokens_total(), 0u);
  EXPECT_EQ(last.tokens_done(), last.tokens_total());
  EXPECT_EQ(last.tokens_total(), static_cast<uint32_t>(service_->options().tokens_per_shape));
}

TEST_F(MeshServiceCacheTest, TheWorkStopsOnlyWhenEveryCallerHasGone) {
  executor_.hold = true;
  const auto first = start(request(v1::MESH_FORMAT_GLB));
  ASSERT_TRUE(eventually([&] { return executor_.held_count() == 1; }));
  const auto second = start(request(v1::MESH_FORMAT_GLB));
  first->active->cancel(Status(ErrorCode::kCancelled, "first gone"));
  EXPECT_FALSE(executor_.held_job(0)->cancelled());  // the second still waits for it
  EXPECT_FALSE(second->done());
  second->active->cancel(Status(ErrorCode::kCancelled, "second gone"));
  EXPECT_TRUE(executor_.held_job(0)->cancelled());
  EXPECT_EQ(first->outcome->status.message(), "first gone");
  EXPECT_EQ(second->outcome->status.message(), "second gone");
  // A call after that does not join the cancelled work: it gets a computation of its own.
  const auto third = start(request(v1::MESH_FORMAT_GLB));
  ASSERT_TRUE(eventually([&] { return executor_.held_count() == 2; }));
  release(1);
  ASSERT_TRUE(eventually([&] { return third->done(); }));
  EXPECT_EQ(third->outcome->response.cache_status(), v1::CACHE_STATUS_MISS);
}

TEST_F(MeshServiceCacheTest, EachCallerKeepsItsOwnDeadlineAndALaterOneExtendsTheWork) {
  executor_.hold = true;
  CallContext soon;
  soon.deadline = SteadyClock::now() + std::chrono::milliseconds(50);
  CallContext later;
  later.deadline = SteadyClock::now() + std::chrono::seconds(60);
  const auto hurried = start(request(v1::MESH_FORMAT_GLB), soon);
  ASSERT_TRUE(eventually([&] { return executor_.held_count() == 1; }));
  const auto patient = start(request(v1::MESH_FORMAT_GLB), later);
  EXPECT_GE(executor_.held_job(0)->deadline(), later.deadline);
  ASSERT_TRUE(eventually([&] { return hurried->done(); }));
  EXPECT_EQ(hurried->outcome->status.code(), ErrorCode::kDeadlineExceeded);
  EXPECT_FALSE(executor_.held_job(0)->cancelled());
  release(0);
  ASSERT_TRUE(eventually([&] { return patient->done(); }));
  EXPECT_TRUE(patient->outcome->status.ok());
  EXPECT_EQ(patient->outcome->response.cache_status(), v1::CACHE_STATUS_COALESCED);
}

TEST_F(MeshServiceCacheTest, ABypassComputesAloneAndStoresNothing) {
  executor_.hold = true;
  v1::GenerateMeshRequest r = request(v1::MESH_FORMAT_GLB);
  const auto plain = start(r);
  r.set_bypass_cache(true);
  const auto fresh = start(r);
  ASSERT_TRUE(eventually([&] { return executor_.held_count() == 2; }));
  release(0);
  release(1);
  ASSERT_TRUE(eventually([&] { return plain->done() && fresh->done(); }));
  EXPECT_EQ(fresh->outcome->response.cache_status(), v1::CACHE_STATUS_BYPASS);
  EXPECT_EQ(cache_.stats().memory_entries, 1);  // the plain call's result only
  EXPECT_EQ(cache_metric("bypass"), 1);
  // Other parameters are another entry.
  v1::GenerateMeshRequest other = request(v1::MESH_FORMAT_GLB);
  other.set_seed(7);
  const auto third = start(other);
  ASSERT_TRUE(eventually([&] { return executor_.held_count() == 3; }));
  release(2);
  ASSERT_TRUE(eventually([&] { return third->done(); }));
  EXPECT_EQ(third->outcome->response.cache_status(), v1::CACHE_STATUS_MISS);
}

TEST_F(MeshServiceCacheTest, AHitOrACoalescedAnswerPassesASpentWorkBudget) {
  ApiKey studio = named_key("studio-a", "key-a");
  studio.shape_tokens_per_minute = 128;  // one request with guidance
  ApiKeys keys({studio});
  service_->use_api_keys(&keys);
  CallContext context = bearer("key-a");
  v1::GenerateMeshResponse response;
  v1::GenerateMeshRequest chair = request(v1::MESH_FORMAT_GLB);
  ASSERT_TRUE(call(chair, &response, context).ok());
  EXPECT_EQ(response.cache_status(), v1::CACHE_STATUS_MISS);
  // The budget is spent: the same request is a hit and costs nothing, another one computes.
  ASSERT_TRUE(call(chair, &response, context).ok());
  EXPECT_EQ(response.cache_status(), v1::CACHE_STATUS_HIT);
  v1::GenerateMeshRequest table = request(v1::MESH_FORMAT_GLB);
  table.set_prompt("a table");
  const Status over = call(table, &response, context);
  EXPECT_EQ(over.code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(over.message().find("shape_tokens_per_minute (128)"), std::string::npos);
  EXPECT_EQ(metrics_.key_usage("studio-a").shape_tokens, 128);
  EXPECT_EQ(executor_.seen().size(), 1u);

  // Identical work in flight is joined without a check, then charged once.
  keys.replace({named_key("studio-a", "key-a")});
  executor_.hold = true;
  const auto first = start(table, context);
  ASSERT_TRUE(eventually([&] { return executor_.held_count() == 1; }));
  studio.shape_tokens_per_minute = 1;
  keys.replace({studio});
  keys.charge("studio-a", "", 10, 0);  // in debt: no new work would be admitted now
  ASSERT_TRUE(keys.check_work("studio-a", "", ApiKeys::Work{128, 0}));
  const auto second = start(table, context);
  release(0);
  ASSERT_TRUE(eventually([&] { return first->done() && second->done(); }));
  EXPECT_TRUE(second->outcome->status.ok()) << second->outcome->status.message();
  EXPECT_EQ(second->outcome->response.cache_status(), v1::CACHE_STATUS_COALESCED);
  EXPECT_EQ(metrics_.key_usage("studio-a").shape_tokens, 256) << "charged once, not twice";
  executor_.hold = false;
  service_->use_api_keys(nullptr);
}

TEST(ResultKey, EveryEffectiveFieldAndTheModelAndScopeMakeADifferentKey) {
  WorkRequest base;
  base.prompt = "a chair";
  const ModelIdentity model{"demo", "w", "c", "v"};
  const ResultKey key = result_key(base, model, "");
  std::vector<std::pair<std::string, WorkRequest>> variants;
  const auto vary = [&](const std::string& what, auto change) {
    WorkRequest r = base;
    change(r);
    variants.emplace_back(what, r);
  };
  vary("prompt", [](WorkRequest& r) { r.prompt = "a chairs"; });
  vary("guidance",
       [](WorkRequest& r) { r.guidance_scale = std::nextafter(r.guidance_scale, 9.0); });
  vary("top_p", [](WorkRequest& r) { r.top_p = 0.9; });
  vary("seed", [](WorkRequest& r) { r.seed = 1; });
  vary("bbox", [](WorkRequest& r) { r.bounding_box = std::array<float, 3>{1, 1, 1}; });
  vary("resolution", [](WorkRequest& r) { r.resolution_base = 5; });
  vary("format", [](WorkRequest& r) { r.format = MeshFormat::kObj; });
  vary("faces", [](WorkRequest& r) { r.target_face_count = 100; });
  vary("profile", [](WorkRequest& r) { r.mesh_profile = MeshProfile::kRoblox; });
  vary("tokens", [](WorkRequest& r) { r.return_shape_tokens = true; });
  vary("arrays", [](WorkRequest& r) { r.return_raw_mesh = true; });
  for (const auto& [what, r] : variants) EXPECT_NE(result_key(r, model, ""), key) << what;
  EXPECT_NE(result_key(base, {"demo", "w2", "c", "v"}, ""), key);
  EXPECT_NE(result_key(base, {"demo", "w", "c2", "v"}, ""), key);
  EXPECT_NE(result_key(base, {"demo", "w", "c", "v2"}, ""), key);
  EXPECT_NE(result_key(base, model, "studio-a"), key);
  // A RAW answer carries its arrays anyway: asking for them again is the same answer.
  WorkRequest raw = base;
  raw.format = MeshFormat::kRaw;
  WorkRequest raw_asked = raw;
  raw_asked.return_raw_mesh = true;
  EXPECT_EQ(result_key(raw_asked, model, ""), result_key(raw, model, ""));
  // What the caller does not decide the mesh by is not in it.
  WorkRequest same = base;
  same.request_id = "another";
  same.client = "another";
  same.bypass_cache = true;
  EXPECT_EQ(result_key(same, model, ""), key);
  // A prompt cannot spell the fields after it.
  WorkRequest forged = base;
  forged.prompt = "a chair;guidance_scale=1:x";
  EXPECT_NE(result_key(forged, model, ""), key);
}

// --- a client's request_id: retries join the running work, a reused id is refused ----------

class DuplicateRequestIdTest : public MeshServiceCacheTest {
 protected:
  static v1::GenerateMeshRequest with_id(const std::string& id, const std::string& prompt,
                                         bool bypass_cache) {
    v1::GenerateMeshRequest r = request(v1::MESH_FORMAT_GLB);
    r.set_request_id(id);
    r.set_prompt(prompt);
    r.set_bypass_cache(bypass_cache);
    return r;
  }
};

TEST_F(DuplicateRequestIdTest, ARetryWithTheSameIdJoinsTheRunningWorkWithOrWithoutTheCache) {
  executor_.hold = true;
  size_t held = 0;
  for (const bool bypass : {true, false}) {
    const auto r = with_id(bypass ? "retry-bypass" : "retry-cached", "a chair", bypass);
    const auto first = start(r);
    ASSERT_TRUE(eventually([&] { return executor_.held_count() == held + 1; }));
    const auto retry = start(r);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(executor_.held_count(), held + 1) << "the retry started a second computation";
    EXPECT_FALSE(retry->done());
    release(held++);
    ASSERT_TRUE(eventually([&] { return first->done() && retry->done(); }));
    ASSERT_TRUE(retry->outcome->status.ok()) << retry->outcome->status.message();
    EXPECT_EQ(retry->outcome->response.encoded(), "mesh of a chair");
    EXPECT_EQ(retry->outcome->response.cache_status(), v1::CACHE_STATUS_COALESCED);
    EXPECT_EQ(first->outcome->response.cache_status(),
              bypass ? v1::CACHE_STATUS_BYPASS : v1::CACHE_STATUS_MISS);
  }
}

TEST_F(DuplicateRequestIdTest, AnIdReusedForAnotherRequestWhileTheFirstRunsIsAlreadyExists) {
  executor_.hold = true;
  const auto first = start(with_id("job-7", "a chair", true));
  ASSERT_TRUE(eventually([&] { return executor_.held_count() == 1; }));
  const auto other = start(with_id("job-7", "a table", true));
  ASSERT_TRUE(other->done());  // answered at once: nothing queued for it
  EXPECT_EQ(other->outcome->status.code(), ErrorCode::kAlreadyExists);
  EXPECT_NE(other->outcome->status.message().find("request_id 'job-7'"), std::string::npos)
      << other->outcome->status.message();
  EXPECT_EQ(executor_.held_count(), 1u);
  release(0);
  ASSERT_TRUE(eventually([&] { return first->done(); }));
  EXPECT_TRUE(first->outcome->status.ok());
  // Once the first has ended the id is free again, for any request.
  const auto later = start(with_id("job-7", "a table", true));
  ASSERT_TRUE(eventually([&] { return executor_.held_count() == 2; }));
  release(1);
  ASSERT_TRUE(eventually([&] { return later->done(); }));
  EXPECT_TRUE(later->outcome->status.ok()) << later->outcome->status.message();
  EXPECT_EQ(later->outcome->response.encoded(), "mesh of a table");
}

TEST_F(DuplicateRequestIdTest, ACancelledWorkIsNotJoinedByALaterCallWithItsId) {
  executor_.hold = true;
  const auto first = start(with_id("gone-1", "a chair", true));
  ASSERT_TRUE(eventually([&] { return executor_.held_count() == 1; }));
  first->active->cancel(Status(ErrorCode::kCancelled, "client gone"));
  EXPECT_TRUE(executor_.held_job(0)->cancelled());
  // The caller came back with another request under the id: not refused, computed anew.
  const auto again = start(with_id("gone-1", "a table", true));
  ASSERT_TRUE(eventually([&] { return executor_.held_count() == 2; }));
  release(1);
  ASSERT_TRUE(eventually([&] { return again->done(); }));
  EXPECT_TRUE(again->outcome->status.ok()) << again->outcome->status.message();
}

}  // namespace test_service
}  // namespace cube3d
