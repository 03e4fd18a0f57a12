// Python's str.lower() for CLIP's text clean-up (OpenAI's simple_tokenizer lower-cases every
// prompt before splitting it), so that non-ASCII prompts tokenize as the official code does.
//
// Known limit: the table is CPython 3.11's (Unicode 14), final sigma included; characters
// assigned after Unicode 14 keep their case. Case_Ignorable and Cased (for final sigma) come from
// RE2's general categories plus the few extra characters Unicode adds; checked against CPython
// over every assigned code point below U+20000.
#pragma once

#include <string>

namespace cube3d {

// str.lower() on code points: one-to-one mappings, U+0130 -> "i" + U+0307, and capital sigma
// -> final sigma (U+03C2) at the end of a word, small sigma (U+03C3) elsewhere.
std::u32string python_lower(const std::u32string& text);

}  // namespace cube3d
