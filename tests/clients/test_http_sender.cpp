// The HTTP sender against a scripted server on a loopback port: what it sends, what each kind
// of answer counts as (a stream with a result, an error event, a plain error status, a stream
// without a result, a dropped connection, a deadline that passes, no server), the cache status
// (the result's cacheStatus, else an X-Cache header), that ttft is
// taken when the decoding event arrives, and its one keep-alive connection (reused, opened
// again when the server closed it, a request sent once more when the close crossed it).
#include "cube3d/clients/http_sender.h"

#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "clients/loopback_listener.h"
#include "cube3d/core/error.h"

namespace cube3d {
namespace test_http_sender {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using namespace std::chrono_literals;

// One request's connection, for the handler to answer on.
class Reply {
 public:
  explicit Reply(tcp::socket& socket) : socket_(socket) {}
  void raw(std::string_view bytes) {
    boost::system::error_code ignored;
    net::write(socket_, net::buffer(bytes.data(), bytes.size()), ignored);
  }
  void stream_head() {
    raw("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        "Transfer-Encoding: chunked\r\n\r\n");
  }
  void chunk(std::string_view data) {
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    raw(std::string(size) + std::string(data) + "\r\n");
  }
  void event(std::string_view name, std::string_view data) {
    chunk("event: " + std::string(name) + "\ndata: " + std::string(data) + "\n\n");
  }
  void end_stream() { raw("0\r\n\r\n"); }
  void plain(int status, std::string_view reason, std::string_view body,
             std::string_view extra_headers = "") {
    raw("HTTP/1.1 " + std::to_string(status) + " " + std::string(reason) +
        "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\n" + std::string(extra_headers) + "\r\n" + std::string(body));
  }
  // Close the connection after this answer.
  void close_after() { close_ = true; }
  bool closing() const { return close_; }

 private:
  tcp::socket& socket_;
  bool close_ = false;
};

using Handler = std::function<void(const http::request<http::string_body>&, Reply&)>;

// A handler that answers with `events` (name, data) in one stream, ended by its last chunk.
Handler streaming(std::vector<std::pair<std::string, std::string>> events) {
  return [events = std::move(events)](const auto&, Reply& reply) {
    reply.stream_head();
    for (const auto& [name, data] : events) reply.event(name, data);
    reply.end_stream();
  };
}

// Accepts connections on 127.0.0.1 (a thread each) and answers every request with `handler`.
class ScriptedServer {
 public:
  explicit ScriptedServer(Handler handler) : handler_(std::move(handler)) {}

  std::string address() const { return "127.0.0.1:" + std::to_string(listener_.port()); }
  int connections() const { return listener_.accepted(); }
  std::vector<http::request<http::string_body>> requests() const {
    const std::lock_guard lock(mutex_);
    return requests_;
  }

 private:
  void serve(tcp::socket& socket) {
    socket.set_option(tcp::no_delay(true));
    beast::flat_buffer buffer;
    for (;;) {
      http::request<http::string_body> request;
      boost::system::error_code ec;
      http::read(socket, buffer, request, ec);
      if (ec) return;  // the client closed the connection
      {
        const std::lock_guard lock(mutex_);
        requests_.push_back(request);
      }
      Reply reply(socket);
      handler_(request, reply);
      if (reply.closing()) {
        boost::system::error_code ignored;
        socket.shutdown(tcp::socket::shutdown_both, ignored);
        socket.close(ignored);
        return;
      }
    }
  }

