// The event-driven HTTP server on a loopback port with a test handler: HTTP/1.1 done right
// (keep-alive, pipelining in order, HTTP/1.0, HEAD, chunked bodies, 100-continue, Connection:
// close), the deadlines (idle, header, body, write) and the connection limits, streamed
// answers, answers from other threads, abandonment, draining and stopping. Deadlines are short
// here (a few hundred ms); the assertions give each several times its value.
#include "cube3d/server/httpd/http_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cube3d/core/error.h"
#include "eventually.h"
#include "server/httpd/test_http_client.h"

namespace cube3d::http {
namespace test_http_server {

using namespace std::chrono_literals;
using testing_http::Connection;

using testing::eventually;

class HttpServerTest : public ::testing::Test {
 protected:
  ~HttpServerTest() override {
    server_.reset();
    for (auto& t : threads_) t.join();
  }

  void start(ServerOptions options = {}) {
    options.io_threads = 2;
    if (options.header_timeout == 10'000ms) options.header_timeout = 400ms;
    if (options.body_timeout == 60'000ms) options.body_timeout = 400ms;
    if (options.idle_timeout == 60'000ms) options.idle_timeout = 600ms;
    if (options.write_timeout == 30'000ms) options.write_timeout = 400ms;
    options.limits.max_body_bytes = 1 << 20;
    options.refusal = [this](const std::string& listener, int status, const std::string& message) {
      ++refusals_;
      return make_response(status, listener + " refused: " + message, "text/plain");
    };
    options.observer.closed = [this](const std::string&, const std::string& reason) {
      const std::lock_guard lock(mutex_);
      closed_.push_back(reason);
    };
    options.observer.refused = [this](const std::string&, const std::string& reason) {
      const std::lock_guard lock(mutex_);
      refused_.push_back(reason);
    };
    std::vector<Listener> listeners;
    listeners.push_back({"test", "127.0.0.1:0", "test_listen",
                         [this](const std::shared_ptr<Exchange>& ex) { handle(ex); }});
    server_ = std::make_unique<Server>(std::move(options), std::move(listeners));
    port_ = server_->port("test");
  }

  // Sends `raw` on `c` and reads its answer; a failure of the test (and an empty answer) when
  // either could not be done.
  static testing_http::Reply answer_to(Connection& c, std::string_view raw) {
    if (!c.send(raw)) {
      ADD_FAILURE() << "could not send " << raw;
      return {};
    }
    std::optional<testing_http::Reply> reply = c.read_reply();
    if (!reply) {
      ADD_FAILURE() << "no answer to " << raw;
      return {};
    }
    return std::move(*reply);
  }

  void handle(const std::shared_ptr<Exchange>& ex) {
    const Request& r = ex->request();
    ++handled_;
    if (r.path == "/echo") {
      Response response = make_response(200, r.method + " " + r.body, "text/plain");
      response.headers.set("X-Query", r.query);
      response.headers.set("X-Injected", "a\r\nX-Evil: 1");  // must not become a header
      ex->respond(std::move(response));
    } else if (r.path == "/slow") {
      // Answered from another thread, later.
      const int ms = std::stoi(r.query_param("ms").value_or("100"));
      std::lock_guard lock(mutex_);
      threads_.emplace_back([ex, ms] {
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
        ex->respond(make_response(200, "slow " + std::to_string(ms), "text/plain"));
      });
    } else if (r.path == "/big") {
      const size_t bytes = std::stoul(r.query_param("bytes").value_or("1000"));
      ex->on_finished([this](bool delivered) { ++(delivered ? delivered_ : abandoned_); });
      ex->respond(make_response(200, std::string(bytes, 'x'), "application/octet-stream"));
    } else if (r.path == "/stream") {
      const int n = std::stoi(r.query_param("n").value_or("3"));
      const int gap = std::stoi(r.query_param("gap").value_or("0"));
      ex->on_finished([this](bool delivered) { ++(delivered ? delivered_ : abandoned_); });
      Response head;
      head.headers.set("Content-Type", "text/event-stream");
      ex->start_stream(std::move(head), {":\n\n", 100ms});
      std::lock_guard lock(mutex_);
      threads_.emplace_back([ex, n, gap] {
        for (int i = 0; i < n; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(gap));
          ex->write("event " + std::to_string(i) + "\n");
        }
        ex->end_stream();
      });
    } else if (r.path == "/hold") {
      ex->on_finished([this](bool delivered) { ++(delivered ? delivered_ : abandoned_); });
      held_.push_back(ex);
    } else if (r.path == "/throw") {
      throw std::runtime_error("a handler that throws");
    } else {
      ex->respond(make_response(404, "no " + r.path, "text/plain"));
    }
  }

  std::vector<std::string> closed() {
    const std::lock_guard lock(mutex_);
    return closed_;
  }
  std::vector<std::string> refused() {
    const std::lock_guard lock(mutex_);
    return refused_;
  }
  size_t closed_with(const std::string& reason) {
    const auto all = closed();
    return static_cast<size_t>(std::count(all.begin(), all.end(), reason));
  }

  std::unique_ptr<Server> server_;
  int port_ = 0;
  std::mutex mutex_;
  std::vector<std::thread> threads_;
  std::vector<std::shared_ptr<Exchange>> held_;
  std::vector<std::string> closed_;
  std::vector<std::string> refused_;
  std::atomic<int> handled_{0};
  std::atomic<int> abandoned_{0};
  std::atomic<int> delivered_{0};
  std::atomic<int> refusals_{0};
};

TEST_F(HttpServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  start();
  Connection c(port_);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c.send_request("POST", "/echo?i=" + std::to_string(i), "body" + std::to_string(i)));
    const auto reply = c.read_reply();
    ASSERT_TRUE(reply);
    EXPECT_EQ(reply->status, 200);
    EXPECT_EQ(reply->body, "POST body" + std::to_string(i));
    EXPECT_EQ(reply->header("X-Query"), "i=" + std::to_string(i));
    EXPECT_EQ(reply->header("Connection"), "");  // HTTP/1.1: kept alive by default
    // A header value with CR LF stays one header.
    EXPECT_EQ(reply->header("X-Injected"), "a  X-Evil: 1");
    EXPECT_FALSE(reply->headers.has("X-Evil"));
  }
  EXPECT_EQ(handled_.load(), 3);
}

TEST_F(HttpServerTest, PipelinedRequestsAreAnsweredInOrder) {
  start();
  Connection c(port_);
  // The first answer comes last (from another thread, later); the order must hold anyway.
  ASSERT_TRUE(
      c.send("GET /slow?ms=200 HTTP/1.1\r\nHost: h\r\n\r\n"
             "POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc"
             "GET /echo?third HTTP/1.1\r\nHost: h\r\n\r\n"));
  const auto first = c.read_reply();
  const auto second = c.read_reply();
  const auto third = c.read_reply();
  ASSERT_TRUE(first && second && third);
  EXPECT_EQ(first->body, "slow 200");
  EXPECT_EQ(second->body, "POST abc");
  EXPECT_EQ(third->header("X-Query"), "third");
}

TEST_F(HttpServerTest, TheRequestAfterPipelinedOnesIsReadWhole) {
  // Found by cube3d-loadgen: the read that watches for a close while a request is handled was
  // pending into the parse buffer, which parsing the pipelined request then consumed (moving
  // its storage); the next request's bytes landed where the buffer no longer was.
  start();
  Connection c(port_);
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(
        c.send("GET /slow?ms=100 HTTP/1.1\r\nHost: h\r\n\r\n"
               "POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 6\r\n\r\nsecond"));
    auto first = c.read_reply();
    auto second = c.read_reply();
    ASSERT_TRUE(first && second);
    EXPECT_EQ(second->body, "POST second");
    ASSERT_TRUE(c.send_request("POST", "/echo", "third" + std::to_string(round)));
    const auto third = c.read_reply();
    ASSERT_TRUE(third);
    EXPECT_EQ(third->status, 200);
    EXPECT_EQ(third->body, "POST third" + std::to_string(round));
  }
}

TEST_F(HttpServerTest, Http10ClosesUnlessAskedToKeepAlive) {
  start();
  Connection c(port_);
  ASSERT_TRUE(c.send("GET /echo HTTP/1.0\r\n\r\n"));
  auto reply = c.read_reply();
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->status, 200);
  EXPECT_EQ(reply->header("Connection"), "close");
  EXPECT_TRUE(c.closed_by_peer(3s));

