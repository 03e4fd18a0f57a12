// The HTTP/JSON gateway on a loopback port over a real service core and scheduler with a fake
// executor (no model): JSON in and out, content negotiation, the error statuses and bodies,
// deadlines, Server-Sent Events framing, the queue limit, and cancellation when the client
// closes its connection.
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <prometheus/metric_family.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cube3d/core/device_fault.h"
#include "cube3d/core/error.h"
#include "cube3d/mesh/mesh_preview.h"
#include "cube3d/scheduler/scheduler.h"
#include "cube3d/server/admission/api_keys.h"
#include "cube3d/server/http/http_gateway.h"
#include "cube3d/server/observability/metrics.h"
#include "cube3d/server/service/service.h"
#include "cube3d/server/wire/answer_codec.h"
#include "cube3d/server/work/work_request.h"
#include "cube3d/server/work/work_result.h"
#include "eventually.h"
#include "server/httpd/test_http_client.h"

namespace cube3d {
namespace test_http_gateway {

using testing_http::Reply;
using Result = std::optional<Reply>;
using Headers = std::vector<std::string>;

using namespace std::chrono_literals;

constexpr const char* kMesh = "glTF-not-really";
// The one triangle every fake result holds (facing +Z, the front: a preview shows it).
const std::vector<float> kTriangle = {0, 0, 0, 1, 0, 0, 0, 1, 0};

// Runs each batch to a fake mesh; while `block` is set it holds the batch (a long generation)
// until released or until every job in it is cancelled (the slot a gone client frees).
class BlockingExecutor final : public BatchExecutor {
 public:
  void execute(const std::vector<std::shared_ptr<Task>>& jobs, int64_t bucket) override {
    for (const auto& job : jobs) {
      TaskProgress p;
      p.stage = TaskStage::kDecoding;
      p.tokens_total = 64;
      job->progress(p);
    }
    {
      std::unique_lock lock(mutex_);
      ++running_;
      for (const auto& job : jobs) formats_.push_back(job->payload<WorkRequest>().format);
      changed_.notify_all();
      // Cancellation is a flag on the job, with no notification: look every few ms.
      while (block_ && !std::all_of(jobs.begin(), jobs.end(),
                                    [](const auto& job) { return job->cancelled(); })) {
        changed_.wait_for(lock, 5ms);
      }
      --running_;
    }
    for (const auto& job : jobs) {
      if (job->cancelled()) {
        ++cancelled_jobs_;
        job->fail(cube3d::cancelled("the request was cancelled"));
        continue;
      }
      WorkResult result;
      result.request_id = job->ticket().request_id;
      result.format = job->payload<WorkRequest>().format;
      result.vertices = kTriangle;
      result.indices = {0, 1, 2};
      result.encoded = kMesh;
      result.vertex_count = 3;
      result.face_count = 1;
      result.batch_bucket = bucket;
      result.timings.queue_ms = 1.5;
      result.timings.total_ms = 9.25;
      job->succeed(std::move(result));
    }
  }

  void set_block(bool block) {
    const std::lock_guard lock(mutex_);
    block_ = block;
    changed_.notify_all();
  }
  bool wait_running(int64_t n, std::chrono::milliseconds timeout = 10s) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return running_ >= n; });
  }
  std::vector<MeshFormat> formats() {
    const std::lock_guard lock(mutex_);
    return formats_;
  }
  int64_t cancelled_jobs() const { return cancelled_jobs_.load(); }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool block_ = false;
  int64_t running_ = 0;
  std::vector<MeshFormat> formats_;
  std::atomic<int64_t> cancelled_jobs_{0};
};

using testing::eventually;

nlohmann::json error_of(const Result& res) {
  EXPECT_EQ(res->header("Content-Type"), "application/json");
  const auto body = nlohmann::json::parse(res->body);
  EXPECT_EQ(body["error"]["code"], res->status) << res->body;
  return body["error"];
}

// A raw connection: to leave in the middle of a request.
class RawConnection {
 public:
  explicit RawConnection(int port) : connection_(port, std::chrono::seconds(10)) {}
  void post(const std::string& path, const std::string& body) {
    ASSERT_TRUE(connection_.send_request("POST", path, body, {"Content-Type: application/json"}));
  }
  std::string read_until(const std::string& marker) { return connection_.read_until(marker); }
  void close() { connection_.close(); }