  const Handler handler_;
  mutable std::mutex mutex_;
  std::vector<http::request<http::string_body>> requests_;
  // Last: its threads are joined before the rest goes.
  testing::LoopbackListener listener_{[this](tcp::socket socket) { serve(socket); }};
};

constexpr const char* kQueued = R"({"stage":"STAGE_QUEUED","tokensDone":0})";
constexpr const char* kDecoding = R"({"stage":"STAGE_DECODING","tokensDone":32,"tokensTotal":64})";
constexpr const char* kResult =
    R"({"requestId":"r","format":"MESH_FORMAT_OBJ","encoded":"AAAA","timings":{"queueMs":12.5,"totalMs":40}})";

// A full stream with a result.
void answer_ok(const http::request<http::string_body>&, Reply& reply) {
  reply.stream_head();
  reply.chunk(":\n\n");  // a keep-alive comment
  reply.event("progress", kQueued);
  reply.event("progress", kDecoding);
  reply.event("result", kResult);
  reply.end_stream();
}

std::unique_ptr<RequestSender> sender_for(const std::string& address, int64_t deadline_ms = 5000,
                                          const std::string& api_key = "") {
  SenderOptions options;
  options.server = address;
  options.deadline_ms = deadline_ms;
  options.api_key = api_key;
  return make_http_sender_factory(options)->make_sender();
}

v1::GenerateMeshRequest sample_request() {
  v1::GenerateMeshRequest r;
  r.set_prompt("a low-poly pine tree");
  r.set_seed(7);
  r.set_resolution_base(4);
  return r;
}

// What one request to `server` records, sent by a sender of its own.
RequestRecord send_one(const ScriptedServer& server) {
  return sender_for(server.address())->send(sample_request(), SteadyClock::now());
}

TEST(HttpSenderTest, SendsTheRequestAsJsonWithItsHeaders) {
  ScriptedServer server(answer_ok);
  const auto sender = sender_for(server.address(), 4321, "sekrit");
  const RequestRecord record = sender->send(sample_request(), SteadyClock::now());
  EXPECT_EQ(record.status, "OK");
  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), 1u);
  const auto& req = requests[0];
  EXPECT_EQ(req.method(), http::verb::post);
  EXPECT_EQ(req.target(), "/v1/meshes:generateStream");
  EXPECT_EQ(req[http::field::host], server.address());
  EXPECT_EQ(req[http::field::content_type], "application/json");
  EXPECT_EQ(req["X-Request-Timeout-Ms"], "4321");
  EXPECT_EQ(req[http::field::authorization], "Bearer sekrit");
  EXPECT_TRUE(req.keep_alive());
  v1::GenerateMeshRequest sent;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(req.body(), &sent).ok()) << req.body();
  EXPECT_EQ(sent.prompt(), "a low-poly pine tree");
  EXPECT_EQ(sent.seed(), 7u);
  EXPECT_EQ(sent.resolution_base(), 4);
}

TEST(HttpSenderTest, NoAuthorizationWithoutAKey) {
  ScriptedServer server(answer_ok);
  sender_for(server.address())->send(sample_request(), SteadyClock::now());
  ASSERT_EQ(server.requests().size(), 1u);
  EXPECT_EQ(server.requests()[0].count(http::field::authorization), 0u);
}

TEST(HttpSenderTest, AStreamWithAResultIsOkWithItsQueueTime) {
  ScriptedServer server(answer_ok);
  const auto start = SteadyClock::now();
  const RequestRecord record = sender_for(server.address())->send(sample_request(), start);
  EXPECT_EQ(record.status, "OK");
  ASSERT_TRUE(record.queue_ms.has_value());
  EXPECT_DOUBLE_EQ(*record.queue_ms, 12.5);
  ASSERT_TRUE(record.ttft_ms.has_value());
  EXPECT_LE(*record.ttft_ms, record.e2e_ms);
  EXPECT_GE(record.send_offset_s, 0.0);
  EXPECT_EQ(record.index, 0u);
}

TEST(HttpSenderTest, TheResultsCacheStatusIsRecorded) {
  ScriptedServer server(
      streaming({{"result", R"({"requestId":"r","cacheStatus":"CACHE_STATUS_COALESCED"})"}}));
  v1::GenerateMeshRequest request = sample_request();
  request.set_bypass_cache(true);
  const RequestRecord record = sender_for(server.address())->send(request, SteadyClock::now());
  EXPECT_EQ(record.status, "OK");
  EXPECT_EQ(record.cache, CacheStatus::kCoalesced);
  // The flag goes out in the JSON body.
  ASSERT_EQ(server.requests().size(), 1u);
  v1::GenerateMeshRequest sent;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(server.requests()[0].body(), &sent).ok());
  EXPECT_TRUE(sent.bypass_cache());
}

TEST(HttpSenderTest, WithoutTheFieldTheXCacheHeaderCounts) {
  ScriptedServer server([](const auto&, Reply& reply) {
    reply.raw(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX-Cache: HIT\r\n"
        "Transfer-Encoding: chunked\r\n\r\n");
    reply.event("result", kResult);
    reply.end_stream();
  });
  const RequestRecord record = send_one(server);
  EXPECT_EQ(record.status, "OK");
  EXPECT_EQ(record.cache, CacheStatus::kHit);
}

TEST(HttpSenderTest, NoFieldNoHeaderIsUnknown) {
  ScriptedServer server(answer_ok);
  const RequestRecord record = send_one(server);
  EXPECT_EQ(record.status, "OK");
  EXPECT_EQ(record.cache, CacheStatus::kUnknown);
}

