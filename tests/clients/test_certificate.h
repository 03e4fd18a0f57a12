// Test support for the clients' TLS tests: a self-signed certificate (EC P-256, CA:TRUE, for
// DNS:<name>) and its key as PEM, made in the process with OpenSSL, so that no test needs the
// openssl command or a file of the repository that expires.
#pragma once

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

namespace cube3d::testing {

template <typename T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using Key = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using Cert = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using Bio = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;
using Extension = std::unique_ptr<X509_EXTENSION, Deleter<X509_EXTENSION, X509_EXTENSION_free>>;

inline void require_made(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string("making the test certificate: ") + what);
}

inline std::string pem_of(const std::function<int(BIO*)>& write) {
  const Bio bio(BIO_new(BIO_s_mem()));
  require_made(bio && write(bio.get()) == 1, "PEM");
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

inline void add_extension(X509* cert, int nid, const std::string& value) {
  X509V3_CTX context;
  X509V3_set_ctx_nodb(&context);
  X509V3_set_ctx(&context, cert, cert, nullptr, nullptr, 0);
  const Extension ext(X509V3_EXT_conf_nid(nullptr, &context, nid, value.c_str()));
  require_made(ext && X509_add_ext(cert, ext.get(), -1) == 1, "extension");
}

// A self-signed certificate for DNS:`name` and its key, as PEM.
struct Identity {
  std::string cert_pem;
  std::string key_pem;
};

inline Identity self_signed(const std::string& name) {
  const Key key(EVP_EC_gen("P-256"));
  require_made(key != nullptr, "key");
  const Cert cert(X509_new());
  require_made(cert && X509_set_version(cert.get(), 2) == 1, "version");
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 86400);
  require_made(X509_set_pubkey(cert.get(), key.get()) == 1, "public key");
  X509_NAME* subject = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1, 0);
  require_made(X509_set_issuer_name(cert.get(), subject) == 1, "issuer");
  add_extension(cert.get(), NID_basic_constraints, "critical,CA:TRUE");
  add_extension(cert.get(), NID_subject_alt_name, "DNS:" + name);
  require_made(X509_sign(cert.get(), key.get(), EVP_sha256()) > 0, "signature");
  return {pem_of([&](BIO* b) { return PEM_write_bio_X509(b, cert.get()); }), pem_of([&](BIO* b) {
            return PEM_write_bio_PrivateKey(b, key.get(), nullptr, nullptr, 0, nullptr, nullptr);
          })};
}

}  // namespace cube3d::testing
