// TLS from a client to the server, as cube3d-client's flags say it: --tls (check the server
// against the system's roots), --ca FILE (against this PEM root instead; implies --tls) and
// --server-name NAME (the name the certificate must carry, when it is not the --server host).
// cube3d-loadgen takes the same flags for both of its protocols (grpc_sender.h, http_sender.h).
#pragma once

#include <optional>
#include <string>

namespace cube3d {

struct ClientTls {
  bool enabled = false;
  std::string ca_path;      // --ca, for messages; empty: the system's roots
  std::string ca_pem;       // its content
  std::string server_name;  // --server-name; empty: the --server host
};

// The TLS the flags ask for; the CA file is read here, so that a wrong path fails before the
// run rather than as a handshake failure on every request. Throws invalid_argument naming the
// flag for --server-name without --tls or --ca, and for a --ca file that holds no PEM
// certificate; not_found naming --ca for a missing file.
ClientTls client_tls_from_flags(bool tls, const std::optional<std::string>& ca_path,
                                const std::optional<std::string>& server_name);

}  // namespace cube3d
