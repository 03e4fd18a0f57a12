// printable(): client- or file-supplied text quoted in logs and errors.
#include "cube3d/core/printable.h"

#include <gtest/gtest.h>

#include <string>

namespace cube3d {
namespace test_printable {

TEST(Printable, PlainTextPassesThrough) {
  EXPECT_EQ(printable("a wooden chair"), "a wooden chair");
  EXPECT_EQ(printable(""), "");
  EXPECT_EQ(printable("héllo"), "héllo");  // UTF-8 is kept as it is
}

TEST(Printable, ControlBytesCannotForgeLinesOrDriveATerminal) {
  EXPECT_EQ(printable("id\n[info] request forged OK"), "id\\x0a[info] request forged OK");
  EXPECT_EQ(printable("\x1b[2J\r\t"), "\\x1b[2J\\x0d\\x09");
  EXPECT_EQ(printable(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(printable("back\\slash"), "back\\x5cslash");  // no ambiguous escapes
}

TEST(Printable, LongTextIsCutAndItsLengthSaid) {
  const std::string huge(8 << 20, 'x');
  const std::string shown = printable(huge, 64);
  // Built with append, not operator+ on a temporary: GCC 12 under ASan misreads the inlined
  // move of the sum (a false out-of-bounds memcpy warning).
  std::string expected(64, 'x');
  expected.append("... (8388608 bytes)");
  EXPECT_EQ(shown, expected);
  EXPECT_EQ(printable("abcdef", 6), "abcdef");
  EXPECT_EQ(printable("abcdefg", 6), "abcdef... (7 bytes)");
}

}  // namespace test_printable
}  // namespace cube3d