 private:
  testing_http::Connection connection_;
};

class HttpGatewayTest : public ::testing::Test {
 protected:
  HttpGatewayTest() : metrics_({1}) {
    ServiceOptions options;
    options.policy.limits.max_message_bytes = 1 << 20;
    options.tokens_per_shape = 64;
    core_ = std::make_unique<Service>(options, metrics_, answer_codec_);
    SchedulerConfig config;
    config.mode = BatchingMode::kStatic;  // one blocking batch at a time holds the queue
    config.batch_buckets = {1};
    config.max_queue_delay_ms = 0;
    config.max_queue_size = 1;
    scheduler_ = std::make_unique<Scheduler>(config, executor_);
    gateway_ = std::make_unique<HttpGateway>(*core_, metrics_, gateway_options(4));
  }
  ~HttpGatewayTest() override { executor_.set_block(false); }

  static HttpGatewayOptions gateway_options(int64_t max_generating) {
    HttpGatewayOptions http;
    http.listen = "127.0.0.1:0";
    http.server.limits.max_body_bytes = 4096;
    http.server.io_threads = 2;
    http.max_generating = max_generating;
    return http;
  }

  Result get(const std::string& path, Headers headers = {}) const {
    return testing_http::request(gateway_->port(), "GET", path, "", headers);
  }

  Result post(const std::string& path, const std::string& body, Headers headers = {}) const {
    headers.push_back("Content-Type: application/json");
    return testing_http::request(gateway_->port(), "POST", path, body, headers);
  }

  Result generate(const std::string& body, Headers headers = {}) const {
    return post("/v1/meshes:generate", body, std::move(headers));
  }

  // Expects a generate of `body` that accepts `accept` to be answered 200 as `content_type`.
  void expect_answered_as(const std::string& body, const std::string& accept,
                          const std::string& content_type) const {
    SCOPED_TRACE("Accept: " + accept);
    const Result res = generate(body, {"Accept: " + accept});
    ASSERT_EQ(res->status, 200) << res->body;
    EXPECT_EQ(res->header("Content-Type"), content_type);
  }

  double requests_with_status(const std::string& status) const {
    for (const auto& family : metrics_.registry()->Collect()) {
      if (family.name != "cube3d_requests_total") continue;
      for (const auto& metric : family.metric) {
        for (const auto& label : metric.label) {
          if (label.name == "code" && label.value == status) return metric.counter.value;
        }
      }
    }
    return 0;
  }

  static constexpr const char* kChair = R"({"prompt": "a wooden chair", "resolutionBase": 4})";

  Metrics metrics_;
  const ProtoAnswerCodec answer_codec_;  // before the service, which reads it
  BlockingExecutor executor_;
  std::unique_ptr<Service> core_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<HttpGateway> gateway_;
};

TEST_F(HttpGatewayTest, HealthzAlwaysReadyzOnlyWhenLoadedAndNotDraining) {
  auto res = get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);

  res = get("/readyz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  EXPECT_EQ(error_of(res)["status"], "UNAVAILABLE");
  EXPECT_NE(res->body.find("loading"), std::string::npos);

  core_->attach(scheduler_.get());
  res = get("/readyz");
  EXPECT_EQ(res->status, 200);

  gateway_->set_draining(true);
  res = get("/readyz");
  EXPECT_EQ(res->status, 503);
  EXPECT_NE(res->body.find("draining"), std::string::npos);
  EXPECT_EQ(get("/healthz")->status, 200);
}

