// UTF-8 validation for text that crosses a trust boundary (prompts).
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace cube3d {

// The byte offset of the first invalid sequence (bad lead or continuation byte, truncated
// sequence, overlong form, surrogate, code point above U+10FFFF), or nullopt when valid.
std::optional<size_t> find_invalid_utf8(std::string_view text);

}  // namespace cube3d
