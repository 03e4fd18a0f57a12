// Logging setup. Library code logs through spdlog (never std::cout); binaries call
// setup_logging once with the level from their flags or config.
#pragma once

#include <string>

namespace cube3d {

// level: trace, debug, info, warn, error, critical, off. Throws invalid_argument otherwise.
// Logs go to stderr so that tools can keep stdout for their results.
void setup_logging(const std::string& level);

}  // namespace cube3d