TEST_F(HttpGatewayTest, AfterADeviceFaultReadyzIs503AndNewWorkIsRefusedRetryably) {
  core_->attach(scheduler_.get());
  EXPECT_EQ(get("/readyz")->status, 200);
  // What server_main does with the scheduler's device-fault observer.
  scheduler_->report_device_fault(
      DeviceFault("decoding", "CUDA error: an illegal memory access was encountered"), {});
  gateway_->set_device_failed();
  auto res = get("/readyz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  EXPECT_EQ(error_of(res)["status"], "UNAVAILABLE");
  EXPECT_NE(res->body.find("device failed"), std::string::npos) << res->body;
  res = generate(kChair);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  EXPECT_EQ(error_of(res)["status"], "UNAVAILABLE");
  EXPECT_NE(res->body.find("retry it on another replica"), std::string::npos) << res->body;
  EXPECT_EQ(get("/healthz")->status, 200);  // the process still runs, until it exits
}

TEST_F(HttpGatewayTest, GenerateBeforeTheModelIsReadyIs503) {
  const auto res = generate(kChair);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  EXPECT_EQ(error_of(res)["status"], "UNAVAILABLE");
}

TEST_F(HttpGatewayTest, JsonAnswerIsTheResponsesJsonMapping) {
  core_->attach(scheduler_.get());
  const auto res = generate(kChair);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->header("Content-Type"), "application/json");
  v1::GenerateMeshResponse response;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(res->body, &response).ok());
  EXPECT_EQ(response.vertex_count(), 3u);
  EXPECT_EQ(response.encoded(), kMesh);
  EXPECT_EQ(response.format(), v1::MESH_FORMAT_GLB);  // the server's default
  EXPECT_EQ(res->header("X-Request-Id"), response.request_id());
  EXPECT_EQ(res->header("Server-Timing"),
            "queue;dur=1.5, text;dur=0.0, prefill;dur=0.0, decode;dur=0.0, mesh;dur=0.0, "
            "total;dur=9.2");
  // Every field is written, defaults included.
  EXPECT_NE(res->body.find("\"warnings\":[]"), std::string::npos) << res->body;
}

TEST_F(HttpGatewayTest, ProtoFieldNamesAndARequestIdHeaderAreRead) {
  core_->attach(scheduler_.get());
  auto res = generate(R"({"prompt": "a chair", "resolution_base": 4, "request_id": "mine-1"})");
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->header("X-Request-Id"), "mine-1");
  res = generate(R"({"prompt": "a chair"})", {"X-Request-Id: from-header"});
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->header("X-Request-Id"), "from-header");
}

TEST_F(HttpGatewayTest, AcceptAMeshTypeAnswersTheFileItself) {
  core_->attach(scheduler_.get());
  auto res = generate(kChair, {"Accept: model/gltf-binary"});
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->header("Content-Type"), "model/gltf-binary");
  EXPECT_EQ(res->body, kMesh);
  EXPECT_EQ(res->header("X-Vertex-Count"), "3");
  EXPECT_EQ(res->header("X-Face-Count"), "1");
  EXPECT_EQ(res->header("X-Batch-Bucket"), "1");
  EXPECT_FALSE(res->header("X-Request-Id").empty());
  EXPECT_NE(res->header("Server-Timing").find("total;dur=9.2"), std::string::npos);

  expect_answered_as(kChair, "application/json;q=0.5, model/obj", "model/obj");
  expect_answered_as(kChair, "application/x-ply", "application/x-ply");
  EXPECT_EQ(executor_.formats(),
            (std::vector<MeshFormat>{MeshFormat::kGlb, MeshFormat::kObj, MeshFormat::kPly}));
}

TEST_F(HttpGatewayTest, TheBodysFormatWinsOverAccept) {
  core_->attach(scheduler_.get());
  const std::string obj = R"({"prompt": "a chair", "format": "MESH_FORMAT_OBJ"})";
  // Accept names mesh types, none of them the body's, and no JSON: 406.
  auto res = generate(obj, {"Accept: model/gltf-binary"});
  EXPECT_EQ(res->status, 406);
  EXPECT_EQ(error_of(res)["status"], "INVALID_ARGUMENT");
  EXPECT_NE(res->body.find("MESH_FORMAT_OBJ"), std::string::npos);
  // ... with JSON acceptable too: a JSON answer in the body's format.
  expect_answered_as(obj, "model/gltf-binary, application/json", "application/json");
  // ... and the body's format among them: that file.
  expect_answered_as(obj, "model/gltf-binary, model/obj", "model/obj");
  EXPECT_EQ(executor_.formats(), (std::vector<MeshFormat>{MeshFormat::kObj, MeshFormat::kObj}));
}

TEST_F(HttpGatewayTest, BadJsonIs400AndNamesTheUnknownField) {
  core_->attach(scheduler_.get());
  auto res = generate(R"({"prompt": "a chair",)");
  EXPECT_EQ(res->status, 400);
  EXPECT_EQ(error_of(res)["status"], "INVALID_ARGUMENT");
  res = generate(R"({"prompt": "a chair", "resolutionBsae": 4})");
  EXPECT_EQ(res->status, 400);
  EXPECT_NE(std::string(error_of(res)["message"]).find("resolutionBsae"), std::string::npos);
  res = generate(R"({"prompt": 5})");
  EXPECT_EQ(res->status, 400);
  res = generate("{\"prompt\": \"bad \xff byte\"}");
  EXPECT_EQ(res->status, 400);
  EXPECT_NO_THROW(nlohmann::json::parse(res->body));
  EXPECT_EQ(executor_.formats().size(), 0u);               // nothing reached the scheduler
  EXPECT_EQ(requests_with_status("INVALID_ARGUMENT"), 4);  // counted like the core's answers
}

