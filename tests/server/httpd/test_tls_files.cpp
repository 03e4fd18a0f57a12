// The server's own check of its TLS files (issue 58: a key that was not the certificate's, a
// garbage certificate or CA were reported by gRPC as a busy port, naming no file): each problem
// is an error naming the config key and the file, and the certificate's expiry is told.
#include "cube3d/server/httpd/tls_files.h"

#include <gtest/gtest.h>
#include <openssl/ssl.h>

#include <chrono>
#include <string>

#include "cube3d/core/error.h"
#include "server/httpd/test_certificates.h"

namespace cube3d::http {
namespace test_tls_files {

using testing_tls::certificate;
using testing_tls::pem_of;

constexpr long kDay = 86'400;

class TlsFilesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    key_ = testing_tls::rsa_key().release();
    other_key_ = testing_tls::ec_key().release();
  }
  static void TearDownTestSuite() {
    EVP_PKEY_free(key_);
    EVP_PKEY_free(other_key_);
  }

  // Files of a certificate valid for `days` (from a day ago) and its key.
  TlsOptions files(long days = 90) {
    const auto cert = certificate(key_, "localhost", -kDay, days * kDay);
    TlsOptions o;
    o.cert_file = dir_.write("cert.pem", pem_of(cert.get()));
    o.key_file = dir_.write("key.pem", pem_of(key_));
    return o;
  }

  // The message of the invalid_argument (or `code`) that loading `o` throws.
  static std::string error_of(const TlsOptions& o, ErrorCode code = ErrorCode::kInvalidArgument) {
    try {
      load_tls_files(o);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      return e.what();
    }
    ADD_FAILURE() << "loaded";
    return "";
  }

  static EVP_PKEY* key_;
  static EVP_PKEY* other_key_;
  testing_tls::PemFolder dir_{"tls-files"};
};

EVP_PKEY* TlsFilesTest::key_ = nullptr;
EVP_PKEY* TlsFilesTest::other_key_ = nullptr;

#define EXPECT_HAS(text, needle) EXPECT_NE((text).find(needle), std::string::npos) << (text)

TEST_F(TlsFilesTest, GoodFilesLoadAndSayWhoAndUntilWhen) {
  const TlsOptions o = files(90);
  const TlsCredentials c = load_tls_files(o);
  EXPECT_EQ(c.subject, "CN=localhost");
  const auto now = std::chrono::system_clock::now();
  EXPECT_NEAR(seconds_until_expiry(c, now), 90.0 * kDay, 60);
  EXPECT_FALSE(expiry_warning(c, o, now).has_value());
  EXPECT_HAS(c.chain_pem, "BEGIN CERTIFICATE");
  // The context both doors get from it takes a handshake's worth: policy, chain, key.
  SSL_CTX* context = SSL_CTX_new(TLS_server_method());
  EXPECT_NO_THROW(configure_tls_context(context, c, o));
  EXPECT_EQ(SSL_CTX_get_min_proto_version(context), TLS1_2_VERSION);
  SSL_CTX_free(context);
}

TEST_F(TlsFilesTest, AKeyThatIsNotTheCertificatesIsNamed) {
  TlsOptions o = files();
  o.key_file = dir_.write("other.key", pem_of(other_key_));
  const std::string message = error_of(o);
  EXPECT_HAS(message,
             "tls.key_file " + o.key_file + " is not the key of tls.cert_file " + o.cert_file);
  EXPECT_EQ(message.find("in use"), std::string::npos);
}

