#include "cube3d/server/httpd/tls_policy.h"

#include <openssl/ssl.h>

#include <cstdlib>
#include <string>

#include "cube3d/core/error.h"

namespace cube3d::http {

void apply_tls_policy(SSL_CTX* context) {
  if (SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION) != 1 ||
      SSL_CTX_set_cipher_list(context, kTls12CipherSuites) != 1 ||
      SSL_CTX_set1_groups_list(context, kTlsGroups) != 1) {
    throw internal_error("TLS: OpenSSL refused the server's TLS policy");
  }
  SSL_CTX_set_options(context, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
}

std::optional<std::string> use_tls_policy_for_grpc() {
  std::optional<std::string> warning;
  if (const char* before = std::getenv(kGrpcCipherSuitesVariable);
      before != nullptr && std::string(before) != kTls12CipherSuites) {
    warning = std::string(kGrpcCipherSuitesVariable) + "='" + before +
              "' is replaced by the server's TLS policy (" + kTls12CipherSuites +
              "), which both doors share";
  }
  ::setenv(kGrpcCipherSuitesVariable, kTls12CipherSuites, /*overwrite=*/1);
  return warning;
}

}  // namespace cube3d::http
