// Client- or file-supplied text quoted back in a log line or an error message: at most
// `max_bytes` of it, control bytes (newlines, ANSI escapes) written as \xNN so that they cannot
// forge log lines or drive a terminal, and the full length when it was cut.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace cube3d {

std::string printable(std::string_view text, std::size_t max_bytes = 40);

}  // namespace cube3d
