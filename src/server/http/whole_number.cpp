#include "cube3d/server/http/whole_number.h"

#include <charconv>
#include <string>

#include "cube3d/core/printable.h"
#include "cube3d/server/http/http_error.h"

namespace cube3d::http {

int64_t whole_number(std::string_view text, std::string_view what, std::string_view unit,
                     int64_t min, int64_t max) {
  int64_t value = 0;
  const char* const end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || stop != end || value < min || value > max) {
    throw HttpError(400, ErrorCode::kInvalidArgument,
                    std::string(what) + " is '" + printable(text, 64) +
                        "': it must be a whole number of " + std::string(unit) + ", " +
                        std::to_string(min) + ".." + std::to_string(max));
  }
  return value;
}

}  // namespace cube3d::http
