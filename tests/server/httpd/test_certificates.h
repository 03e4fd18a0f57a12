// Keys and X.509 certificates made in the test with OpenSSL (no openssl command, no files kept):
// self-signed or signed by a test CA, valid from and until any time, written as PEM into a
// folder the fixture removes.
#pragma once

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

namespace cube3d::testing_tls {

struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;
using Cert = std::unique_ptr<X509, X509Free>;

inline Key rsa_key(unsigned bits = 2048) { return Key(EVP_RSA_gen(bits)); }
inline Key ec_key() { return Key(EVP_EC_gen("P-256")); }

// A certificate for `key` named CN=`name` (and DNS:`name`), valid from now + `from_s` to now +
// `until_s` seconds; signed by `issuer` (and its key) or, without one, by itself. `ca` marks it
// a CA.
inline Cert certificate(EVP_PKEY* key, const std::string& name, long from_s, long until_s,
                        X509* issuer = nullptr, EVP_PKEY* issuer_key = nullptr, bool ca = false) {
  Cert cert(X509_new());
  X509_set_version(cert.get(), 2);
  static long serial = 1;
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), ++serial);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), from_s);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), until_s);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* subject = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert.get(), issuer ? X509_get_subject_name(issuer) : subject);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer ? issuer : cert.get(), cert.get(), nullptr, nullptr, 0);
  const auto add = [&](int nid, const std::string& value) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
    ASSERT_NE(ext, nullptr) << value;
    X509_add_ext(cert.get(), ext, -1);
    X509_EXTENSION_free(ext);
  };
  add(NID_basic_constraints, ca ? "critical,CA:TRUE" : "CA:FALSE");
  if (!ca) add(NID_subject_alt_name, "DNS:" + name);
  EXPECT_GT(X509_sign(cert.get(), issuer_key ? issuer_key : key, EVP_sha256()), 0);
  return cert;
}

inline std::string pem_of(X509* cert) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, cert);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<size_t>(n));
  BIO_free(bio);
  return out;
}

// The key as PEM; with a passphrase, encrypted (AES-256-CBC).
inline std::string pem_of(EVP_PKEY* key, const std::string& passphrase = "") {
  BIO* bio = BIO_new(BIO_s_mem());
  if (passphrase.empty()) {
    PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  } else {
    PEM_write_bio_PKCS8PrivateKey(bio, key, EVP_aes_256_cbc(), passphrase.data(),
                                  static_cast<int>(passphrase.size()), nullptr, nullptr);
  }
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<size_t>(n));
  BIO_free(bio);
  return out;
}

// A temporary folder for PEM files, removed with the object.
class PemFolder {
 public:
  explicit PemFolder(const std::string& tag)
      : dir_(std::filesystem::temp_directory_path() /
             ("cube3d-" + tag + "-" +
              std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
              std::to_string(reinterpret_cast<uintptr_t>(this)))) {
    std::filesystem::create_directories(dir_);
  }
  ~PemFolder() { std::filesystem::remove_all(dir_); }
  PemFolder(const PemFolder&) = delete;
  PemFolder& operator=(const PemFolder&) = delete;

  std::string write(const std::string& name, const std::string& text) const {
    const std::filesystem::path path = dir_ / name;
    std::ofstream(path, std::ios::binary) << text;
    return path.string();
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

 private:
  std::filesystem::path dir_;
};

}  // namespace cube3d::testing_tls
