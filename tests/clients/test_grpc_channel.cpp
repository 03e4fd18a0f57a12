// The clients' one gRPC channel (grpc_channel.h) against MeshServices on loopback ports: a reply
// larger than gRPC's default 4 MiB limit arrives whole; calls go round robin to the replicas
// whose health is SERVING only (none to one loading or draining, again to it once it serves, and
// a server without the health service counts as serving), while a health probe's channel reaches
// a replica that is not serving; over TLS the server is checked against the --ca root and the
// --server-name (a plaintext channel, an unknown root or the address instead of the name fail
// UNAVAILABLE); waiting for a serving replica ends when one serves (or at the deadline, for a
// server that is loading or down); a --server that is no address is refused before any
// connection.
#include "cube3d/clients/grpc_channel.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "clients/test_certificate.h"
#include "cube3d/v1/mesh_service.grpc.pb.h"
#include "eventually.h"
#include "expect_error.h"

namespace cube3d {
namespace test_grpc_channel {

using namespace std::chrono_literals;
using testing::Identity;
using testing::self_signed;

constexpr size_t kLargeReply = 5 << 20;  // past gRPC's default receive limit of 4 MiB

// Answers every GenerateMeshStream with one result whose encoded mesh is `encoded_bytes` long,
// and counts the calls it answered.
class OneResult final : public v1::MeshService::Service {
 public:
  explicit OneResult(size_t encoded_bytes) : encoded_bytes_(encoded_bytes) {}
  grpc::Status GenerateMeshStream(grpc::ServerContext*, const v1::GenerateMeshRequest* request,
                                  grpc::ServerWriter<v1::GenerateMeshEvent>* writer) override {
    ++calls_;
    v1::GenerateMeshEvent event;
    event.mutable_result()->set_request_id(request->request_id());
    event.mutable_result()->set_encoded(std::string(encoded_bytes_, 'm'));
    writer->Write(event);
    return grpc::Status::OK;
  }
  int calls() const { return calls_.load(); }

