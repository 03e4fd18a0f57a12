// CLIP's text clean-up before BPE, as clip/simple_tokenizer.py does it: basic_clean,
// whitespace_clean, then .lower(). The pieces live beside it (clip_html_unescape,
// clip_lower_case); this file holds Python's white-space rules and the order of the steps.
#include "cube3d/model/clip_text_normalizer.h"

#include "cube3d/core/utf8.h"
#include "cube3d/model/clip_html_unescape.h"
#include "cube3d/model/clip_lower_case.h"

namespace cube3d {
namespace {

// The `regex` module's \s (Unicode White_Space), which whitespace_clean folds.
bool is_regex_space(char32_t c) { return is_python_space(c) && !(c >= 0x1C && c <= 0x1F); }

}  // namespace

bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

std::u32string python_strip(const std::u32string& text) {
  size_t begin = 0, end = text.size();
  while (begin < end && is_python_space(text[begin])) ++begin;
  while (end > begin && is_python_space(text[end - 1])) --end;
  return text.substr(begin, end - begin);
}

std::u32string clean_whitespace(const std::u32string& text) {
  std::u32string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (is_regex_space(text[i])) {
      out += U' ';
      while (i < text.size() && is_regex_space(text[i])) ++i;
    } else {
      out += text[i++];
    }
  }
  return python_strip(out);
}

std::string normalize_clip_text(std::string_view text) {
  const std::u32string decoded = decode_utf8(text, "prompt");
  // basic_clean (ftfy.fix_text taken as the identity), whitespace_clean, then .lower().
  const std::u32string cleaned = python_strip(html_unescape(html_unescape(decoded)));
  return encode_utf8(python_lower(clean_whitespace(cleaned)));
}

}  // namespace cube3d
