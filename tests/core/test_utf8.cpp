#include <gtest/gtest.h>

#include "cube3d/core/utf8.h"

namespace cube3d {
namespace {

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

}  // namespace
}  // namespace cube3d