 private:
  const size_t encoded_bytes_;
  std::atomic<int> calls_{0};
};

enum class Health {
  kNone,        // no grpc.health.v1 service: its Watch is UNIMPLEMENTED
  kServing,     // gRPC's default health service, cube3d.v1.MeshService SERVING
  kNotServing,  // the same, NOT_SERVING (a replica loading its model, or draining)
};

class Server {
 public:
  Server(size_t encoded_bytes, const std::shared_ptr<grpc::ServerCredentials>& credentials,
         Health health = Health::kNone)
      : service_(encoded_bytes) {
    // A process-wide switch, read as a server is built: on for this one only, so that the other
    // tests' servers have no health service.
    grpc::EnableDefaultHealthCheckService(health != Health::kNone);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", credentials, &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    grpc::EnableDefaultHealthCheckService(false);
    if (health != Health::kNone) set_serving(health == Health::kServing);
  }
  ~Server() { server_->Shutdown(std::chrono::system_clock::now() + 2s); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int calls() const { return service_.calls(); }
  void set_serving(bool serving) {
    server_->GetHealthCheckService()->SetServingStatus(v1::MeshService::service_full_name(),
                                                       serving);
  }

 private:
  OneResult service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

std::shared_ptr<grpc::ServerCredentials> tls_credentials(const Identity& identity) {
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back({identity.key_pem, identity.cert_pem});
  return grpc::SslServerCredentials(options);
}

struct Answer {
  grpc::Status status;
  size_t encoded_bytes = 0;
};

Answer call(const std::shared_ptr<grpc::Channel>& channel) {
  const auto stub = v1::MeshService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 10s);
  v1::GenerateMeshRequest request;
  request.set_request_id("r");
  auto reader = stub->GenerateMeshStream(&context, request);
  Answer answer;
  v1::GenerateMeshEvent event;
  while (reader->Read(&event)) {
    if (event.has_result()) answer.encoded_bytes = event.result().encoded().size();
  }
  answer.status = reader->Finish();
  return answer;
}

ClientTls tls_with(const std::string& ca_pem, const std::string& server_name) {
  ClientTls tls;
  tls.enabled = true;
  tls.ca_pem = ca_pem;
  tls.server_name = server_name;
  return tls;
}

TEST(GrpcChannel, AReplyLargerThanGrpcsDefaultLimitArrivesWhole) {
  const Server server(kLargeReply, grpc::InsecureServerCredentials());
  const Answer answer = call(open_grpc_channel(server.address(), ClientTls{}));
  ASSERT_TRUE(answer.status.ok()) << answer.status.error_message();
  EXPECT_EQ(answer.encoded_bytes, kLargeReply);
}

TEST(GrpcChannel, CallsGoOnlyToReplicasWhoseHealthIsServing) {
  Server loading(16, grpc::InsecureServerCredentials(), Health::kNotServing);
  const Server serving(16, grpc::InsecureServerCredentials(), Health::kServing);
  const auto channel = open_grpc_channel(loading.address() + "," + serving.address(), ClientTls{});
  for (int i = 0; i < 8; ++i) {
    const Answer answer = call(channel);
    ASSERT_TRUE(answer.status.ok()) << answer.status.error_message();
  }
  EXPECT_EQ(loading.calls(), 0);
  EXPECT_EQ(serving.calls(), 8);

  // Once it serves, the channel's health watch hears it and round robin takes it in again.
  loading.set_serving(true);
  EXPECT_TRUE(testing::eventually([&] {
    EXPECT_TRUE(call(channel).status.ok());
    return loading.calls() > 0;
  }));
}

TEST(GrpcChannel, AServerWithoutTheHealthServiceCountsAsServing) {
  const Server plain(16, grpc::InsecureServerCredentials(), Health::kNone);
  const Answer answer = call(open_grpc_channel(plain.address(), ClientTls{}));
  ASSERT_TRUE(answer.status.ok()) << answer.status.error_message();
  EXPECT_EQ(plain.calls(), 1);
}

TEST(GrpcChannel, AHealthProbeReachesAReplicaThatIsNotServing) {
  const Server loading(16, grpc::InsecureServerCredentials(), Health::kNotServing);
  // For calls, no replica is SERVING: UNAVAILABLE at the client, the server never asked.
  EXPECT_EQ(call(open_grpc_channel(loading.address(), ClientTls{})).status.error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(loading.calls(), 0);
  // A probe's channel goes to it regardless (cube3d-client --health must hear NOT_SERVING).
  const Answer probed =
      call(open_grpc_channel(loading.address(), ClientTls{}, ChannelPurpose::kHealthProbe));
  ASSERT_TRUE(probed.status.ok()) << probed.status.error_message();
  EXPECT_EQ(loading.calls(), 1);
}

TEST(GrpcChannel, WaitingForAServingReplicaEndsWhenOneServes) {
  Server loading(16, grpc::InsecureServerCredentials(), Health::kNotServing);
  const auto channel = open_grpc_channel(loading.address(), ClientTls{});
  // Connected, but NOT_SERVING: no replica to call yet.
  EXPECT_FALSE(wait_for_a_serving_replica(*channel, std::chrono::system_clock::now() + 300ms));
  // A probe's channel is ready as soon as it connects.
  const auto probe =
      open_grpc_channel(loading.address(), ClientTls{}, ChannelPurpose::kHealthProbe);
  EXPECT_TRUE(wait_for_a_serving_replica(*probe, std::chrono::system_clock::now() + 10s));

  loading.set_serving(true);
  EXPECT_TRUE(wait_for_a_serving_replica(*channel, std::chrono::system_clock::now() + 10s));
  EXPECT_TRUE(call(channel).status.ok());
  EXPECT_EQ(loading.calls(), 1);
}

TEST(GrpcChannel, WaitingForAServingReplicaNeedsOneOfSeveral) {
  const Server loading(16, grpc::InsecureServerCredentials(), Health::kNotServing);
  const Server serving(16, grpc::InsecureServerCredentials(), Health::kServing);
  const auto channel = open_grpc_channel(loading.address() + "," + serving.address(), ClientTls{});
  EXPECT_TRUE(wait_for_a_serving_replica(*channel, std::chrono::system_clock::now() + 10s));
}

TEST(GrpcChannel, WaitingForAServerThatIsDownEndsAtTheDeadline) {
  std::string address;
  {
    const Server gone(16, grpc::InsecureServerCredentials());
    address = gone.address();
  }
  const auto channel = open_grpc_channel(address, ClientTls{});
  EXPECT_FALSE(wait_for_a_serving_replica(*channel, std::chrono::system_clock::now() + 300ms));
}

TEST(GrpcChannel, TlsChecksTheServerAgainstTheCaAndTheName) {
  const Identity identity = self_signed("localhost");
  const Server server(16, tls_credentials(identity));

  const Answer trusted =
      call(open_grpc_channel(server.address(), tls_with(identity.cert_pem, "localhost")));
  ASSERT_TRUE(trusted.status.ok()) << trusted.status.error_message();
  EXPECT_EQ(trusted.encoded_bytes, 16u);

  // By address, without --server-name: the certificate names localhost, not 127.0.0.1.
  EXPECT_EQ(call(open_grpc_channel(server.address(), tls_with(identity.cert_pem, "")))
                .status.error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // A root that did not sign the server's certificate.
  const Identity stranger = self_signed("localhost");
  EXPECT_EQ(call(open_grpc_channel(server.address(), tls_with(stranger.cert_pem, "localhost")))
                .status.error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // Plaintext to a TLS server.
  EXPECT_EQ(call(open_grpc_channel(server.address(), ClientTls{})).status.error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

TEST(GrpcChannel, AServerThatIsNoAddressIsRefusedNamingTheFlag) {
  testing::expect_error([] { open_grpc_channel("http://localhost:1", ClientTls{}); },
                        ErrorCode::kInvalidArgument,
                        std::vector<std::string>{"--server", "http://localhost:1"});
}

}  // namespace test_grpc_channel
}  // namespace cube3d