TEST_F(TlsFilesTest, AGarbageCertificateIsNamed) {
  TlsOptions o = files();
  o.cert_file = dir_.write("garbage.pem", "this is no certificate\n");
  EXPECT_HAS(error_of(o), "tls.cert_file " + o.cert_file + " holds no PEM certificate");
  // A PEM block whose base64 does not decode, or whose DER is no certificate.
  o.cert_file =
      dir_.write("bad64.pem", "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n");
  EXPECT_HAS(error_of(o), "tls.cert_file " + o.cert_file);
  o.cert_file =
      dir_.write("notder.pem", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n");
  EXPECT_HAS(error_of(o), "does not parse as X.509");
  // The key where the certificate belongs.
  o.cert_file = dir_.write("keyascert.pem", pem_of(key_));
  EXPECT_HAS(error_of(o), "only certificates belong");
}

TEST_F(TlsFilesTest, AGarbageOrKeylessKeyFileIsNamed) {
  TlsOptions o = files();
  o.key_file = dir_.write("garbage.key", "not a key\n");
  EXPECT_HAS(error_of(o), "tls.key_file " + o.key_file + " holds no PEM private key");
  o.key_file = dir_.write("encrypted.key", pem_of(key_, "secret"));
  EXPECT_HAS(error_of(o), "tls.key_file " + o.key_file + " is an encrypted private key");
}

TEST_F(TlsFilesTest, AGarbageClientCaIsNamed) {
  TlsOptions o = files();
  o.client_ca_file = dir_.write("ca.pem", "-----BEGIN NONSENSE-----\n");
  EXPECT_HAS(error_of(o), "tls.client_ca_file " + o.client_ca_file);
  o.client_ca_file = dir_.write("ca2.pem", "plain text\n");
  EXPECT_HAS(error_of(o), "tls.client_ca_file " + o.client_ca_file + " holds no PEM certificate");
  // A real CA loads (and a bundle of two, one repeated, too).
  const auto ca_key = testing_tls::ec_key();
  const auto ca = certificate(ca_key.get(), "test CA", -kDay, 10 * kDay, nullptr, nullptr, true);
  o.client_ca_file = dir_.write("good-ca.pem", pem_of(ca.get()) + pem_of(ca.get()));
  EXPECT_NO_THROW(load_tls_files(o));
}

TEST_F(TlsFilesTest, AMissingFileIsNotFoundNamingTheKey) {
  TlsOptions o = files();
  o.cert_file = dir_.path("absent.pem");
  EXPECT_HAS(error_of(o, ErrorCode::kNotFound), "tls.cert_file: " + o.cert_file);
}

TEST_F(TlsFilesTest, AKeyTooWeakForThePolicyIsNamed) {
  const auto weak = testing_tls::rsa_key(1024);
  const auto cert = certificate(weak.get(), "localhost", -kDay, 90 * kDay);
  TlsOptions o;
  o.cert_file = dir_.write("weak.pem", pem_of(cert.get()));
  o.key_file = dir_.write("weak.key", pem_of(weak.get()));
  EXPECT_HAS(error_of(o), "tls.cert_file " + o.cert_file + " is refused by OpenSSL");
}

TEST_F(TlsFilesTest, ExpiryIsToldWithin30DaysAndAfter) {
  const auto now = std::chrono::system_clock::now();
  TlsOptions soon = files(10);
  std::optional<std::string> warning = expiry_warning(load_tls_files(soon), soon, now);
  ASSERT_TRUE(warning.has_value());
  EXPECT_HAS(*warning, "tls.cert_file " + soon.cert_file + " (CN=localhost) expires in 10.0 days");

  const auto expired = certificate(key_, "localhost", -10 * kDay, -2 * kDay);
  TlsOptions past;
  past.cert_file = dir_.write("expired.pem", pem_of(expired.get()));
  past.key_file = dir_.write("key.pem", pem_of(key_));
  const TlsCredentials c = load_tls_files(past);  // served, with the warning: not refused
  EXPECT_LT(seconds_until_expiry(c, now), -1.9 * kDay);
  warning = expiry_warning(c, past, now);
  ASSERT_TRUE(warning.has_value());
  EXPECT_HAS(*warning, "expired 2.0 days ago");

  const auto future = certificate(key_, "localhost", 5 * kDay, 90 * kDay);
  TlsOptions early;
  early.cert_file = dir_.write("future.pem", pem_of(future.get()));
  early.key_file = past.key_file;
  warning = expiry_warning(load_tls_files(early), early, now);
  ASSERT_TRUE(warning.has_value());
  EXPECT_HAS(*warning, "is not valid before");
}

}  // namespace test_tls_files
}  // namespace cube3d::http