TEST(HttpSenderTest, TtftIsTakenWhenTheDecodingEventArrives) {
  ScriptedServer server([](const auto&, Reply& reply) {
    reply.stream_head();
    reply.event("progress", kQueued);
    std::this_thread::sleep_for(150ms);
    reply.event("progress", kDecoding);
    std::this_thread::sleep_for(400ms);  // decoding and meshing
    reply.event("progress", kDecoding);  // a later one changes nothing
    reply.event("result", kResult);
    reply.end_stream();
  });
  const RequestRecord record = send_one(server);
  EXPECT_EQ(record.status, "OK");
  ASSERT_TRUE(record.ttft_ms.has_value());
  EXPECT_GE(*record.ttft_ms, 150.0);
  EXPECT_LT(*record.ttft_ms, 450.0);  // long before the end
  EXPECT_GE(record.e2e_ms, 550.0);
  EXPECT_GE(record.e2e_ms - *record.ttft_ms, 350.0);
}

TEST(HttpSenderTest, NoDecodingEventNoTtft) {
  ScriptedServer server(streaming({{"progress", kQueued}, {"result", kResult}}));
  const RequestRecord record = send_one(server);
  EXPECT_EQ(record.status, "OK");
  EXPECT_FALSE(record.ttft_ms.has_value());
}

TEST(HttpSenderTest, EventsSplitAcrossChunksAndCrLf) {
  ScriptedServer server([](const auto&, Reply& reply) {
    reply.stream_head();
    const std::string body = std::string("event: progress\r\ndata: ") + kDecoding +
                             "\r\n\r\nevent: result\r\ndata: " + kResult + "\r\n\r\n";
    for (size_t pos = 0; pos < body.size(); pos += 5) reply.chunk(body.substr(pos, 5));
    reply.end_stream();
  });
  const RequestRecord record = send_one(server);
  EXPECT_EQ(record.status, "OK");
  EXPECT_TRUE(record.ttft_ms.has_value());
  EXPECT_DOUBLE_EQ(record.queue_ms.value_or(-1), 12.5);
}

TEST(HttpSenderTest, AnEventStreamOfKnownLengthIsReadToo) {
  ScriptedServer server([](const auto&, Reply& reply) {
    const std::string body = std::string("event: progress\ndata: ") + kDecoding +
                             "\n\nevent: result\ndata: " + kResult + "\n\n";
    reply.raw("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: " +
              std::to_string(body.size()) + "\r\n\r\n" + body);
  });
  const RequestRecord record = send_one(server);
  EXPECT_EQ(record.status, "OK");
  EXPECT_TRUE(record.ttft_ms.has_value());
}

TEST(HttpSenderTest, AnErrorEventCountsAsItsStatus) {
  ScriptedServer server(streaming(
      {{"progress", kQueued},
       {"error", R"({"error":{"code":504,"status":"DEADLINE_EXCEEDED","message":"deadline"}})"}}));
  const RequestRecord record = send_one(server);
  EXPECT_EQ(record.status, "DEADLINE_EXCEEDED");
  EXPECT_FALSE(record.queue_ms.has_value());
}

TEST(HttpSenderTest, APlainErrorStatusCountsAsItsBodysStatus) {
  ScriptedServer server([](const http::request<http::string_body>& req, Reply& reply) {
    if (req[http::field::authorization] == "Bearer wrong") {
      reply.plain(401, "Unauthorized",
                  R"({"error":{"code":401,"status":"UNAUTHENTICATED","message":"no key"}})",
                  "WWW-Authenticate: Bearer\r\n");
    } else {
      reply.plain(429, "Too Many Requests",
                  R"({"error":{"code":429,"status":"RESOURCE_EXHAUSTED","message":"queue full"}})",
                  "Retry-After: 1\r\n");
    }
  });
  const auto sender = sender_for(server.address());
  const RequestRecord record = sender->send(sample_request(), SteadyClock::now());
  EXPECT_EQ(record.status, "RESOURCE_EXHAUSTED");
  EXPECT_FALSE(record.ttft_ms.has_value());
  EXPECT_FALSE(record.queue_ms.has_value());
  EXPECT_EQ(sender->send(sample_request(), SteadyClock::now()).status, "RESOURCE_EXHAUSTED");
  EXPECT_EQ(server.connections(), 1);  // an error answer keeps the connection
  EXPECT_EQ(sender_for(server.address(), 5000, "wrong")
                ->send(sample_request(), SteadyClock::now())
                .status,
            "UNAUTHENTICATED");
}

TEST(HttpSenderTest, AnErrorStatusWithoutABodyCountsByTheHttpStatus) {
  ScriptedServer server([](const auto&, Reply& reply) { reply.plain(503, "Unavailable", ""); });
  EXPECT_EQ(send_one(server).status, "UNAVAILABLE");
}

