#include "cube3d/clients/server_flags.h"

#include <optional>

namespace cube3d {
namespace {

std::optional<std::string> optional_value(const CliArgs& args, const std::string& name) {
  return args.has(name) ? std::optional(args.get(name)) : std::nullopt;
}

}  // namespace

CliArgs& add_server_flags(CliArgs& args, const ServerFlagsHelp& help) {
  return args.option("--server", 1, help.server, help.server_metavar)
      .env("CUBE3D_SERVER")
      .option("--tls", 0, help.tls)
      .option("--ca", 1, "PEM root certificate to check the server against (implies --tls)", "FILE")
      .option("--server-name", 1,
              "TLS: the name the certificate must carry, when it differs from the --server host "
              "(e.g. connecting by IP to a certificate for localhost)",
              "NAME");
}

std::string server_from_args(const CliArgs& args) { return args.get("--server", kDefaultServer); }

ClientTls client_tls_from_args(const CliArgs& args) {
  return client_tls_from_flags(args.has("--tls"), optional_value(args, "--ca"),
                               optional_value(args, "--server-name"));
}

}  // namespace cube3d
