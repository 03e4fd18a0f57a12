// The TLS flags of cube3d-loadgen (client_tls.h): what they turn on, and a clear error naming
// the flag for each misuse (--server-name without TLS, a --ca file that is missing, empty or no
// PEM certificate).
#include "cube3d/clients/client_tls.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cube3d/core/error.h"

namespace cube3d {
namespace test_client_tls {

namespace fs = std::filesystem;

class ClientTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::temp_directory_path() /
        ("cube3d-client-tls-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string file(const std::string& name, const std::string& text) {
    const fs::path path = dir_ / name;
    std::ofstream(path) << text;
    return path.string();
  }

  fs::path dir_;
};

// The message of what `call` throws (and that it throws a cube3d::Error of `code`).
template <typename Call>
std::string error_of(Call call, ErrorCode code) {
  try {
    call();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

constexpr const char* kPem =
    "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";  // the check is textual

TEST_F(ClientTlsTest, NoFlagsNoTls) {
  const ClientTls tls = client_tls_from_flags(false, std::nullopt, std::nullopt);
  EXPECT_FALSE(tls.enabled);
  EXPECT_TRUE(tls.ca_pem.empty());
  EXPECT_TRUE(tls.server_name.empty());
}

TEST_F(ClientTlsTest, TlsAloneUsesTheSystemsRoots) {
  const ClientTls tls = client_tls_from_flags(true, std::nullopt, std::nullopt);
  EXPECT_TRUE(tls.enabled);
  EXPECT_TRUE(tls.ca_pem.empty());
}

TEST_F(ClientTlsTest, CaImpliesTlsAndIsRead) {
  const std::string ca = file("ca.pem", kPem);
  const ClientTls tls = client_tls_from_flags(false, ca, "localhost");
  EXPECT_TRUE(tls.enabled);
  EXPECT_EQ(tls.ca_pem, kPem);
  EXPECT_EQ(tls.ca_path, ca);
  EXPECT_EQ(tls.server_name, "localhost");
}

TEST_F(ClientTlsTest, ServerNameNeedsTls) {
  const std::string message = error_of(
      [] { client_tls_from_flags(false, std::nullopt, "localhost"); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("--server-name"), std::string::npos) << message;
  EXPECT_NE(message.find("--tls or --ca"), std::string::npos) << message;
  EXPECT_NE(
      error_of([] { client_tls_from_flags(true, std::nullopt, ""); }, ErrorCode::kInvalidArgument)
          .find("--server-name"),
      std::string::npos);
}

TEST_F(ClientTlsTest, AMissingCaFileIsNamed) {
  const std::string missing = (dir_ / "nowhere.pem").string();
  const std::string message =
      error_of([&] { client_tls_from_flags(false, missing, std::nullopt); }, ErrorCode::kNotFound);
  EXPECT_EQ(message.rfind("--ca " + missing, 0), 0u) << message;
}

TEST_F(ClientTlsTest, AnEmptyCaPathIsNamed) {
  const std::string message =
      error_of([] { client_tls_from_flags(true, "", std::nullopt); }, ErrorCode::kInvalidArgument);
  EXPECT_EQ(message.rfind("--ca", 0), 0u) << message;
}

TEST_F(ClientTlsTest, ACaFileWithoutACertificateIsNamed) {
  const std::string key = file("key.pem", "-----BEGIN PRIVATE KEY-----\nMIIE\n");
  const std::string message = error_of([&] { client_tls_from_flags(false, key, std::nullopt); },
                                       ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("--ca " + key), std::string::npos) << message;
  EXPECT_NE(message.find("not a PEM certificate"), std::string::npos) << message;
  // A folder is no file either.
  EXPECT_NE(error_of([&] { client_tls_from_flags(false, dir_.string(), std::nullopt); },
                     ErrorCode::kInvalidArgument)
                .find("--ca"),
            std::string::npos);
}

}  // namespace test_client_tls
}  // namespace cube3d
