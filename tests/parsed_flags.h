// Test support: a CliArgs after parsing `flags` (the words after the program's name), as a
// tool's main() would parse its command line; throws what CliArgs::parse throws.
#pragma once

#include <utility>
#include <vector>

#include "cube3d/cli/cli_args.h"

namespace cube3d::testing {

inline CliArgs parsed_flags(CliArgs args, std::vector<const char*> flags) {
  flags.insert(flags.begin(), "tool");
  args.parse(static_cast<int>(flags.size()), flags.data());
  return args;
}

}  // namespace cube3d::testing
