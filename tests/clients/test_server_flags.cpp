// The flags by which cube3d-client and cube3d-loadgen reach a server (server_flags.h): declared
// in order with the caller's texts and the shared ones, --server from the flag, then
// $CUBE3D_SERVER, then the default, and the TLS flags read into a ClientTls with their checks.
#include "cube3d/clients/server_flags.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "expect_error.h"
#include "expect_in_order.h"
#include "parsed_flags.h"
#include "scoped_env.h"
#include "temp_dir.h"

namespace cube3d {
namespace test_server_flags {

using testing::expect_error;
using testing::ScopedEnv;

CliArgs with_server_flags() {
  CliArgs args("tool", "Does a thing.");
  args.option("--before", 1, "declared first", "B");
  add_server_flags(
      args,
      {.server = "the tool's server help", .server_metavar = "ADDR", .tls = "the tool's TLS help"})
      .option("--after", 0, "declared last");
  return args;
}

CliArgs parsed(const std::vector<const char*>& flags) {
  return testing::parsed_flags(with_server_flags(), flags);
}

// Each tool's --help is pinned by its own tests; here: the caller's texts and metavar, the shared
// --ca and --server-name texts, the environment variable, and the order.
TEST(ServerFlags, HelpShowsTheCallersTextsInOrder) {
  const std::string help = with_server_flags().help();
  const std::vector<std::string> lines = {
      "--before B",
      "--server ADDR",
      "the tool's server help",
      "[env: CUBE3D_SERVER]",
      "--tls",
      "the tool's TLS help",
      "--ca FILE",
      "PEM root certificate to check the server against (implies --tls)",
      "--server-name NAME",
      "TLS: the name the certificate must carry, when it differs from",  // (wrapped)
      "--after"};
  testing::expect_in_order(help, lines);
}

TEST(ServerFlags, ServerComesFromTheFlagThenTheEnvironmentThenTheDefault) {
  {
    const ScopedEnv unset("CUBE3D_SERVER", nullptr);
    EXPECT_EQ(server_from_args(parsed({})), kDefaultServer);
    EXPECT_EQ(server_from_args(parsed({"--server", "a:1"})), "a:1");
  }
  const ScopedEnv set("CUBE3D_SERVER", "from-env:2");
  EXPECT_EQ(server_from_args(parsed({})), "from-env:2");
  EXPECT_EQ(server_from_args(parsed({"--server=a:1"})), "a:1");  // the flag beats the variable
  EXPECT_EQ(std::string(kDefaultServer), "127.0.0.1:50051");     // the server's gRPC listener
}

TEST(ServerFlags, NoTlsFlagsIsPlaintext) {
  const ClientTls tls = client_tls_from_args(parsed({"--server", "a:1"}));
  EXPECT_FALSE(tls.enabled);
  EXPECT_TRUE(tls.server_name.empty());
}

TEST(ServerFlags, TlsFlagsAreReadWithTheirChecks) {
  testing::TempDir dir("cube3d_server_flags");
  const std::string pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  const std::string ca = dir.write("ca.pem", pem);

  const ClientTls system_roots = client_tls_from_args(parsed({"--tls", "--server-name", "x"}));
  EXPECT_TRUE(system_roots.enabled);
  EXPECT_TRUE(system_roots.ca_pem.empty());
  EXPECT_EQ(system_roots.server_name, "x");

  const ClientTls by_ca = client_tls_from_args(parsed({"--ca", ca.c_str()}));  // implies --tls
  EXPECT_TRUE(by_ca.enabled);
  EXPECT_EQ(by_ca.ca_pem, pem);
  EXPECT_EQ(by_ca.ca_path, ca);

  expect_error(
      [] {
        client_tls_from_args(parsed({"--server-name", "localhost"}));
      },
      ErrorCode::kInvalidArgument, std::vector<std::string>{"--server-name", "--tls or --ca"});
  const std::string missing = dir.path() + "/nowhere.pem";
  expect_error(
      [&] {
        client_tls_from_args(parsed({"--ca", missing.c_str()}));
      },
      ErrorCode::kNotFound, "--ca " + missing);
}

}  // namespace test_server_flags
}  // namespace cube3d
