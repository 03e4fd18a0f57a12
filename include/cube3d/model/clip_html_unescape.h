// Python's html.unescape for CLIP's text clean-up (basic_clean in OpenAI's simple_tokenizer runs
// it twice on every prompt), so that prompts with entities tokenize as the official code does.
//
// Known limit: the named entities are the HTML 4 ones (every legacy name that HTML 5 accepts
// without ';' included) plus &apos;, with html.entities.html5's values; HTML-5-only names such
// as &NewLine; or &check; stay as text. Every numeric form &#NN; / &#xHH; follows Python's
// replacement rules (Windows-1252 for the C1 range, U+FFFD for NUL, surrogates and values above
// U+10FFFF, invalid code points removed).
#pragma once

#include <string>

namespace cube3d {

// html.unescape(text) on code points.
std::u32string html_unescape(const std::u32string& text);

}  // namespace cube3d
