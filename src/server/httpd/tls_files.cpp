#include "cube3d/server/httpd/tls_files.h"

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <spdlog/fmt/fmt.h>

#include <cmath>
#include <ctime>
#include <memory>
#include <string_view>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/core/files.h"
#include "cube3d/server/httpd/tls_policy.h"

namespace cube3d::http {
namespace {

constexpr std::string_view kCertKey = "tls.cert_file";
constexpr std::string_view kKeyKey = "tls.key_file";
constexpr std::string_view kCaKey = "tls.client_ca_file";
// A CA bundle may be a system's whole (a few hundred KiB); nothing legitimate is near this.
constexpr int64_t kMaxPemBytes = int64_t{16} << 20;

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct CtxFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Certificate = std::unique_ptr<X509, X509Free>;
using PrivateKey = std::unique_ptr<EVP_PKEY, KeyFree>;

// OpenSSL's reason for the last failure ("key values mismatch"), its error queue emptied.
std::string openssl_reason() {
  unsigned long last = 0;
  while (const unsigned long e = ERR_get_error()) last = e;
  if (last == 0) return "no reason given";
  const char* reason = ERR_reason_error_string(last);
  return reason != nullptr ? reason : "error " + std::to_string(last);
}

Error file_error(std::string_view key, const std::string& path, const std::string& what) {
  return invalid_argument(std::string(key) + " " + path + " " + what);
}

std::string read_pem(std::string_view key, const std::string& path) {
  try {
    return read_file(path, key, kMaxPemBytes);
  } catch (const Error& e) {
    throw Error(e.code(), std::string(key) + ": " + e.what());
  }
}

Bio memory_bio(const std::string& pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// Every PEM block of `pem`, each a certificate that parses whole; at least one.
std::vector<Certificate> read_certificates(std::string_view key, const std::string& path,
                                           const std::string& pem) {
  std::vector<Certificate> out;
  const Bio bio = memory_bio(pem);
  ERR_clear_error();
  for (;;) {
    char* name = nullptr;
    char* header = nullptr;
    unsigned char* data = nullptr;
    long length = 0;
    if (PEM_read_bio(bio.get(), &name, &header, &data, &length) != 1) {
      const unsigned long e = ERR_peek_last_error();
      // No further block: the normal end (text outside blocks is allowed, as OpenSSL allows it).
      if (ERR_GET_LIB(e) == ERR_LIB_PEM && ERR_GET_REASON(e) == PEM_R_NO_START_LINE) {
        ERR_clear_error();
        break;
      }
      throw file_error(key, path,
                       "has a PEM block that does not read after certificate " +
                           std::to_string(out.size()) + " (" + openssl_reason() + ")");
    }
    const std::string block_name = name;
    const unsigned char* cursor = data;
    Certificate certificate(block_name == "CERTIFICATE" || block_name == "TRUSTED CERTIFICATE"
                                ? d2i_X509(nullptr, &cursor, length)
                                : nullptr);
    const bool whole = certificate && cursor == data + length;
    OPENSSL_free(name);
    OPENSSL_free(header);
    OPENSSL_free(data);
    if (block_name != "CERTIFICATE" && block_name != "TRUSTED CERTIFICATE") {
      throw file_error(key, path,
                       "holds a PEM '" + block_name +
                           "' block where only certificates belong (a key goes in tls.key_file)");
    }
    if (!whole) {
      throw file_error(key, path,
                       "has a certificate (block " + std::to_string(out.size() + 1) +
                           ") that does not parse as X.509 (" + openssl_reason() + ")");
    }
    out.push_back(std::move(certificate));
  }
  if (out.empty()) throw file_error(key, path, "holds no PEM certificate");
  return out;
}

// A password callback that has none: an encrypted key fails instead of prompting on a terminal.
int no_password(char*, int, int, void*) { return -1; }

PrivateKey read_key(const std::string& path, const std::string& pem) {
  const Bio bio = memory_bio(pem);
  ERR_clear_error();
  PrivateKey key(PEM_read_bio_PrivateKey(bio.get(), nullptr, no_password, nullptr));
  if (!key) {
    const std::string reason = openssl_reason();
    if (pem.find("ENCRYPTED") != std::string::npos) {
      throw file_error(kKeyKey, path,
                       "is an encrypted private key: the server reads unencrypted ones "
                       "(openssl pkey -in KEY -out PLAIN_KEY)");
    }
    throw file_error(kKeyKey, path, "holds no PEM private key that reads (" + reason + ")");
  }
  return key;
}

std::chrono::system_clock::time_point time_of(const ASN1_TIME* t) {
  std::tm tm{};
  if (ASN1_TIME_to_tm(t, &tm) != 1) return {};
  return std::chrono::system_clock::from_time_t(timegm(&tm));
}

std::string subject_of(X509* certificate) {
  const Bio bio(BIO_new(BIO_s_mem()));
  X509_NAME_print_ex(bio.get(), X509_get_subject_name(certificate), 0, XN_FLAG_RFC2253);
  char* text = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &text);
  return n > 0 ? std::string(text, static_cast<size_t>(n)) : std::string("(no subject)");
}

std::string utc(std::chrono::system_clock::time_point t) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

std::string days(double seconds) {
  return fmt::format("{:.1f} days", std::abs(seconds) / 86'400.0);
}

}  // namespace

void configure_tls_context(SSL_CTX* context, const TlsCredentials& credentials,
                           const TlsOptions& files) {
  apply_tls_policy(context);
  ERR_clear_error();
  const std::vector<Certificate> chain =
      read_certificates(kCertKey, files.cert_file, credentials.chain_pem);
  if (SSL_CTX_use_certificate(context, chain.front().get()) != 1) {
    throw file_error(
        kCertKey, files.cert_file,
        "is refused by OpenSSL under the server's TLS policy (" + openssl_reason() + ")");
  }
  for (size_t i = 1; i < chain.size(); ++i) {
    if (SSL_CTX_add1_chain_cert(context, chain[i].get()) != 1) {
      throw file_error(kCertKey, files.cert_file,
                       "has a chain certificate OpenSSL refuses (" + openssl_reason() + ")");
    }
  }
  const PrivateKey key = read_key(files.key_file, credentials.key_pem);
  if (SSL_CTX_use_PrivateKey(context, key.get()) != 1 || SSL_CTX_check_private_key(context) != 1) {
    throw file_error(kKeyKey, files.key_file,
                     "is not the key of " + std::string(kCertKey) + " " + files.cert_file + " (" +
                         openssl_reason() + ")");
  }
  if (!files.client_ca_file.empty()) {
    X509_STORE* store = SSL_CTX_get_cert_store(context);
    for (const Certificate& ca :
         read_certificates(kCaKey, files.client_ca_file, credentials.client_ca_pem)) {
      if (X509_STORE_add_cert(store, ca.get()) != 1) {
        const unsigned long e = ERR_peek_last_error();
        // The same root twice in a bundle is harmless.
        if (ERR_GET_REASON(e) != X509_R_CERT_ALREADY_IN_HASH_TABLE) {
          throw file_error(kCaKey, files.client_ca_file,
                           "has a certificate OpenSSL refuses (" + openssl_reason() + ")");
        }
        ERR_clear_error();
      }
    }
    SSL_CTX_set_verify(context,
                       files.require_client_certificate
                           ? SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT
                           : SSL_VERIFY_PEER,
                       nullptr);
  }
}

TlsCredentials load_tls_files(const TlsOptions& files) {
  TlsCredentials out;
  out.chain_pem = read_pem(kCertKey, files.cert_file);
  out.key_pem = read_pem(kKeyKey, files.key_file);
  if (!files.client_ca_file.empty()) out.client_ca_pem = read_pem(kCaKey, files.client_ca_file);

  const std::vector<Certificate> chain =
      read_certificates(kCertKey, files.cert_file, out.chain_pem);
  const PrivateKey key = read_key(files.key_file, out.key_pem);
  ERR_clear_error();
  if (X509_check_private_key(chain.front().get(), key.get()) != 1) {
    ERR_clear_error();
    throw file_error(kKeyKey, files.key_file,
                     "is not the key of " + std::string(kCertKey) + " " + files.cert_file +
                         " (the certificate " + subject_of(chain.front().get()) +
                         " holds another public key)");
  }
  if (!files.client_ca_file.empty()) {
    read_certificates(kCaKey, files.client_ca_file, out.client_ca_pem);
  }
  // What OpenSSL itself refuses under the policy (a key too small for its security level, say),
  // named here rather than at the first listener.
  const std::unique_ptr<SSL_CTX, CtxFree> trial(SSL_CTX_new(TLS_server_method()));
  if (!trial) throw internal_error("TLS: SSL_CTX_new failed (" + openssl_reason() + ")");
  configure_tls_context(trial.get(), out, files);

  out.subject = subject_of(chain.front().get());
  out.not_before = time_of(X509_get0_notBefore(chain.front().get()));
  out.not_after = time_of(X509_get0_notAfter(chain.front().get()));
  return out;
}

double seconds_until_expiry(const TlsCredentials& credentials,
                            std::chrono::system_clock::time_point now) {
  return std::chrono::duration<double>(credentials.not_after - now).count();
}

std::optional<std::string> expiry_warning(const TlsCredentials& credentials,
                                          const TlsOptions& files,
                                          std::chrono::system_clock::time_point now,
                                          std::chrono::hours window) {
  const std::string which =
      std::string(kCertKey) + " " + files.cert_file + " (" + credentials.subject + ")";
  const double left = seconds_until_expiry(credentials, now);
  if (left <= 0) {
    return which + " expired " + days(left) + " ago (" + utc(credentials.not_after) +
           "): clients that check it refuse the connection; renew it";
  }
  if (credentials.not_after - now < window) {
    return which + " expires in " + days(left) + " (" + utc(credentials.not_after) + "): renew it";
  }
  if (credentials.not_before > now) {
    return which + " is not valid before " + utc(credentials.not_before) +
           ": clients that check it refuse the connection until then";
  }
  return std::nullopt;
}

}  // namespace cube3d::http
