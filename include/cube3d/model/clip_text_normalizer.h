// CLIP's text clean-up, the part of OpenAI's simple_tokenizer that runs before the pre-tokenizer
// pattern and BPE: basic_clean (html.unescape twice, then strip; ftfy.fix_text taken as the
// identity), whitespace_clean (fold white-space runs to one space, strip), then str.lower().
// Separate from the BPE so that each Python behaviour it reproduces can be tested alone.
#pragma once

#include <string>
#include <string_view>

namespace cube3d {

// Python's str.isspace() (what str.strip() removes): bidi class WS, B or S, or category Zs.
bool is_python_space(char32_t c);

// Python's str.strip() with no argument.
std::u32string python_strip(const std::u32string& text);

// whitespace_clean: re.sub(r'\s+', ' ', text).strip() with the `regex` module's Unicode \s,
// which differs from isspace() by U+001C..U+001F: those are stripped at the ends but never
// folded inside.
std::u32string clean_whitespace(const std::u32string& text);

// The cleaned, lower-cased UTF-8 text that CLIP's pre-tokenizer splits. Throws invalid_argument
// "prompt is not valid UTF-8 (byte offset N)".
std::string normalize_clip_text(std::string_view text);

}  // namespace cube3d
