#include "cube3d/cli/sampling_flags.h"

namespace cube3d {

CliArgs& add_sampling_flags(CliArgs& args, const SamplingFlagsHelp& help) {
  return args.option("--guidance-scale", 1, help.guidance_scale, "G")
      .option("--top-p", 1, "nucleus sampling mass in (0, 1] (default: greedy)", "P")
      .option("--seed", 1, help.seed, "N");
}

}  // namespace cube3d
