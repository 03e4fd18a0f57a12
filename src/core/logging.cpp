#include "cube3d/core/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "cube3d/core/error.h"

namespace cube3d {

void setup_logging(const std::string& level) {
  const auto parsed = spdlog::level::from_str(level);
  // from_str answers "off" for anything it does not know; only accept "off" when asked for.
  if (parsed == spdlog::level::off && level != "off") {
    throw invalid_argument("log level '" + level +
                           "' is not one of trace, debug, info, warn, error, critical, off");
  }
  auto logger = spdlog::get("cube3d");
  if (!logger) logger = spdlog::stderr_color_mt("cube3d");
  spdlog::set_default_logger(logger);
  spdlog::set_level(parsed);
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
}

}  // namespace cube3d