  Connection kept(port_);
  ASSERT_TRUE(kept.send("GET /echo HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
  reply = kept.read_reply();
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->header("Connection"), "keep-alive");
  ASSERT_TRUE(kept.send("GET /echo HTTP/1.0\r\n\r\n"));
  EXPECT_TRUE(kept.read_reply());
}

TEST_F(HttpServerTest, ConnectionCloseIsHonoured) {
  start();
  Connection c(port_);
  const testing_http::Reply reply =
      answer_to(c, "GET /echo HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(reply.header("Connection"), "close");
  EXPECT_TRUE(c.closed_by_peer(3s));
  EXPECT_TRUE(eventually([&] { return closed_with("done") == 1; }));
}

TEST_F(HttpServerTest, HeadAnswersTheHeadersOfGetWithoutTheBody) {
  start();
  Connection c(port_);
  ASSERT_TRUE(c.send("HEAD /big?bytes=1234 HTTP/1.1\r\nHost: h\r\n\r\n"));
  const auto reply = c.read_reply(/*head_request=*/true);
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->header("Content-Length"), "1234");
  // Nothing else arrives, and the connection serves the next request.
  ASSERT_TRUE(c.send("GET /echo HTTP/1.1\r\nHost: h\r\n\r\n"));
  const auto next = c.read_reply();
  ASSERT_TRUE(next);
  EXPECT_EQ(next->body, "GET ");
  EXPECT_EQ(delivered_.load(), 1);  // the HEAD exchange ended with its answer written
  EXPECT_EQ(abandoned_.load(), 0);
}

TEST_F(HttpServerTest, ChunkedBodiesAndExpectContinue) {
  start();
  Connection c(port_);
  ASSERT_TRUE(
      c.send("POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
             "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"));
  auto reply = c.read_reply();
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->body, "POST abcde");

