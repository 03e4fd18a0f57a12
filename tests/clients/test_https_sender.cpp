// The HTTP sender over HTTPS (SenderOptions::tls) against a TLS server on a loopback port whose
// certificate the test makes (EC P-256, self-signed, for DNS:localhost): an answer over TLS on
// one kept connection with SNI, a chain or a name it cannot trust failing UNAVAILABLE at once, a
// server that never handshakes costing no more than the deadline, and close_notify on an
// orderly close.
#include <openssl/ssl.h>

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "clients/loopback_listener.h"
#include "clients/test_certificate.h"
#include "cube3d/clients/http_sender.h"
#include "eventually.h"

namespace cube3d {
namespace test_https_sender {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;

using testing::Identity;
using testing::self_signed;

constexpr const char* kEvents =
    "event: progress\ndata: {\"stage\":\"STAGE_DECODING\",\"tokensDone\":1}\n\n"
    "event: result\ndata: {\"requestId\":\"r\",\"timings\":{\"queueMs\":3}}\n\n";

// Accepts TLS connections on 127.0.0.1 (a thread each) and answers every request with kEvents;
// `silent`: accepts and never handshakes. `close_after_answer`: Connection: close.
class TlsServer {
 public:
  TlsServer(const Identity& identity, bool silent = false, bool close_after_answer = false)
      : context_(server_context(identity)),
        close_after_answer_(close_after_answer),
        listener_([this](tcp::socket socket) { serve(std::move(socket)); }, silent) {}

  int port() const { return listener_.port(); }
  int handshakes() const { return handshakes_.load(); }
  int answers() const { return answers_.load(); }
  int close_notifies() const { return close_notifies_.load(); }
  std::string server_name() const {
    const std::lock_guard lock(mutex_);
    return server_name_;
  }

 private:
  // Made before the listener starts: a connection may be served at once.
  static ssl::context server_context(const Identity& identity) {
    ssl::context context(ssl::context::tls_server);
    context.use_certificate_chain(net::buffer(identity.cert_pem));
    context.use_private_key(net::buffer(identity.key_pem), ssl::context::pem);
    return context;
  }

  void serve(tcp::socket socket) {
    beast::ssl_stream<tcp::socket> stream(std::move(socket), context_);
    boost::system::error_code ec;
    stream.handshake(ssl::stream_base::server, ec);
    if (ec) return;  // the client refused the certificate
    ++handshakes_;
    if (const char* sni = SSL_get_servername(stream.native_handle(), TLSEXT_NAMETYPE_host_name)) {
      const std::lock_guard lock(mutex_);
      server_name_ = sni;
    }
    beast::flat_buffer buffer;
    for (;;) {
      http::request<http::string_body> request;
      http::read(stream, buffer, request, ec);
      if (ec == http::error::end_of_stream) {  // the client's close_notify: answer it
        ++close_notifies_;
        stream.shutdown(ec);
        return;
      }
      if (ec) return;
      http::response<http::string_body> response{http::status::ok, 11};
      response.set(http::field::content_type, "text/event-stream");
      response.body() = kEvents;
      response.keep_alive(!close_after_answer_);
      response.prepare_payload();
      http::write(stream, response, ec);
      if (ec) return;
      ++answers_;
    }
  }

  ssl::context context_;
  const bool close_after_answer_;
  std::atomic<int> handshakes_{0}, answers_{0}, close_notifies_{0};
  mutable std::mutex mutex_;
  std::string server_name_;
  testing::LoopbackListener listener_;  // last: its threads are joined before the rest goes
};

std::unique_ptr<RequestSender> https_sender(const std::string& server, const std::string& ca_pem,
                                            const std::string& server_name = "",
                                            int64_t deadline_ms = 5000) {
  SenderOptions options;
  options.server = server;
  options.deadline_ms = deadline_ms;
  options.tls.enabled = true;
  options.tls.ca_pem = ca_pem;
  options.tls.ca_path = "test-ca.pem";
  options.tls.server_name = server_name;
  return make_http_sender_factory(options)->make_sender();
}

v1::GenerateMeshRequest sample_request() {
  v1::GenerateMeshRequest r;
  r.set_prompt("a sci-fi supply crate");
  return r;
}

class HttpsSenderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { identity_ = new Identity(self_signed("localhost")); }
  static void TearDownTestSuite() {
    delete identity_;
    identity_ = nullptr;
  }
  static const Identity& identity() { return *identity_; }

