// CLIP's text clean-up before BPE: the whole chain against strings from Python, then Python's
// white-space rules alone. html.unescape and str.lower() have their own tests
// (test_clip_html_unescape.cpp, test_clip_lower_case.cpp).
#include "cube3d/model/clip_text_normalizer.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "cube3d/core/error.h"

namespace cube3d {
namespace test_clip_text_normalizer {

// Expected strings from Python: whitespace_clean(basic_clean(text)).lower() with
// ftfy.fix_text as the identity.
TEST(ClipTextNormalizer, NormalizesLikeThePythonCleanUp) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"&amp;lt;", "<"},  // unescaped twice
      {"a&#39;s", "a's"},
      {"&#x41;&#66;", "ab"},
      {"&nbsp;a&nbsp;", "a"},
      {"&ampx", "&x"},  // legacy entity as a prefix
      {"&unknown;", "&unknown;"},
      {"&#128;", "\u20ac"},  // Windows-1252 for the C1 range
      {"&#0;", "\ufffd"},
      {"&#1;x", "x"},  // invalid code point: removed
      {"&#xD800;", "\ufffd"},
      {"&#99999999999;", "\ufffd"},
      {"&Alpha;", "\u03b1"},
      {"&Alpha", "&alpha"},  // not a legacy name: needs its ';'
      {"&copy2024", "\u00a92024"},
      {"&#x;", "&#x;"},
      {"&lang;&rang;", "\u27e8\u27e9"},
      {"AT&T", "at&t"},
      {"\u3000a\u2003b\x1c", "a b"},  // U+001C is stripped at the ends...
      {std::string("a\x1c") + "b", std::string("a\x1c") + "b"},  // ...but not folded inside
      {"\u039f\u0394\u03a5\u03a3\u03a3\u0395\u03a5\u03a3",
       "\u03bf\u03b4\u03c5\u03c3\u03c3\u03b5\u03c5\u03c2"},  // final sigma
      {"\u03a3\u0391\u03a3 \u03a3", "\u03c3\u03b1\u03c2 \u03c3"},
      {"\u0130stanbul", "i\u0307stanbul"},
      {"\u00c0\u00c9\u00ce \u24b6 \u216b", "\u00e0\u00e9\u00ee \u24d0 \u217b"},
  };
  for (const auto& [text, expected] : cases) {
    EXPECT_EQ(normalize_clip_text(text), expected) << "text: " << text;
  }
}

TEST(ClipTextNormalizer, RejectsInvalidUtf8NamingTheByteOffset) {
  try {
    normalize_clip_text("ok \xFF");
    ADD_FAILURE() << "invalid UTF-8 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(std::string(e.what()), "prompt is not valid UTF-8 (byte offset 3)");
  }
}

TEST(ClipTextNormalizer, EmptyAndBlankTextNormalizeToNothing) {
  EXPECT_EQ(normalize_clip_text(""), "");
  EXPECT_EQ(normalize_clip_text(" \t\n\u3000\u0085"), "");
  EXPECT_EQ(normalize_clip_text("&nbsp;&#32;"), "");  // unescaped first, then stripped
}

// str.isspace(): bidi class WS, B or S, or category Zs. Not the zero-width characters.
TEST(ClipTextNormalizer, PythonSpaceIsStrIsspace) {
  for (const char32_t c :
       {0x09, 0x0A, 0x0B,   0x0C,   0x0D,   0x1C,   0x1D,   0x1E,   0x1F,   0x20,
        0x85, 0xA0, 0x1680, 0x2000, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000}) {
    EXPECT_TRUE(is_python_space(c)) << std::hex << static_cast<uint32_t>(c);
  }
  for (const char32_t c : {0x00, 0x08, 0x21, 0x180E, 0x200B, 0x200D, 0x2060, 0xFEFF}) {
    EXPECT_FALSE(is_python_space(c)) << std::hex << static_cast<uint32_t>(c);
  }
}

TEST(ClipTextNormalizer, StripRemovesPythonSpaceAtBothEndsOnly) {
  EXPECT_EQ(python_strip(U"\u3000 a \u2003 b\x1c\x85"), U"a \u2003 b");
  EXPECT_EQ(python_strip(U"\t\n"), U"");
  EXPECT_EQ(python_strip(U"ab"), U"ab");
}

// whitespace_clean folds runs of the regex module's \s (not U+001C..U+001F) to one space.
TEST(ClipTextNormalizer, CleanWhitespaceFoldsRunsAndStrips) {
  EXPECT_EQ(clean_whitespace(U"  a\t\n b\u2003\u3000c  "), U"a b c");
  EXPECT_EQ(clean_whitespace(U"a\x1c\x1f b"), U"a\x1c\x1f b");
  EXPECT_EQ(clean_whitespace(U"\x1c a \x1d"), U"a");
  EXPECT_EQ(clean_whitespace(U""), U"");
}

}  // namespace test_clip_text_normalizer
}  // namespace cube3d
