// The options of cube3d-bench: its flags, the decode modes it times and the settings every stage
// reads. Its own file so that the traffic model and the shape stage can name a Mode and read the
// Settings without pulling in the decode benchmark or run().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cube3d/cli/cli_args.h"

namespace cube3d::bench {

enum class Mode { kEagerNoCache, kEagerKv, kGraphKv };

// The name --modes takes and the JSON records: eager-nocache, eager-kv or graph-kv.
const char* mode_name(Mode mode);

struct Settings {
  int64_t tokens = 0;
  int64_t warmup = 1;
  int64_t repeat = 3;
  int64_t mesh_repeat = 1;
  std::vector<bool> occupancy_modes = {true};  // hierarchical first, then dense (with "both")
  double guidance = 3.0;
  uint64_t seed = 0;
};

// Every flag of cube3d-bench with its help text (bench/README.md lists them).
CliArgs make_args();

// --buckets: distinct integers >= 1, in the order given.
std::vector<int64_t> parse_buckets(const std::string& text);
// --modes: distinct mode names, in the order given.
std::vector<Mode> parse_modes(const std::string& text);

}  // namespace cube3d::bench
