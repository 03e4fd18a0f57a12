// A whole number a client sends in a query parameter or a header (?timeout_ms=, ?wait_ms=,
// ?size=, X-Request-Timeout-Ms): one parser and one wording for all of them.
#pragma once

#include <cstdint>
#include <string_view>

namespace cube3d::http {

// `text` as a decimal integer in [min, max]; otherwise HttpError 400 INVALID_ARGUMENT
// "<what> is '<text>': it must be a whole number of <unit>, <min>..<max>".
int64_t whole_number(std::string_view text, std::string_view what, std::string_view unit,
                     int64_t min, int64_t max);

}  // namespace cube3d::http
