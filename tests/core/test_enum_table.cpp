#include "cube3d/core/enum_table.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "cube3d/core/error.h"

namespace cube3d {
namespace test_enum_table {

enum class Colour { kRed, kGreen, kBlue, kUnnamed };

constexpr EnumTable<Colour, std::string_view, 3> kColourNames = {
    {{Colour::kRed, "red"}, {Colour::kGreen, "green"}, {Colour::kBlue, "blue"}}};

TEST(EnumTable, LooksUpBothWays) {
  static_assert(lookup(kColourNames, Colour::kGreen) == std::string_view("green"));
  EXPECT_EQ(lookup(kColourNames, Colour::kBlue), "blue");
  EXPECT_FALSE(lookup(kColourNames, Colour::kUnnamed).has_value());
  EXPECT_EQ(reverse_lookup(kColourNames, std::string_view("red")), Colour::kRed);
  EXPECT_FALSE(reverse_lookup(kColourNames, std::string_view("Red")).has_value());
  EXPECT_EQ(names_of(kColourNames), "red, green, blue");
}

TEST(EnumTable, ParseNamesTheFieldAndTheChoices) {
  EXPECT_EQ(parse_enum(kColourNames, "blue", "colour"), Colour::kBlue);
  try {
    parse_enum(kColourNames, "pink", "paint.colour");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(std::string(e.what()), "paint.colour: 'pink' is not one of red, green, blue");
  }
}

TEST(EnumTable, ErrorCodesAreGoogleRpcCodesByNumberAndName) {
  for (int number = 0; number <= 16; ++number) {
    const std::optional<ErrorCode> code = error_code_of_canonical(number);
    if (!code) continue;  // UNKNOWN, ABORTED, OUT_OF_RANGE, DATA_LOSS: not ours
    EXPECT_EQ(canonical_code(*code), number);
    EXPECT_EQ(to_string(*code), canonical_code_name(number));
  }
  EXPECT_EQ(to_string(ErrorCode::kInvalidArgument), "INVALID_ARGUMENT");
  EXPECT_EQ(to_string(ErrorCode::kUnauthenticated), "UNAUTHENTICATED");
  EXPECT_EQ(canonical_code(ErrorCode::kUnauthenticated), 16);
  EXPECT_EQ(canonical_code_name(10), "ABORTED");
  EXPECT_EQ(canonical_code_name(17), "UNKNOWN");
  EXPECT_EQ(canonical_code_name(-1), "UNKNOWN");
  for (const int number : {2, 10, 11, 15, 17}) {
    EXPECT_FALSE(error_code_of_canonical(number).has_value()) << number;
  }
}

}  // namespace test_enum_table
}  // namespace cube3d
