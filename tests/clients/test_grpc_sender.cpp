// The gRPC sender against a scripted MeshService on a loopback port: the request and its
// metadata, ttft at the decoding event's arrival, queue time, the cache status, status codes,
// NO_RESULT, a deadline that passes, and no server.
#include "cube3d/clients/grpc_sender.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cube3d/v1/mesh_service.grpc.pb.h"

namespace cube3d {
namespace test_grpc_sender {

using namespace std::chrono_literals;

using Script = std::function<grpc::Status(grpc::ServerContext*, const v1::GenerateMeshRequest&,
                                          grpc::ServerWriter<v1::GenerateMeshEvent>*)>;

class ScriptedService final : public v1::MeshService::Service {
 public:
  explicit ScriptedService(Script script) : script_(std::move(script)) {}
  grpc::Status GenerateMeshStream(grpc::ServerContext* context,
                                  const v1::GenerateMeshRequest* request,
                                  grpc::ServerWriter<v1::GenerateMeshEvent>* writer) override {
    {
      const std::lock_guard lock(mutex_);
      last_request_ = *request;
      const auto auth = context->client_metadata().find("authorization");
      last_authorization_ = auth == context->client_metadata().end()
                                ? ""
                                : std::string(auth->second.data(), auth->second.size());
    }
    return script_(context, *request, writer);
  }
  v1::GenerateMeshRequest last_request() const {
    const std::lock_guard lock(mutex_);
    return last_request_;
  }
  std::string last_authorization() const {
    const std::lock_guard lock(mutex_);
    return last_authorization_;
  }

