// The sampling flags of a generation request, which cube3d-client, cube3d-loadgen and
// cube3d-generate all take, next to each other and in this order: --guidance-scale G, --top-p P
// and --seed N. Declared once here, so that their names, value counts and metavars cannot drift
// apart between the tools.
//
// The help of --guidance-scale and --seed stays each tool's own, written at its call site: it
// names the tool's defaults (the server's for the clients, the engine's for cube3d-generate), and
// the tests pin each tool's --help. --top-p means and defaults the same everywhere, so its help is
// here. What a tool does with the values (range checks, defaults) stays in the tool too.
// cube3d-bench's --seed seeds random text states, not sampling, so the bench declares its own.
#pragma once

#include <string>

#include "cube3d/cli/cli_args.h"

namespace cube3d {

struct SamplingFlagsHelp {
  std::string guidance_scale;  // --guidance-scale G
  std::string seed;            // --seed N
};

// Declares --guidance-scale, --top-p and --seed after the options `args` already has.
CliArgs& add_sampling_flags(CliArgs& args, const SamplingFlagsHelp& help);

}  // namespace cube3d