 private:
  static Identity* identity_;
};
Identity* HttpsSenderTest::identity_ = nullptr;

TEST_F(HttpsSenderTest, AnswersOverTlsOnOneConnectionWithSni) {
  TlsServer server(identity());
  {
    const auto sender =
        https_sender("localhost:" + std::to_string(server.port()), identity().cert_pem);
    for (int i = 0; i < 3; ++i) {
      const RequestRecord record = sender->send(sample_request(), SteadyClock::now());
      EXPECT_EQ(record.status, "OK") << i;
      EXPECT_EQ(record.queue_ms, 3.0);
      EXPECT_TRUE(record.ttft_ms.has_value());
    }
  }
  EXPECT_EQ(server.handshakes(), 1);  // kept alive
  EXPECT_EQ(server.answers(), 3);
  EXPECT_EQ(server.server_name(), "localhost");
}

TEST_F(HttpsSenderTest, ByAddressWithTheServerName) {
  TlsServer server(identity());
  const auto sender =
      https_sender("127.0.0.1:" + std::to_string(server.port()), identity().cert_pem, "localhost");
  EXPECT_EQ(sender->send(sample_request(), SteadyClock::now()).status, "OK");
  EXPECT_EQ(server.server_name(), "localhost");
}

TEST_F(HttpsSenderTest, AnotherCaIsUnavailable) {
  TlsServer server(identity());
  const Identity stranger = self_signed("localhost");
  const auto sender = https_sender("localhost:" + std::to_string(server.port()), stranger.cert_pem);
  for (int i = 0; i < 2; ++i) {  // each request tries afresh
    const RequestRecord record = sender->send(sample_request(), SteadyClock::now());
    EXPECT_EQ(record.status, "UNAVAILABLE");
    EXPECT_LT(record.e2e_ms, 4000);
  }
  EXPECT_EQ(server.handshakes(), 0);
  EXPECT_EQ(server.answers(), 0);
}

TEST_F(HttpsSenderTest, ACertificateForAnotherNameIsUnavailable) {
  TlsServer server(identity());
  // By address without --server-name: the certificate names localhost, not 127.0.0.1.
  EXPECT_EQ(https_sender("127.0.0.1:" + std::to_string(server.port()), identity().cert_pem)
                ->send(sample_request(), SteadyClock::now())
                .status,
            "UNAVAILABLE");
  EXPECT_EQ(https_sender("localhost:" + std::to_string(server.port()), identity().cert_pem,
                         "cube3d.example")
                ->send(sample_request(), SteadyClock::now())
                .status,
            "UNAVAILABLE");
  EXPECT_EQ(server.answers(), 0);
}

TEST_F(HttpsSenderTest, AHandshakeThatNeverEndsIsDeadlineExceeded) {
  TlsServer server(identity(), /*silent=*/true);
  const auto start = std::chrono::steady_clock::now();
  const RequestRecord record =
      https_sender("localhost:" + std::to_string(server.port()), identity().cert_pem, "", 300)
          ->send(sample_request(), SteadyClock::now());
  EXPECT_EQ(record.status, "DEADLINE_EXCEEDED");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST_F(HttpsSenderTest, AnOrderlyCloseSaysCloseNotify) {
  TlsServer server(identity(), /*silent=*/false, /*close_after_answer=*/true);
  const auto sender =
      https_sender("localhost:" + std::to_string(server.port()), identity().cert_pem);
  EXPECT_EQ(sender->send(sample_request(), SteadyClock::now()).status, "OK");
  EXPECT_EQ(sender->send(sample_request(), SteadyClock::now()).status, "OK");
  EXPECT_EQ(server.handshakes(), 2);  // Connection: close, so a new connection each
  // Each connection ended with the client's close_notify, not a bare FIN (which the server
  // would read as a truncation).
  EXPECT_TRUE(testing::eventually([&] { return server.close_notifies() == 2; }));
}

}  // namespace test_https_sender
}  // namespace cube3d