TEST(HttpSenderTest, AStreamWithoutAResultIsNoResult) {
  ScriptedServer server(streaming({{"progress", kDecoding}}));
  const RequestRecord record = send_one(server);
  EXPECT_EQ(record.status, "NO_RESULT");
  EXPECT_TRUE(record.ttft_ms.has_value());
}

TEST(HttpSenderTest, AResultThatIsNoResponseIsInternal) {
  ScriptedServer server(streaming({{"result", R"({"timings": "soon"})"}}));
  EXPECT_EQ(send_one(server).status, "INTERNAL");
}

TEST(HttpSenderTest, AConnectionDroppedMidStreamIsUnavailable) {
  ScriptedServer server([](const auto&, Reply& reply) {
    reply.stream_head();
    reply.event("progress", kDecoding);
    reply.close_after();
  });
  const auto sender = sender_for(server.address());
  EXPECT_EQ(sender->send(sample_request(), SteadyClock::now()).status, "UNAVAILABLE");
}

TEST(HttpSenderTest, AResultBeforeTheConnectionDropsIsOk) {
  ScriptedServer server([](const auto&, Reply& reply) {
    reply.stream_head();
    reply.event("result", kResult);
    reply.close_after();  // no last chunk
  });
  EXPECT_EQ(send_one(server).status, "OK");
}

TEST(HttpSenderTest, KeepsOneConnectionForItsRequests) {
  ScriptedServer server(answer_ok);
  const auto sender = sender_for(server.address());
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(sender->send(sample_request(), SteadyClock::now()).status, "OK") << i;
  }
  EXPECT_EQ(server.connections(), 1);
  EXPECT_EQ(server.requests().size(), 5u);
  // Another sender, another connection.
  EXPECT_EQ(send_one(server).status, "OK");
  EXPECT_EQ(server.connections(), 2);
}

TEST(HttpSenderTest, ReconnectsAfterConnectionClose) {
  ScriptedServer server([](const auto& req, Reply& reply) {
    reply.plain(200, "OK", "", "Connection: close\r\n");
    (void)req;
    reply.close_after();
  });
  const auto sender = sender_for(server.address());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(sender->send(sample_request(), SteadyClock::now()).status, "NO_RESULT") << i;
  }
  EXPECT_EQ(server.connections(), 3);
}

TEST(HttpSenderTest, ReconnectsWhenTheServerClosedTheIdleConnection) {
  // The server closes a kept-alive connection while it is idle (its idle timeout), without
  // saying so: the next request sees that and goes out on a new one.
  ScriptedServer server([](const auto& req, Reply& reply) {
    answer_ok(req, reply);
    reply.close_after();
  });
  const auto sender = sender_for(server.address());
  EXPECT_EQ(sender->send(sample_request(), SteadyClock::now()).status, "OK");
  std::this_thread::sleep_for(100ms);  // the close has arrived
  EXPECT_EQ(sender->send(sample_request(), SteadyClock::now()).status, "OK");
  EXPECT_EQ(sender->send(sample_request(), SteadyClock::now()).status, "OK");
  EXPECT_EQ(server.connections(), 3);
  EXPECT_EQ(server.requests().size(), 3u);  // each request reached the server once
}

TEST(HttpSenderTest, AKeptConnectionClosedAsTheRequestArrivesSendsItAgainOnANewOne) {
  // The close that reusable() cannot see yet: the server takes the second request on the kept
  // connection and closes it without a byte of answer (its idle timeout crossing the request).
  // CI once saw this race as UNAVAILABLE.
  std::atomic<int> seen{0};
  ScriptedServer server([&seen](const auto& req, Reply& reply) {
    if (++seen == 2) {
      reply.close_after();
      return;
    }
    answer_ok(req, reply);
  });
  const auto sender = sender_for(server.address());
  EXPECT_EQ(sender->send(sample_request(), SteadyClock::now()).status, "OK");
  EXPECT_EQ(sender->send(sample_request(), SteadyClock::now()).status, "OK");
  EXPECT_EQ(server.connections(), 2);
  EXPECT_EQ(server.requests().size(), 3u);  // the dropped one, and the same again
}