TEST_F(HttpGatewayTest, InvalidFieldsAreTheCoresValidation) {
  core_->attach(scheduler_.get());
  const auto res = generate(R"({"prompt": "a chair", "topP": 2})");
  EXPECT_EQ(res->status, 400);
  EXPECT_NE(std::string(error_of(res)["message"]).find("top_p"), std::string::npos);
  // Counted once the answer is written in full (a moment after the client has it, maybe).
  EXPECT_TRUE(eventually([&] { return requests_with_status("INVALID_ARGUMENT") == 1; }));
}

TEST_F(HttpGatewayTest, UnknownPathWrongMethodAndLargeBody) {
  auto res = get("/v1/nothing");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  EXPECT_EQ(error_of(res)["status"], "NOT_FOUND");

  res = get("/v1/meshes:generate");
  EXPECT_EQ(res->status, 405);
  EXPECT_EQ(res->header("Allow"), "POST");
  EXPECT_EQ(error_of(res)["status"], "UNIMPLEMENTED");
  res =
      testing_http::request(gateway_->port(), "POST", "/healthz", "", {"Content-Type: text/plain"});
  EXPECT_EQ(res->status, 405);
  EXPECT_EQ(res->header("Allow"), "GET, HEAD");

  res = generate(R"({"prompt": ")" + std::string(5000, 'a') + R"("})");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 413);
  EXPECT_EQ(error_of(res)["status"], "RESOURCE_EXHAUSTED");
  EXPECT_NE(res->body.find("4096"), std::string::npos);
}

TEST_F(HttpGatewayTest, MetricsIsThePrometheusTextOfTheRegistry) {
  core_->attach(scheduler_.get());
  ASSERT_EQ(generate(kChair)->status, 200);
  // The call is counted once its answer's last byte went out, which this client can read a
  // moment before the server's I/O thread has noted it: scrape until the count shows.
  std::string body;
  EXPECT_TRUE(eventually([&] {
    const auto res = get("/metrics");
    EXPECT_EQ(res->status, 200);
    EXPECT_NE(res->header("Content-Type").find("text/plain"), std::string::npos);
    body = res->body;
    return body.find("cube3d_requests_total{code=\"OK\"} 1") != std::string::npos;
  })) << body;
}

TEST_F(HttpGatewayTest, TimeoutHeaderOrParameterIsTheDeadline) {
  core_->attach(scheduler_.get());
  auto res = generate(kChair, {"X-Request-Timeout-Ms: soon"});
  EXPECT_EQ(res->status, 400);
  EXPECT_NE(res->body.find("X-Request-Timeout-Ms"), std::string::npos);
  res = post("/v1/meshes:generate?timeout_ms=0", kChair);
  EXPECT_EQ(res->status, 400);

  executor_.set_block(true);
  const auto start = std::chrono::steady_clock::now();
  res = generate(kChair, {"X-Request-Timeout-Ms: 200"});
  EXPECT_EQ(res->status, 504);
  EXPECT_EQ(error_of(res)["status"], "DEADLINE_EXCEEDED");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  res = post("/v1/meshes:generate?timeout_ms=200", kChair);
  EXPECT_EQ(res->status, 504);
  EXPECT_TRUE(eventually([&] { return requests_with_status("DEADLINE_EXCEEDED") == 2; }));
}

TEST_F(HttpGatewayTest, AFullQueueIs429WithRetryAfter) {
  core_->attach(scheduler_.get());
  executor_.set_block(true);
  std::vector<std::thread> waiting;
  std::vector<int> statuses(2, 0);
  waiting.emplace_back([&] { statuses[0] = generate(kChair)->status; });
  ASSERT_TRUE(executor_.wait_running(1));  // one runs (blocked) ...
  waiting.emplace_back([&] { statuses[1] = generate(kChair)->status; });
  ASSERT_TRUE(eventually([&] { return scheduler_->queue_depth() == 1; }));  // ... one waits
  const auto res = generate(kChair);
  EXPECT_EQ(res->status, 429);
  EXPECT_EQ(res->header("Retry-After"), "1");
  EXPECT_NE(std::string(error_of(res)["message"]).find("queue full"), std::string::npos);
  executor_.set_block(false);
  for (auto& t : waiting) t.join();
  EXPECT_EQ(statuses, (std::vector<int>{200, 200}));
}

