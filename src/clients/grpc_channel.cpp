#include "cube3d/clients/grpc_channel.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <string>

#include "cube3d/clients/grpc_target.h"
#include "cube3d/v1/mesh_service.grpc.pb.h"

namespace cube3d {
namespace {

// Round robin (gRPC's default, pick_first, would send every call to the first address while it
// answers); for calls, over the addresses whose health watch says SERVING. The service config
// is the channel's default: the resolver brings none (gRPC C++ looks up no DNS TXT records).
std::string service_config(ChannelPurpose purpose) {
  std::string config = R"({"loadBalancingConfig": [{"round_robin": {}}])";
  if (purpose == ChannelPurpose::kCalls) {
    config += R"(, "healthCheckConfig": {"serviceName": ")" +
              std::string(v1::MeshService::service_full_name()) + R"("})";
  }
  return config + "}";
}

std::shared_ptr<grpc::ChannelCredentials> credentials(const ClientTls& tls,
                                                      grpc::ChannelArguments& channel_args) {
  if (!tls.enabled) return grpc::InsecureChannelCredentials();
  if (!tls.server_name.empty()) channel_args.SetSslTargetNameOverride(tls.server_name);
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = tls.ca_pem;  // empty: gRPC's (the system's) roots
  return grpc::SslCredentials(ssl);
}

}  // namespace

std::shared_ptr<grpc::Channel> open_grpc_channel(std::string_view servers, const ClientTls& tls,
                                                 ChannelPurpose purpose) {
  const std::string target = grpc_target(servers);
  grpc::ChannelArguments channel_args;
  channel_args.SetMaxReceiveMessageSize(-1);
  channel_args.SetServiceConfigJSON(service_config(purpose));
  return grpc::CreateCustomChannel(target, credentials(tls, channel_args), channel_args);
}

bool wait_for_a_serving_replica(grpc::Channel& channel,
                                std::chrono::system_clock::time_point deadline) {
  // GetState(true) to connect, then each state change until READY or the deadline.
  return channel.WaitForConnected(deadline);
}

}  // namespace cube3d
