// The server's one TLS policy, for both front doors: written here once, applied to the HTTPS
// listener's context (apply_tls_policy) and handed to gRPC (use_tls_policy_for_grpc), so that a
// client meets the same protocol versions and cipher suites on either port. The reference is
// Mozilla's "intermediate" profile (https://wiki.mozilla.org/Security/Server_Side_TLS):
//   - TLS 1.2 and 1.3 only;
//   - TLS 1.2 suites with ECDHE key exchange (forward secrecy) and AEAD ciphers (AES-GCM,
//     ChaCha20-Poly1305) only: no static-RSA key exchange, no CBC, no SHA-1 MACs. Mozilla also
//     lists DHE-RSA suites; they are left out, as gRPC's OpenSSL context has no DH parameters to
//     offer them with, and every TLS 1.2 client of the last decade speaks ECDHE;
//   - TLS 1.3 suites as OpenSSL offers them (all three are AEAD and forward secret;
//     TLS_AES_256_GCM_SHA384, TLS_CHACHA20_POLY1305_SHA256, TLS_AES_128_GCM_SHA256);
//   - no renegotiation, no compression.
// The key exchange groups are the one thing the doors do not share: gRPC 1.51 offers P-256 alone
// and has no setting for it, HTTPS offers Mozilla's X25519, P-256 and P-384.
//
// gRPC 1.51 has no field for any of this in SslServerCredentialsOptions (nor in
// grpc_ssl_server_credentials_options): its TLS versions are fixed at 1.2 to 1.3, and its cipher
// list is read from the environment (GRPC_SSL_CIPHER_SUITES) once, when the process makes its
// first TLS credentials. use_tls_policy_for_grpc sets that variable, before then.
#pragma once

#include <openssl/types.h>

#include <optional>
#include <string>

namespace cube3d::http {

// An OpenSSL cipher string: the suites by OpenSSL's names, most preferred first (ECDSA ones for
// an ECDSA certificate, RSA for RSA), and security level 2 (keys of at least 112 bits'
// strength: RSA 2048, P-256; a weaker certificate is refused at start), which gRPC takes from the
// same string.
inline constexpr const char* kTls12CipherSuites =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:@SECLEVEL=2";
// The HTTPS door's key exchange groups.
inline constexpr const char* kTlsGroups = "X25519:P-256:P-384";
// Where gRPC 1.51 reads its cipher list.
inline constexpr const char* kGrpcCipherSuitesVariable = "GRPC_SSL_CIPHER_SUITES";

// Applies the policy to a server context: TLS 1.2 at least, the suites, the groups, no
// renegotiation. internal_error when OpenSSL refuses any of it (it never should).
void apply_tls_policy(SSL_CTX* context);

// Puts the cipher list where gRPC reads it; call before any gRPC TLS credentials are made (and
// before other threads read the environment). Returns a warning to log when the variable held
// another list, which it replaces: the policy is the server's, not the environment's.
std::optional<std::string> use_tls_policy_for_grpc();

}  // namespace cube3d::http
