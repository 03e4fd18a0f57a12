#include "cube3d/clients/request_sender.h"

#include "cube3d/clients/grpc_sender.h"
#include "cube3d/clients/http_sender.h"
#include "cube3d/core/error.h"

namespace cube3d {

Protocol parse_protocol(std::string_view name) {
  if (name == "grpc") return Protocol::kGrpc;
  if (name == "http") return Protocol::kHttp;
  throw invalid_argument("--protocol: expected grpc or http, got '" + std::string(name) + "'");
}

const char* protocol_name(Protocol protocol) {
  return protocol == Protocol::kHttp ? "http" : "grpc";
}

std::string bearer_authorization(const std::string& api_key) {
  return api_key.empty() ? std::string() : "Bearer " + api_key;
}

std::unique_ptr<SenderFactory> make_sender_factory(Protocol protocol,
                                                   const SenderOptions& options) {
  return protocol == Protocol::kHttp ? make_http_sender_factory(options)
                                     : make_grpc_sender_factory(options);
}

}  // namespace cube3d
