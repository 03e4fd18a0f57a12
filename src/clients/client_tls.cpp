#include "cube3d/clients/client_tls.h"

#include "cube3d/core/error.h"
#include "cube3d/core/files.h"

namespace cube3d {

namespace {
constexpr int64_t kMaxCaBytes = 16 << 20;  // a bundle of roots, generously
}  // namespace

ClientTls client_tls_from_flags(bool tls, const std::optional<std::string>& ca_path,
                                const std::optional<std::string>& server_name) {
  ClientTls out;
  out.enabled = tls || ca_path.has_value();
  if (server_name) {
    if (!out.enabled) {
      throw invalid_argument("--server-name is the name TLS checks: it needs --tls or --ca");
    }
    if (server_name->empty()) throw invalid_argument("--server-name: expected a name, got ''");
    out.server_name = *server_name;
  }
  if (ca_path) {
    if (ca_path->empty()) throw invalid_argument("--ca: expected a PEM file, got ''");
    out.ca_path = *ca_path;
    try {
      out.ca_pem = read_file(*ca_path, "file", kMaxCaBytes);
    } catch (const Error& e) {
      // read_file's message starts with the path; say which flag gave it.
      throw Error(e.code(), std::string("--ca ") + e.what());
    }
    // Caught here rather than as a handshake failure on every request.
    if (out.ca_pem.find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
      throw invalid_argument("--ca " + *ca_path + ": not a PEM certificate (no BEGIN CERTIFICATE)");
    }
  }
  return out;
}

}  // namespace cube3d
