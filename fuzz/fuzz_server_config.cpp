// Fuzzes the server config reader (parse_server_config). Any YAML text must load or be refused
// with a cube3d::Error: never a crash, a hang or unbounded memory. What loads must print
// (server_config_to_yaml, i.e. --print-config) as YAML that loads back to an equal config, as
// the header promises.
//
// Relative paths resolve against the repository's models/ folder, so that the seeds (copies of
// models/demo-server.yaml) get past the "file exists" checks and the fuzzer explores the
// settings behind them instead of stopping at model.config.
#include <cstddef>
#include <cstdint>
#include <string>

#include "cube3d/server/config/server_config.h"
#include "fuzz_support.h"

namespace {
const std::string kBaseDir = std::string(CUBE3D_SOURCE_DIR) + "/models";
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  cube3d::ServerConfig config;
  if (!cube3d::fuzz::refusals_ok(
          [&] { config = cube3d::parse_server_config(text, "fuzz-server.yaml", kBaseDir); })) {
    return 0;
  }
  const std::string printed = cube3d::server_config_to_yaml(config);
  cube3d::ServerConfig reloaded;
  try {
    reloaded = cube3d::parse_server_config(printed, "printed-config.yaml");
  } catch (const cube3d::Error& e) {
    cube3d::fuzz::fail("the printed config does not load back", e.what() + ("\n" + printed));
  }
  if (!(reloaded == config)) {
    cube3d::fuzz::fail("the printed config loads back to different settings", printed);
  }
  return 0;
}