 private:
  const Script script_;
  mutable std::mutex mutex_;
  v1::GenerateMeshRequest last_request_;
  std::string last_authorization_;
};

class ScriptedServer {
 public:
  explicit ScriptedServer(Script script) : service_(std::move(script)) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~ScriptedServer() { server_->Shutdown(std::chrono::system_clock::now() + 2s); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  const ScriptedService& service() const { return service_; }

 private:
  ScriptedService service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

v1::GenerateMeshEvent progress(v1::Stage stage) {
  v1::GenerateMeshEvent e;
  e.mutable_progress()->set_stage(stage);
  return e;
}

v1::GenerateMeshEvent result(double queue_ms) {
  v1::GenerateMeshEvent e;
  e.mutable_result()->set_request_id("r");
  e.mutable_result()->mutable_timings()->set_queue_ms(queue_ms);
  return e;
}

std::unique_ptr<RequestSender> sender_for(const std::string& address, int64_t deadline_ms = 5000,
                                          const std::string& api_key = "", int max_attempts = 5) {
  SenderOptions options;
  options.server = address;
  options.deadline_ms = deadline_ms;
  options.api_key = api_key;
  options.retry.max_attempts = max_attempts;
  options.retry.initial_backoff = 10ms;  // short waits: the tests count attempts, not time
  options.retry.max_backoff = 40ms;
  return make_grpc_sender_factory(options)->make_sender();
}

v1::GenerateMeshRequest sample_request() {
  v1::GenerateMeshRequest r;
  r.set_prompt("a stone well");
  r.set_seed(11);
  return r;
}

TEST(GrpcSenderTest, AStreamWithAResultIsOkWithTtftAndQueueTime) {
  ScriptedServer server([](auto*, const auto&, auto* writer) {
    writer->Write(progress(v1::STAGE_QUEUED));
    std::this_thread::sleep_for(100ms);
    writer->Write(progress(v1::STAGE_DECODING));
    std::this_thread::sleep_for(300ms);
    writer->Write(progress(v1::STAGE_DECODING));
    writer->Write(result(3.25));
    return grpc::Status::OK;
  });
  const RequestRecord record =
      sender_for(server.address(), 5000, "k1")->send(sample_request(), SteadyClock::now());
  EXPECT_EQ(record.status, "OK");
  EXPECT_DOUBLE_EQ(record.queue_ms.value_or(-1), 3.25);
  ASSERT_TRUE(record.ttft_ms.has_value());
  EXPECT_GE(*record.ttft_ms, 100.0);
  EXPECT_LT(*record.ttft_ms, 350.0);
  EXPECT_GE(record.e2e_ms, 400.0);
  EXPECT_EQ(server.service().last_request().prompt(), "a stone well");
  EXPECT_EQ(server.service().last_request().seed(), 11u);
  EXPECT_EQ(server.service().last_authorization(), "Bearer k1");
}

TEST(GrpcSenderTest, TheResultsCacheStatusIsRecorded) {
  for (const auto& [sent, expected] : std::vector<std::pair<v1::CacheStatus, CacheStatus>>{
           {v1::CACHE_STATUS_HIT, CacheStatus::kHit},
           {v1::CACHE_STATUS_MISS, CacheStatus::kMiss},
           {v1::CACHE_STATUS_COALESCED, CacheStatus::kCoalesced},
           {v1::CACHE_STATUS_BYPASS, CacheStatus::kBypass},
           {v1::CACHE_STATUS_UNSPECIFIED, CacheStatus::kUnknown}}) {
    SCOPED_TRACE(v1::CacheStatus_Name(sent));
    ScriptedServer server([sent = sent](auto*, const auto&, auto* writer) {
      v1::GenerateMeshEvent e = result(1);
      e.mutable_result()->set_cache_status(sent);
      writer->Write(e);
      return grpc::Status::OK;
    });
    v1::GenerateMeshRequest request = sample_request();
    request.set_bypass_cache(true);
    const RequestRecord record = sender_for(server.address())->send(request, SteadyClock::now());
    EXPECT_EQ(record.status, "OK");
    EXPECT_EQ(record.cache, expected);
    EXPECT_TRUE(server.service().last_request().bypass_cache());
  }
}

TEST(GrpcSenderTest, AFailedCallHasNoCacheStatus) {
  ScriptedServer server([](auto*, const auto&, auto* writer) {
    v1::GenerateMeshEvent e = result(1);
    e.mutable_result()->set_cache_status(v1::CACHE_STATUS_HIT);
    writer->Write(e);
    return grpc::Status(grpc::StatusCode::INTERNAL, "broke after the result");
  });
  const RequestRecord record =
      sender_for(server.address())->send(sample_request(), SteadyClock::now());
  EXPECT_EQ(record.status, "INTERNAL");
  EXPECT_EQ(record.cache, CacheStatus::kUnknown);
}

TEST(GrpcSenderTest, NoKeyNoMetadata) {
  ScriptedServer server([](auto*, const auto&, auto* writer) {
    writer->Write(result(0));
    return grpc::Status::OK;
  });
  EXPECT_EQ(sender_for(server.address())->send(sample_request(), SteadyClock::now()).status, "OK");
  EXPECT_EQ(server.service().last_authorization(), "");
}

TEST(GrpcSenderTest, AnErrorStatusCountsAsItsCodeName) {
  ScriptedServer server([](auto*, const auto&, auto* writer) {
    writer->Write(progress(v1::STAGE_QUEUED));
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "queue full");
  });
  const RequestRecord record =
      sender_for(server.address())->send(sample_request(), SteadyClock::now());
  EXPECT_EQ(record.status, "RESOURCE_EXHAUSTED");
  EXPECT_FALSE(record.queue_ms.has_value());
  EXPECT_EQ(record.attempts, 1u);  // only UNAVAILABLE is tried again
}

TEST(GrpcSenderTest, AnOkStreamWithoutAResultIsNoResult) {
  ScriptedServer server([](auto*, const auto&, auto* writer) {
    writer->Write(progress(v1::STAGE_DECODING));
    return grpc::Status::OK;
  });
  const RequestRecord record =
      sender_for(server.address())->send(sample_request(), SteadyClock::now());
  EXPECT_EQ(record.status, "NO_RESULT");
  EXPECT_TRUE(record.ttft_ms.has_value());
  EXPECT_FALSE(record.queue_ms.has_value());
}

TEST(GrpcSenderTest, ADeadlineThatPassesIsDeadlineExceeded) {
  ScriptedServer server([](grpc::ServerContext* context, const auto&, auto* writer) {
    writer->Write(progress(v1::STAGE_QUEUED));
    for (int i = 0; i < 100 && !context->IsCancelled(); ++i) std::this_thread::sleep_for(20ms);
    return grpc::Status::OK;
  });
  const RequestRecord record =
      sender_for(server.address(), 300)->send(sample_request(), SteadyClock::now());
  EXPECT_EQ(record.status, "DEADLINE_EXCEEDED");
  EXPECT_GE(record.e2e_ms, 250.0);
  EXPECT_LT(record.e2e_ms, 1500.0);
}

TEST(GrpcSenderTest, NoServerIsUnavailable) {
  int port = 0;
  {
    // A port that was free a moment ago and has no listener now.
    boost::asio::io_context io;
    boost::asio::ip::tcp::acceptor acceptor(
        io, boost::asio::ip::tcp::endpoint(boost::asio::ip::address_v4::loopback(), 0));
    port = acceptor.local_endpoint().port();
  }
  const RequestRecord record =
      sender_for("127.0.0.1:" + std::to_string(port))->send(sample_request(), SteadyClock::now());
  EXPECT_EQ(record.status, "UNAVAILABLE");
  EXPECT_EQ(record.attempts, 5u);  // tried again up to the bound, then the code stands
}

// --- retries and several replicas ---------------------------------------------------------

TEST(GrpcSenderRetryTest, UnavailableIsTriedAgainUntilAnAttemptIsAnswered) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  ScriptedServer server([calls](auto*, const auto&, auto* writer) {
    if (++*calls <= 2) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "restarting");
    writer->Write(result(1));
    return grpc::Status::OK;
  });
  const RequestRecord record =
      sender_for(server.address())->send(sample_request(), SteadyClock::now());
  EXPECT_EQ(record.status, "OK");
  EXPECT_EQ(record.attempts, 3u);
  EXPECT_EQ(calls->load(), 3);
}

TEST(GrpcSenderRetryTest, AttemptsAreBounded) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  ScriptedServer server([calls](auto*, const auto&, auto*) {
    ++*calls;
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "down for good");
  });
  const RequestRecord record =
      sender_for(server.address(), 5000, "", 3)->send(sample_request(), SteadyClock::now());
  EXPECT_EQ(record.status, "UNAVAILABLE");
  EXPECT_EQ(record.attempts, 3u);
  EXPECT_EQ(calls->load(), 3);
}

