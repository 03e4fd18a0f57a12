// UTF-8 validation (prompts cross a trust boundary) and the codec that code-point text
// processing (CLIP's clean-up) uses.
#include "cube3d/core/utf8.h"

#include <gtest/gtest.h>

#include <string>

#include "cube3d/core/error.h"

namespace cube3d {
namespace test_utf8 {

TEST(Utf8, AcceptsValidText) {
  EXPECT_EQ(find_invalid_utf8(""), std::nullopt);
  EXPECT_EQ(find_invalid_utf8("a chair"), std::nullopt);
  EXPECT_EQ(find_invalid_utf8("naïve café 日本の城 🐉"), std::nullopt);
}

TEST(Utf8, ReportsTheOffsetOfTheFirstBadSequence) {
  EXPECT_EQ(find_invalid_utf8("ab\x80"), 2u);              // lone continuation byte
  EXPECT_EQ(find_invalid_utf8("abc\xE6\x97"), 3u);         // truncated 3-byte sequence
  EXPECT_EQ(find_invalid_utf8("\xC0\xAF"), 0u);            // overlong '/'
  EXPECT_EQ(find_invalid_utf8("x\xED\xA0\x80"), 1u);       // UTF-16 surrogate
  EXPECT_EQ(find_invalid_utf8("\xF4\x90\x80\x80"), 0u);    // above U+10FFFF
  EXPECT_EQ(find_invalid_utf8("ok\xFFok"), 2u);            // never valid
  EXPECT_EQ(find_invalid_utf8("\xE6\x97\xA5x\xE6("), 4u);  // bad continuation
}

TEST(Utf8, DecodesEverySequenceLength) {
  EXPECT_EQ(decode_utf8(""), U"");
  EXPECT_EQ(decode_utf8("a\x7F"), U"a\x7F");
  EXPECT_EQ(decode_utf8("\xC2\x80\xDF\xBF"), (std::u32string{0x80, 0x7FF}));
  EXPECT_EQ(decode_utf8("\xE0\xA0\x80\xEF\xBF\xBF"), (std::u32string{0x800, 0xFFFF}));
  EXPECT_EQ(decode_utf8("\xF0\x90\x80\x80\xF4\x8F\xBF\xBF"), (std::u32string{0x10000, 0x10FFFF}));
  EXPECT_EQ(decode_utf8("naïve 日本 🐉"), U"naïve 日本 🐉");
}

TEST(Utf8, DecodeRejectsInvalidTextNamingWhatAndWhere) {
  const auto message = [](std::string_view text, std::string_view what) -> std::string {
    try {
      decode_utf8(text, what);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(message("abc\xE6\x97", "prompt"), "prompt is not valid UTF-8 (byte offset 3)");
  EXPECT_EQ(message("x\xED\xA0\x80", "merges.txt"),
            "merges.txt is not valid UTF-8 (byte offset 1)");
  EXPECT_EQ(message("\xC0\xAF", "text"), "text is not valid UTF-8 (byte offset 0)");
}

TEST(Utf8, EncodesEverySequenceLength) {
  std::string out;
  append_utf8(out, U'a');
  append_utf8(out, 0xE9);
  append_utf8(out, 0x65E5);
  append_utf8(out, 0x1F409);
  EXPECT_EQ(out, "aé日🐉");
  EXPECT_EQ(encode_utf8(std::u32string{0x7F, 0x80, 0x7FF, 0x800, 0xFFFF, 0x10000, 0x10FFFF}),
            "\x7F\xC2\x80\xDF\xBF\xE0\xA0\x80\xEF\xBF\xBF\xF0\x90\x80\x80\xF4\x8F\xBF\xBF");
  EXPECT_EQ(encode_utf8(U""), "");
}

TEST(Utf8, RoundTripsEveryScalarValue) {
  std::u32string all;
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp < 0xD800 || cp > 0xDFFF) all += cp;
  }
  const std::string encoded = encode_utf8(all);
  EXPECT_EQ(find_invalid_utf8(encoded), std::nullopt);
  EXPECT_EQ(decode_utf8(encoded), all);
}

}  // namespace test_utf8
}  // namespace cube3d
