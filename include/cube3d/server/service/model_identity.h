// What decides the bytes of a mesh besides the request: the model's weights, the settings that
// change its numbers, and the server's build. The result cache keys every entry by it, so a new
// checkpoint, dtype, mesh option or build never serves an old entry; provenance records it.
#pragma once

#include <string>

namespace cube3d {

struct ModelIdentity {
  std::string name;            // the model config's file name without .yaml ("cube3d-v0.5")
  std::string weights_digest;  // SHA-256 (hex) of the weight files, taken at load
  // SHA-256 (hex) of the model config's text and the server settings that change the numbers
  // (device kind, dtype, single-stream decode, the mesh: section).
  std::string config_digest;
  std::string server_version;  // "<version> (<git revision>)"
};

}  // namespace cube3d