TEST(GrpcSenderRetryTest, PastDecodingOnlyARequestWithAnIdIsTriedAgain) {
  for (const bool with_id : {false, true}) {
    SCOPED_TRACE(with_id ? "with a request_id" : "without a request_id");
    auto calls = std::make_shared<std::atomic<int>>(0);
    ScriptedServer server([calls](auto*, const auto&, auto* writer) {
      writer->Write(progress(v1::STAGE_DECODING));
      if (++*calls == 1) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "died decoding");
      writer->Write(result(1));
      return grpc::Status::OK;
    });
    v1::GenerateMeshRequest request = sample_request();
    if (with_id) request.set_request_id("lg-test-1");
    const RequestRecord record = sender_for(server.address())->send(request, SteadyClock::now());
    EXPECT_EQ(record.status, with_id ? "OK" : "UNAVAILABLE");
    EXPECT_EQ(record.attempts, with_id ? 2u : 1u);
    if (with_id) {
      EXPECT_EQ(server.service().last_request().request_id(), "lg-test-1");  // the same id
    }
  }
}

TEST(GrpcSenderRetryTest, NoAttemptOutlivesTheRequestsDeadline) {
  ScriptedServer server([](auto*, const auto&, auto*) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "restarting");
  });
  SenderOptions options;
  options.server = server.address();
  options.deadline_ms = 300;
  options.retry.max_attempts = 10;
  options.retry.initial_backoff = 200ms;
  options.retry.max_backoff = 200ms;
  const RequestRecord record =
      make_grpc_sender_factory(options)->make_sender()->send(sample_request(), SteadyClock::now());
  EXPECT_TRUE(record.status == "DEADLINE_EXCEEDED" || record.status == "UNAVAILABLE")
      << record.status;
  EXPECT_LT(record.e2e_ms, 1000.0);
  EXPECT_LT(record.attempts, 10u);
}

TEST(GrpcSenderRetryTest, SeveralServersAreBalancedRoundRobinAndADeadOneIsAvoided) {
  auto calls_a = std::make_shared<std::atomic<int>>(0);
  auto calls_b = std::make_shared<std::atomic<int>>(0);
  ScriptedServer a([calls_a](auto*, const auto&, auto* writer) {
    ++*calls_a;
    writer->Write(result(1));
    return grpc::Status::OK;
  });
  auto b = std::make_unique<ScriptedServer>([calls_b](auto*, const auto&, auto* writer) {
    ++*calls_b;
    writer->Write(result(1));
    return grpc::Status::OK;
  });
  SenderOptions options;
  options.server = a.address() + "," + b->address();
  options.retry.initial_backoff = 10ms;
  options.retry.max_backoff = 40ms;
  const auto factory = make_grpc_sender_factory(options);
  const auto sender = factory->make_sender();
  // Round robin picks among the replicas whose health watch has answered: until both have, every
  // call may go to the first (on a busy machine, the first ten did). Call until both have served
  // one, then count from there.
  const auto warm_until = SteadyClock::now() + 10s;
  while ((calls_a->load() == 0 || calls_b->load() == 0) && SteadyClock::now() < warm_until) {
    ASSERT_EQ(sender->send(sample_request(), SteadyClock::now()).status, "OK");
  }
  ASSERT_GT(calls_b->load(), 0) << "the second replica never became ready";
  calls_a->store(0);
  calls_b->store(0);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(sender->send(sample_request(), SteadyClock::now()).status, "OK");
  }
  EXPECT_EQ(calls_a->load() + calls_b->load(), 10);
  EXPECT_GE(calls_a->load(), 3);  // round robin, not pick-first
  EXPECT_GE(calls_b->load(), 3);
  // One replica gone: every request is still answered, by the other.
  const int a_before = calls_a->load();
  b.reset();
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(sender->send(sample_request(), SteadyClock::now()).status, "OK");
  }
  EXPECT_EQ(calls_a->load() - a_before, 10);
}

TEST(GrpcSenderTest, EverySenderOfAFactoryWorks) {
  ScriptedServer server([](auto*, const auto&, auto* writer) {
    writer->Write(result(1));
    return grpc::Status::OK;
  });
  SenderOptions options;
  options.server = server.address();
  const auto factory = make_grpc_sender_factory(options);
  const auto a = factory->make_sender();
  const auto b = factory->make_sender();
  EXPECT_EQ(a->send(sample_request(), SteadyClock::now()).status, "OK");
  EXPECT_EQ(b->send(sample_request(), SteadyClock::now()).status, "OK");
}

}  // namespace test_grpc_sender
}  // namespace cube3d