  ASSERT_TRUE(
      c.send("POST /echo HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\n"
             "Content-Length: 4\r\n\r\n"));
  reply = c.read_reply();
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->status, 100);
  ASSERT_TRUE(c.send("body"));
  reply = c.read_reply();
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->body, "POST body");
}

TEST_F(HttpServerTest, AMalformedRequestIsRefusedAndTheConnectionClosed) {
  start();
  Connection c(port_);
  ASSERT_TRUE(
      c.send("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n"
             "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"));
  const auto reply = c.read_reply();
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->status, 400);
  EXPECT_EQ(reply->body.rfind("test refused: ", 0), 0u) << reply->body;
  EXPECT_EQ(reply->header("Connection"), "close");
  EXPECT_TRUE(c.closed_by_peer(3s));
  EXPECT_EQ(refusals_.load(), 1);
  EXPECT_EQ(handled_.load(), 0);
  EXPECT_TRUE(eventually([&] { return closed_with("refused_request") == 1; }));
}

TEST_F(HttpServerTest, AHandlerThatThrowsIs500AndTheServerGoesOn) {
  start();
  Connection c(port_);
  ASSERT_TRUE(c.send_request("GET", "/throw", ""));
  auto reply = c.read_reply();
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->status, 500);
  ASSERT_TRUE(c.send_request("GET", "/echo", ""));
  reply = c.read_reply();
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->status, 200);
}

TEST_F(HttpServerTest, ADrippingHeadIsCutByTheHeaderDeadline) {
  start();  // header_timeout 400 ms
  Connection c(port_);
  const std::string head = "GET /echo HTTP/1.1\r\nHost: h\r\nX-Slow: " + std::string(100, 'a');
  const auto started = std::chrono::steady_clock::now();
  bool cut = false;
  // One byte every 20 ms: each restarts no timer; the whole head's deadline still passes.
  for (const char byte : head) {
    if (!c.send(std::string(1, byte))) {
      cut = true;
      break;
    }
    if (c.closed_by_peer(20ms)) {
      cut = true;
      break;
    }
  }
  if (!cut) cut = c.closed_by_peer(3s);
  EXPECT_TRUE(cut);
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_GE(took, 350ms);
  EXPECT_LT(took, 3s);
  EXPECT_TRUE(eventually([&] { return closed_with("header_timeout") == 1; }));
  EXPECT_EQ(handled_.load(), 0);
}

TEST_F(HttpServerTest, IdleAndBodyDeadlines) {
  start();  // idle 600 ms, body 400 ms
  Connection idle(port_);
  EXPECT_TRUE(idle.closed_by_peer(3s));
  EXPECT_TRUE(eventually([&] { return closed_with("idle_timeout") == 1; }));

  Connection body(port_);
  ASSERT_TRUE(body.send("POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nhalf"));
  EXPECT_TRUE(body.closed_by_peer(3s));
  EXPECT_TRUE(eventually([&] { return closed_with("body_timeout") == 1; }));
  EXPECT_EQ(handled_.load(), 0);
}