TEST_F(HttpGatewayTest, MoreGenerateCallsThanTheGatewayServesAre429) {
  core_->attach(scheduler_.get());
  HttpGateway small(*core_, metrics_, gateway_options(1));
  executor_.set_block(true);
  int first = 0;
  std::thread running([&] {
    first = testing_http::request(small.port(), "POST", "/v1/meshes:generate", kChair,
                                  {"Content-Type: application/json"})
                ->status;
  });
  ASSERT_TRUE(executor_.wait_running(1));
  const auto res = testing_http::request(small.port(), "POST", "/v1/meshes:generate", kChair,
                                         {"Content-Type: application/json"});
  EXPECT_EQ(res->status, 429);
  EXPECT_EQ(res->header("Retry-After"), "1");
  EXPECT_EQ(requests_with_status("RESOURCE_EXHAUSTED"), 1);
  // Probes still answer while every generate slot is taken.
  EXPECT_EQ(testing_http::request(small.port(), "GET", "/healthz")->status, 200);
  executor_.set_block(false);
  running.join();
  EXPECT_EQ(first, 200);
}

TEST_F(HttpGatewayTest, AClientThatClosesItsConnectionCancelsTheJob) {
  core_->attach(scheduler_.get());
  executor_.set_block(true);
  RawConnection connection(gateway_->port());
  connection.post("/v1/meshes:generate", kChair);
  ASSERT_TRUE(executor_.wait_running(1));
  connection.close();
  EXPECT_TRUE(eventually([&] { return executor_.cancelled_jobs() == 1; }))
      << "the job was not cancelled when its client left";
  EXPECT_TRUE(eventually([&] { return requests_with_status("CANCELLED") == 1; }));
  // The slot is free again: the next request runs.
  executor_.set_block(false);
  EXPECT_EQ(generate(kChair)->status, 200);
}

TEST_F(HttpGatewayTest, AQueuedRequestWhoseClientLeftIsDropped) {
  core_->attach(scheduler_.get());
  executor_.set_block(true);
  int first = 0;
  std::thread running([&] { first = generate(kChair)->status; });
  ASSERT_TRUE(executor_.wait_running(1));
  RawConnection connection(gateway_->port());
  connection.post("/v1/meshes:generate", kChair);
  ASSERT_TRUE(eventually([&] { return scheduler_->queue_depth() == 1; }));
  connection.close();
  EXPECT_TRUE(eventually([&] { return requests_with_status("CANCELLED") == 1; }));
  executor_.set_block(false);
  running.join();
  EXPECT_EQ(first, 200);
  EXPECT_EQ(executor_.formats().size(), 1u);  // the one that left never ran
}

// "event: NAME\ndata: JSON\n\n" frames -> (name, data).
std::vector<std::pair<std::string, std::string>> sse_events(const std::string& body) {
  std::vector<std::pair<std::string, std::string>> events;
  size_t at = 0;
  while (at < body.size()) {
    const size_t end = body.find("\n\n", at);
    if (end == std::string::npos) break;
    const std::string frame = body.substr(at, end - at);
    at = end + 2;
    if (frame.starts_with(":")) continue;  // a keep-alive comment
    const size_t newline = frame.find('\n');
    EXPECT_TRUE(frame.starts_with("event: ")) << frame;
    EXPECT_EQ(frame.substr(newline + 1, 6), "data: ") << frame;
    events.emplace_back(frame.substr(7, newline - 7), frame.substr(newline + 7));
  }
  EXPECT_EQ(at, body.size()) << "a partial frame at the end";
  return events;
}