TEST(HttpSenderTest, ARequestDroppedOnANewConnectionIsNotSentAgain) {
  // Only a kept connection's close is taken for the server's idle timeout, and only once.
  ScriptedServer server([](const auto& req, Reply& reply) {
    (void)req;
    reply.close_after();
  });
  EXPECT_EQ(send_one(server).status, "UNAVAILABLE");
  EXPECT_EQ(server.requests().size(), 1u);

  std::atomic<int> seen{0};
  ScriptedServer answers_once([&seen](const auto& req, Reply& reply) {
    if (++seen == 1) {
      answer_ok(req, reply);
    } else {
      reply.close_after();
    }
  });
  const auto sender = sender_for(answers_once.address());
  EXPECT_EQ(sender->send(sample_request(), SteadyClock::now()).status, "OK");
  EXPECT_EQ(sender->send(sample_request(), SteadyClock::now()).status, "UNAVAILABLE");
  EXPECT_EQ(answers_once.requests().size(), 3u);  // the kept connection's, and one more
  EXPECT_EQ(answers_once.connections(), 2);
}

TEST(HttpSenderTest, ExtraBytesAfterAnAnswerMakeANewConnection) {
  ScriptedServer server([](const auto& req, Reply& reply) {
    answer_ok(req, reply);
    reply.raw("HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n");  // unasked for
  });
  const auto sender = sender_for(server.address());
  EXPECT_EQ(sender->send(sample_request(), SteadyClock::now()).status, "OK");
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(sender->send(sample_request(), SteadyClock::now()).status, "OK");
  EXPECT_EQ(server.connections(), 2);
}

TEST(HttpSenderTest, ADeadlineThatPassesIsDeadlineExceeded) {
  ScriptedServer server([](const auto& req, Reply& reply) {
    if (req.body().find("\"slow\"") != std::string::npos) {
      reply.stream_head();
      reply.event("progress", kQueued);
      std::this_thread::sleep_for(1500ms);  // the client is gone by now
      reply.close_after();
      return;
    }
    answer_ok(req, reply);
  });
  const auto sender = sender_for(server.address(), 300);
  v1::GenerateMeshRequest slow = sample_request();
  slow.set_prompt("slow");
  const RequestRecord record = sender->send(slow, SteadyClock::now());
  EXPECT_EQ(record.status, "DEADLINE_EXCEEDED");
  EXPECT_GE(record.e2e_ms, 290.0);
  EXPECT_LT(record.e2e_ms, 1200.0);
  // The connection was given up; the next request gets a new one.
  EXPECT_EQ(sender->send(sample_request(), SteadyClock::now()).status, "OK");
  EXPECT_EQ(server.connections(), 2);
}

TEST(HttpSenderTest, ADeadlineBeforeTheHeadIsDeadlineExceeded) {
  ScriptedServer server([](const auto&, Reply& reply) {
    std::this_thread::sleep_for(800ms);
    reply.close_after();
  });
  const RequestRecord record =
      sender_for(server.address(), 200)->send(sample_request(), SteadyClock::now());
  EXPECT_EQ(record.status, "DEADLINE_EXCEEDED");
  EXPECT_LT(record.e2e_ms, 700.0);
}

TEST(HttpSenderTest, NoServerIsUnavailable) {
  int port = 0;
  {
    // A port that was free a moment ago and has no listener now.
    net::io_context io;
    tcp::acceptor acceptor(io, tcp::endpoint(net::ip::address_v4::loopback(), 0));
    port = acceptor.local_endpoint().port();
  }
  const auto sender = sender_for("127.0.0.1:" + std::to_string(port));
  const RequestRecord record = sender->send(sample_request(), SteadyClock::now());
  EXPECT_EQ(record.status, "UNAVAILABLE");
  EXPECT_EQ(sender->send(sample_request(), SteadyClock::now()).status, "UNAVAILABLE");
  EXPECT_FALSE(record.ttft_ms.has_value());
}

TEST(HttpSenderTest, AnUnknownHostIsUnavailable) {
  EXPECT_EQ(
      sender_for("no-such-host.invalid:80")->send(sample_request(), SteadyClock::now()).status,
      "UNAVAILABLE");
}

TEST(HttpSenderTest, HostPort) {
  EXPECT_EQ(parse_host_port("127.0.0.1:8080"), (HostPort{"127.0.0.1", "8080"}));
  EXPECT_EQ(parse_host_port("localhost:1"), (HostPort{"localhost", "1"}));
  EXPECT_EQ(parse_host_port("[::1]:65535"), (HostPort{"::1", "65535"}));
  for (const char* bad :
       {"", "127.0.0.1", "127.0.0.1:", ":8080", "host:port", "host:0", "host:65536", "host:123456",
        "::1:80", "[::1]", "[::1]80", "[]:80", "host:-1", "host:8080x", "http://host:80"}) {
    try {
      parse_host_port(bad);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("--server: expected HOST:PORT", 0), 0u) << e.what();
    }
  }
}

}  // namespace test_http_sender
}  // namespace cube3d