TEST_F(HttpServerTest, AClientThatNeverReadsIsCutByTheWriteDeadline) {
  start();  // write_timeout 400 ms
  Connection c(port_);
  c.set_receive_buffer(4096);
  ASSERT_TRUE(c.send_request("GET", "/big?bytes=64000000", ""));
  // Never read: the server's writes stop making progress.
  EXPECT_TRUE(eventually([&] { return closed_with("write_timeout") == 1; }, 10s));
  EXPECT_EQ(abandoned_.load(), 1);
}

TEST_F(HttpServerTest, AClientThatLeavesAbandonsItsExchange) {
  start();
  {
    Connection c(port_);
    ASSERT_TRUE(c.send_request("GET", "/hold", ""));
    ASSERT_TRUE(eventually([&] { return handled_.load() == 1; }));
  }
  EXPECT_TRUE(eventually([&] { return abandoned_.load() == 1; }));
  EXPECT_TRUE(eventually([&] { return closed_with("client") == 1; }));
  // A late answer to the abandoned exchange is ignored.
  held_.front()->respond(make_response(200, "late", "text/plain"));
}

// A client that reads a whole answer and closes at once: its close can reach the strand before
// the completion of the write that carried the answer's last bytes; the answer went out and
// must count as delivered (the request counters and the cache's bookkeeping rely on it).
TEST_F(HttpServerTest, AnAnswerReadInFullAndClosedAtOnceIsDelivered) {
  start();
  constexpr int kExchanges = 300;
  for (int i = 0; i < kExchanges; ++i) {
    Connection c(port_);
    const bool stream = i % 3 == 0;
    ASSERT_TRUE(c.send_request("GET", stream ? "/stream?n=2" : "/big?bytes=40000", "",
                               {"Connection: close"}));
    const auto reply = c.read_reply();
    ASSERT_TRUE(reply) << i;
    ASSERT_EQ(reply->status, 200) << i;
  }  // each Connection closes as soon as its answer is read
  EXPECT_TRUE(eventually([&] { return delivered_.load() + abandoned_.load() == kExchanges; }));
  EXPECT_EQ(delivered_.load(), kExchanges);
  EXPECT_EQ(abandoned_.load(), 0);
}

TEST_F(HttpServerTest, StreamedAnswersAreChunkedAndKeptAliveWhenQuiet) {
  start();
  Connection c(port_);
  ASSERT_TRUE(c.send_request("GET", "/stream?n=3&gap=250", ""));
  const auto reply = c.read_reply();
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->header("Transfer-Encoding"), "chunked");
  // 250 ms between events, a keep-alive comment every 100 ms of quiet: some between them.
  EXPECT_NE(reply->body.find(":\n\nevent 0\n"), std::string::npos) << reply->body;
  EXPECT_NE(reply->body.find("event 2\n"), std::string::npos) << reply->body;
  // The connection serves the next request.
  ASSERT_TRUE(c.send_request("GET", "/echo", ""));
  EXPECT_TRUE(c.read_reply());
  EXPECT_EQ(delivered_.load(), 1);
  EXPECT_EQ(abandoned_.load(), 0);
}

TEST_F(HttpServerTest, AStreamToAnHttp10ClientEndsWithTheConnection) {
  start();
  Connection c(port_);
  const testing_http::Reply reply = answer_to(c, "GET /stream?n=2 HTTP/1.0\r\n\r\n");
  EXPECT_EQ(reply.header("Transfer-Encoding"), "");
  EXPECT_EQ(reply.body, "event 0\nevent 1\n");
}

TEST_F(HttpServerTest, ConnectionLimitsRefuseTheExcessAndServeTheRest) {
  ServerOptions options;
  options.max_connections = 3;
  options.idle_timeout = 5s;
  start(options);
  std::vector<std::unique_ptr<Connection>> open;
  for (int i = 0; i < 3; ++i) {
    open.push_back(std::make_unique<Connection>(port_));
    ASSERT_TRUE(open.back()->send_request("GET", "/echo", ""));
    ASSERT_TRUE(open.back()->read_reply());
  }
  Connection extra(port_);
  EXPECT_TRUE(extra.closed_by_peer(3s));
  EXPECT_TRUE(eventually([&] { return refused().size() == 1; }));
  EXPECT_EQ(refused().front(), "max_connections");
  // The open ones are still served; once one goes, a new one is taken.
  ASSERT_TRUE(open[1]->send_request("GET", "/echo", ""));
  EXPECT_TRUE(open[1]->read_reply());
  open[0].reset();
  EXPECT_TRUE(eventually([&] { return server_->stats("test").open_connections == 2; }));
  Connection next(port_);
  ASSERT_TRUE(next.send_request("GET", "/echo", ""));
  EXPECT_TRUE(next.read_reply());
}

