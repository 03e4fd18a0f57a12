// UTF-8 for text that crosses a trust boundary (prompts): validation, and the decoding and
// encoding that text processing by code point (CLIP's clean-up and lower-casing) needs. Lives in
// core so that every layer shares one codec; torch-free.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace cube3d {

// The byte offset of the first invalid sequence (bad lead or continuation byte, truncated
// sequence, overlong form, surrogate, code point above U+10FFFF), or nullopt when valid.
std::optional<size_t> find_invalid_utf8(std::string_view text);

// The code points of `text`. Throws invalid_argument "<what> is not valid UTF-8 (byte offset N)"
// for the first invalid sequence (as find_invalid_utf8 finds it).
std::u32string decode_utf8(std::string_view text, std::string_view what = "text");

// Appends the UTF-8 form of `cp`, which must be a Unicode scalar value (at most U+10FFFF, not a
// surrogate): every code point that decode_utf8 returns is one.
void append_utf8(std::string& out, char32_t cp);

// The UTF-8 form of code points that are all Unicode scalar values.
std::string encode_utf8(std::u32string_view text);

}  // namespace cube3d
