// The flags by which cube3d-client and cube3d-loadgen reach a server, declared and read once
// here so that their names, metavars, environment variable, default and checks cannot drift
// apart between the two tools:
//   --server ADDR       (or $CUBE3D_SERVER; default kDefaultServer, the server's gRPC listener)
//   --tls               TLS, checking the server against the system's roots
//   --ca FILE           against this PEM root instead (implies --tls)
//   --server-name NAME  the name the certificate must carry, when it is not the --server host
// The help of --server and --tls stays each tool's own (what an address may be, which protocols
// TLS covers): the tests pin each tool's --help. --ca and --server-name mean the same in both.
#pragma once

#include <string>

#include "cube3d/cli/cli_args.h"
#include "cube3d/clients/client_tls.h"

namespace cube3d {

inline constexpr const char* kDefaultServer = "127.0.0.1:50051";

struct ServerFlagsHelp {
  std::string server;          // --server's help, naming kDefaultServer as the default
  std::string server_metavar;  // "ADDR", "HOST:PORT"
  std::string tls;             // --tls's help
};

// Declares --server, --tls, --ca and --server-name, in this order, after what `args` has.
CliArgs& add_server_flags(CliArgs& args, const ServerFlagsHelp& help);

// --server (or $CUBE3D_SERVER), else kDefaultServer.
std::string server_from_args(const CliArgs& args);

// The TLS --tls, --ca and --server-name ask for (client_tls_from_flags: the CA file read now,
// each misuse an invalid_argument naming its flag).
ClientTls client_tls_from_args(const CliArgs& args);

}  // namespace cube3d
