// The server's certificate, key and client CA (the config's tls: section), read and checked by
// the server itself before any listener starts, so that a bad file is named at once rather than
// surfacing as a listener that will not start (gRPC reported a garbage key as a busy port):
// every PEM block parses, the key is the certificate's, the client CA bundle holds certificates,
// and OpenSSL takes all of it under the TLS policy (tls_policy.h: a key too weak for its
// security level is refused here too). Both doors then serve exactly the bytes checked.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include <openssl/types.h>

namespace cube3d::http {

// A listener's TLS: PEM files (the server config's tls: section, which both doors share).
struct TlsOptions {
  std::string cert_file;       // the certificate chain, the server's own first
  std::string key_file;        // its private key (unencrypted)
  std::string client_ca_file;  // roots client certificates must chain to; empty: none asked for
  // With client_ca_file: true refuses a handshake without a client certificate that verifies;
  // false asks for one and verifies it when sent.
  bool require_client_certificate = true;
};

// What the files hold, checked.
struct TlsCredentials {
  std::string chain_pem;      // the certificate chain as read
  std::string key_pem;        // the private key as read
  std::string client_ca_pem;  // the client CA bundle as read; empty without one
  std::string subject;        // the server certificate's subject, one line ("CN=localhost")
  std::chrono::system_clock::time_point not_before;
  std::chrono::system_clock::time_point not_after;
};

// Reads and checks the files. invalid_argument naming the config key and the file for anything
// wrong ("tls.key_file /etc/cube3d/key.pem is not the key of tls.cert_file ..."); not_found for a
// file that does not exist, named the same way. Expiry is not an error here (see
// expiry_warning): an expired certificate is the operator's to renew, and the log says so.
TlsCredentials load_tls_files(const TlsOptions& files);

// Sets up a server context with the policy and the checked credentials: the chain, the key, and
// with a client CA the verification of client certificates (required or optional).
void configure_tls_context(SSL_CTX* context, const TlsCredentials& credentials,
                           const TlsOptions& files);

// Seconds until the certificate expires (negative once it has), for
// cube3d_tls_certificate_expiry_seconds.
double seconds_until_expiry(const TlsCredentials& credentials,
                            std::chrono::system_clock::time_point now);

// A line for the log when the certificate has expired, expires within `window`, or is not valid
// yet at `now`; nullopt when it is good for longer.
std::optional<std::string> expiry_warning(const TlsCredentials& credentials,
                                          const TlsOptions& files,
                                          std::chrono::system_clock::time_point now,
                                          std::chrono::hours window = std::chrono::hours(24 * 30));

}  // namespace cube3d::http