TEST_F(HttpServerTest, PerClientLimit) {
  ServerOptions options;
  options.max_connections_per_client = 2;
  options.idle_timeout = 5s;
  start(options);
  Connection a(port_), b(port_);
  ASSERT_TRUE(a.send_request("GET", "/echo", ""));
  ASSERT_TRUE(a.read_reply());
  ASSERT_TRUE(b.send_request("GET", "/echo", ""));
  ASSERT_TRUE(b.read_reply());
  Connection c(port_);
  EXPECT_TRUE(c.closed_by_peer(3s));
  EXPECT_TRUE(eventually([&] { return refused().size() == 1; }));
  EXPECT_EQ(refused().front(), "max_connections_per_client");
}

TEST_F(HttpServerTest, DrainingClosesConnectionsAfterTheirAnswer) {
  start();
  Connection c(port_);
  server_->set_draining(true);
  ASSERT_TRUE(c.send_request("GET", "/echo", ""));
  const auto reply = c.read_reply();
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->header("Connection"), "close");
  EXPECT_TRUE(c.closed_by_peer(3s));
}

TEST_F(HttpServerTest, StopLetsAnAnswerInFlightFinishAndClosesIdleConnections) {
  start();
  Connection idle(port_);
  ASSERT_TRUE(idle.send_request("GET", "/echo", ""));
  ASSERT_TRUE(idle.read_reply());
  Connection busy(port_);
  ASSERT_TRUE(busy.send_request("GET", "/slow?ms=300", ""));
  ASSERT_TRUE(eventually([&] { return handled_.load() == 2; }));
  std::thread stopper([&] { server_->stop(5s); });
  const auto reply = busy.read_reply();
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->body, "slow 300");
  EXPECT_EQ(reply->header("Connection"), "close");
  EXPECT_TRUE(idle.closed_by_peer(3s));
  stopper.join();
  Connection after(port_);
  EXPECT_FALSE(after.connected() && after.send_request("GET", "/echo", "") && after.read_reply());
}

TEST(HttpServerListener, AListenersOwnPolicyIsStricter) {
  // The metrics endpoint's: a short head deadline and one request per connection.
  ServerOptions options;
  options.io_threads = 1;
  options.header_timeout = 5s;
  std::vector<Listener> listeners;
  listeners.push_back({"strict", "127.0.0.1:0", "strict_listen",
                       [](const std::shared_ptr<Exchange>& ex) {
                         ex->respond(make_response(200, "ok", "text/plain"));
                       },
                       300ms, /*keep_alive=*/false});
  Server server(options, std::move(listeners));
  Connection c(server.port("strict"));
  ASSERT_TRUE(c.send_request("GET", "/", ""));
  const auto reply = c.read_reply();
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->header("Connection"), "close");
  EXPECT_TRUE(c.closed_by_peer(3s));
  Connection slow(server.port("strict"));
  ASSERT_TRUE(slow.send("GET / HTTP/1.1\r\n"));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(slow.closed_by_peer(3s));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);  // 300 ms, not the server's 5 s
}

TEST_F(HttpServerTest, ABusyPortIsAnErrorNamingTheSetting) {
  start();
  std::vector<Listener> listeners;
  listeners.push_back({"again", "127.0.0.1:" + std::to_string(port_), "http_listen", {}});
  try {
    Server second(ServerOptions{}, std::move(listeners));
    FAIL() << "a second server listened on port " << port_;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_NE(std::string(e.what()).find("http_listen 127.0.0.1:" + std::to_string(port_)),
              std::string::npos)
        << e.what();
  }
  std::vector<Listener> bad;
  bad.push_back({"bad", "nonsense", "metrics_listen", {}});
  EXPECT_THROW(Server(ServerOptions{}, std::move(bad)), Error);
}

}  // namespace test_http_server
}  // namespace cube3d::http