TEST_F(HttpGatewayTest, StreamSendsProgressEventsThenTheResult) {
  core_->attach(scheduler_.get());
  const auto res = post("/v1/meshes:generateStream", kChair);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->header("Content-Type"), "text/event-stream");
  const auto events = sse_events(res->body);
  ASSERT_GE(events.size(), 3u) << res->body;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    EXPECT_EQ(events[i].first, "progress");
    v1::Progress progress;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(events[i].second, &progress).ok());
    EXPECT_EQ(progress.tokens_total(), 64u);
    if (i == 0) {
      EXPECT_EQ(progress.stage(), v1::STAGE_QUEUED);
    }
  }
  EXPECT_EQ(events.back().first, "result");
  v1::GenerateMeshResponse response;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(events.back().second, &response).ok());
  EXPECT_EQ(response.encoded(), kMesh);
}

TEST_F(HttpGatewayTest, StreamErrorsBeforeTheJobIsQueuedAreHttpStatuses) {
  auto res = post("/v1/meshes:generateStream", kChair);  // not ready
  EXPECT_EQ(res->status, 503);
  EXPECT_EQ(error_of(res)["status"], "UNAVAILABLE");
  core_->attach(scheduler_.get());
  res = post("/v1/meshes:generateStream", R"({"prompt": ""})");
  EXPECT_EQ(res->status, 400);
  EXPECT_EQ(error_of(res)["status"], "INVALID_ARGUMENT");
  res = post("/v1/meshes:generateStream", R"({"prompt": "a chair", "nope": 1})");
  EXPECT_EQ(res->status, 400);
}

TEST_F(HttpGatewayTest, StreamErrorsAfterTheJobIsQueuedAreErrorEvents) {
  core_->attach(scheduler_.get());
  executor_.set_block(true);
  const auto res = post("/v1/meshes:generateStream", kChair, {"X-Request-Timeout-Ms: 200"});
  ASSERT_EQ(res->status, 200) << res->body;
  const auto events = sse_events(res->body);
  ASSERT_GE(events.size(), 2u) << res->body;
  EXPECT_EQ(events.front().first, "progress");
  EXPECT_EQ(events.back().first, "error");
  const auto error = nlohmann::json::parse(events.back().second)["error"];
  EXPECT_EQ(error["code"], 504);
  EXPECT_EQ(error["status"], "DEADLINE_EXCEEDED");
}

TEST_F(HttpGatewayTest, AStreamClientThatLeavesCancelsTheJob) {
  core_->attach(scheduler_.get());
  executor_.set_block(true);
  RawConnection connection(gateway_->port());
  connection.post("/v1/meshes:generateStream", kChair);
  const std::string head = connection.read_until("event: progress");
  EXPECT_NE(head.find("HTTP/1.1 200"), std::string::npos) << head;
  EXPECT_NE(head.find("Transfer-Encoding: chunked"), std::string::npos) << head;
  ASSERT_TRUE(executor_.wait_running(1));
  connection.close();
  EXPECT_TRUE(eventually([&] { return executor_.cancelled_jobs() == 1; }));
  EXPECT_TRUE(eventually([&] { return requests_with_status("CANCELLED") == 1; }));
}

TEST_F(HttpGatewayTest, ApiKeysComeInTheAuthorizationHeader) {
  core_->attach(scheduler_.get());
  ApiKeys keys(parse_api_keys(R"(keys:
  - name: studio
    sha256: 2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b
)",
                              "test keys"));  // sha256 of "secret"
  core_->use_api_keys(&keys);
  auto res = generate(kChair);
  EXPECT_EQ(res->status, 401);
  EXPECT_EQ(error_of(res)["status"], "UNAUTHENTICATED");
  EXPECT_EQ(res->header("WWW-Authenticate"), "Bearer");
  res = post("/v1/meshes:generateStream", kChair, {"Authorization: Bearer wrong"});
  EXPECT_EQ(res->status, 401);
  res = generate(kChair, {"Authorization: Bearer secret"});
  EXPECT_EQ(res->status, 200) << res->body;
  core_->use_api_keys(nullptr);
}

TEST_F(HttpGatewayTest, ABusyPortIsAStartUpErrorNamingTheSetting) {
  const std::string taken = "127.0.0.1:" + std::to_string(gateway_->port());
  try {
    HttpGatewayOptions same = gateway_options(4);
    same.listen = taken;
    HttpGateway second(*core_, metrics_, same);
    FAIL() << "a second gateway listened on " << taken;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_NE(std::string(e.what()).find("http_listen " + taken), std::string::npos) << e.what();
  }
  HttpGatewayOptions nonsense = gateway_options(4);
  nonsense.listen = "nonsense";
  EXPECT_THROW(HttpGateway(*core_, metrics_, nonsense), Error);
}

