// The one parser of the whole numbers clients send in query parameters and headers.
#include "cube3d/server/http/whole_number.h"

#include <gtest/gtest.h>

#include <string>

#include "cube3d/server/http/http_error.h"

namespace cube3d::http {
namespace test_whole_number {

std::string refusal(std::string_view text) {
  try {
    whole_number(text, "query parameter size", "pixels", 16, 2048);
  } catch (const HttpError& e) {
    EXPECT_EQ(e.http_status, 400);
    EXPECT_EQ(e.code, ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "";
}

TEST(WholeNumber, TakesDecimalIntegersInTheRange) {
  EXPECT_EQ(whole_number("16", "p", "pixels", 16, 2048), 16);
  EXPECT_EQ(whole_number("2048", "p", "pixels", 16, 2048), 2048);
  EXPECT_EQ(whole_number("0", "p", "ms", 0, 10), 0);
  EXPECT_EQ(whole_number("9223372036854775807", "p", "ms", 0, INT64_MAX), INT64_MAX);
}

TEST(WholeNumber, RefusesAnythingElseNamingWhatAndTheRange) {
  EXPECT_EQ(refusal("15"),
            "query parameter size is '15': it must be a whole number of pixels, 16..2048");
  for (const char* text :
       {"2049", "", "12px", " 64", "+64", "6.4e1", "0x40", "-1", "99999999999999999999"}) {
    EXPECT_NE(refusal(text).find("it must be a whole number of pixels, 16..2048"),
              std::string::npos)
        << text;
  }
}

}  // namespace test_whole_number
}  // namespace cube3d::http