// The PNG's width and height from its IHDR chunk (the first, right after the signature).
std::pair<int, int> png_dimensions(const std::string& png) {
  EXPECT_EQ(png.substr(0, 8), "\x89PNG\r\n\x1a\n");
  EXPECT_EQ(png.substr(12, 4), "IHDR");
  const auto be32 = [&](size_t at) {
    return int(uint8_t(png[at])) << 24 | int(uint8_t(png[at + 1])) << 16 |
           int(uint8_t(png[at + 2])) << 8 | int(uint8_t(png[at + 3]));
  };
  return {be32(16), be32(20)};
}

TEST_F(HttpGatewayTest, AcceptImagePngAnswersAPictureOfTheMesh) {
  core_->attach(scheduler_.get());
  auto res = post("/v1/meshes:generate?size=64", kChair, {"Accept: image/png"});
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->header("Content-Type"), "image/png");
  EXPECT_EQ(png_dimensions(res->body), std::make_pair(64, 64));
  // The picture of the executor's triangle, as the mesh layer draws it (deterministic), with the
  // prompt as its Description: not an empty picture.
  Mesh triangle{kTriangle, {0, 1, 2}};
  PreviewOptions options;
  options.width = options.height = 64;
  options.description = "a wooden chair";
  EXPECT_EQ(res->body, preview_png(triangle, options));
  EXPECT_NE(res->body, preview_png(Mesh{}, options));
  // The file answers' headers, and the drawing's time.
  const std::string id = res->header("X-Request-Id");
  EXPECT_FALSE(id.empty());
  EXPECT_EQ(res->header("Content-Disposition"), "inline; filename=\"" + id + ".png\"");
  EXPECT_EQ(res->header("X-Vertex-Count"), "3");
  EXPECT_EQ(res->header("X-Face-Count"), "1");
  EXPECT_EQ(res->header("X-Batch-Bucket"), "1");
  EXPECT_NE(res->header("Server-Timing").find("total;dur=9.2, preview;dur="), std::string::npos)
      << res->header("Server-Timing");
  EXPECT_EQ(res->headers.count("X-Warning"), 0u);
  // The default size; the mesh generated as its raw arrays.
  res = generate(kChair, {"Accept: image/png"});
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(png_dimensions(res->body), std::make_pair(512, 512));
  EXPECT_EQ(executor_.formats(), (std::vector<MeshFormat>{MeshFormat::kRaw, MeshFormat::kRaw}));
  EXPECT_TRUE(eventually([&] { return requests_with_status("OK") == 2; }));
}

TEST_F(HttpGatewayTest, ABadPngSizeIs400NamingSize) {
  core_->attach(scheduler_.get());
  for (const char* size : {"8", "4096", "big", ""}) {
    const auto res =
        post(std::string("/v1/meshes:generate?size=") + size, kChair, {"Accept: image/png"});
    EXPECT_EQ(res->status, 400) << size;
    const std::string message = error_of(res)["message"];
    EXPECT_NE(message.find("size"), std::string::npos) << message;
    EXPECT_NE(message.find("16..2048"), std::string::npos) << message;
  }
  // Checked whatever the answer would have been.
  EXPECT_EQ(post("/v1/meshes:generate?size=0", kChair)->status, 400);
  EXPECT_EQ(executor_.formats().size(), 0u);  // nothing reached the scheduler
}

TEST_F(HttpGatewayTest, ForAPictureTheBodysFormatIsSetAsideWithAWarning) {
  core_->attach(scheduler_.get());
  const std::string obj = R"({"prompt": "a chair", "format": "MESH_FORMAT_OBJ"})";
  auto res = post("/v1/meshes:generate?size=32", obj, {"Accept: image/png"});
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->header("Content-Type"), "image/png");
  const auto warnings = res->headers.get_all("X-Warning");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("format MESH_FORMAT_OBJ ignored"), std::string::npos) << warnings[0];
  // Accept prefers the body's file: that file, as before.
  expect_answered_as(obj, "model/obj, image/png", "model/obj");
  EXPECT_EQ(executor_.formats(), (std::vector<MeshFormat>{MeshFormat::kRaw, MeshFormat::kObj}));
}

}  // namespace test_http_gateway
}  // namespace cube3d
