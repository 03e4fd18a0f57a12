// The protocol's raw tensor layout: datatypes by name, element counts (no overflow, no negative
// dimension), BYTES elements (length-prefixed, every fault of the framing named), numbers
// little-endian both ways.
#include "cube3d/server/inference/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "expect_error.h"

namespace cube3d::inference {
namespace {

using testing::expect_error;

TEST(InferenceTensorTest, DatatypesByTheirProtocolNames) {
  EXPECT_EQ(parse_datatype("FP32"), DataType::kFp32);
  EXPECT_EQ(parse_datatype("BYTES"), DataType::kBytes);
  EXPECT_EQ(parse_datatype("INT64"), DataType::kInt64);
  EXPECT_FALSE(parse_datatype("fp32"));  // the protocol's names are upper case
  EXPECT_FALSE(parse_datatype("STRING"));
  EXPECT_FALSE(parse_datatype(""));
  EXPECT_EQ(datatype_name(DataType::kInt32), "INT32");
  EXPECT_EQ(config_type_name(DataType::kBytes), "TYPE_STRING");
  EXPECT_EQ(config_type_name(DataType::kFp32), "TYPE_FP32");
  EXPECT_EQ(element_size(DataType::kFp64), 8u);
  EXPECT_EQ(element_size(DataType::kBytes), 0u);
}

TEST(InferenceTensorTest, ElementCountsRefuseNegativeAndHugeShapes) {
  EXPECT_EQ(element_count({2, 3}, "input X"), 6);
  EXPECT_EQ(element_count({}, "input X"), 1);
  EXPECT_EQ(element_count({4, 0}, "input X"), 0);
  expect_error(
      [] {
        element_count({2, -1}, "input X");
      },
      ErrorCode::kInvalidArgument, {"input X", "[2, -1]", "negative"});
  // 2^21 cubed overflows nothing here: refused as too many before any multiplication wraps.
  expect_error(
      [] {
        element_count({1 << 21, 1 << 21, 1 << 21}, "input X");
      },
      ErrorCode::kInvalidArgument, "too many elements");
  const int64_t big = std::numeric_limits<int64_t>::max();
  expect_error(
      [&] {
        element_count({big, big}, "input X");
      },
      ErrorCode::kInvalidArgument, "too many elements");
}

TEST(InferenceTensorTest, BytesElementsRoundTripAndEveryFramingFaultIsNamed) {
  std::string data;
  append_bytes_element(data, "a chair");
  append_bytes_element(data, "");
  append_bytes_element(data, std::string("\0\xff", 2));
  EXPECT_EQ(data.size(), 4u + 7 + 4 + 0 + 4 + 2);
  const auto elements = bytes_elements(data, 3, "input PROMPT");
  ASSERT_EQ(elements.size(), 3u);
  EXPECT_EQ(elements[0], "a chair");
  EXPECT_EQ(elements[1], "");
  EXPECT_EQ(elements[2], std::string("\0\xff", 2));

  expect_error([&] { bytes_elements(data, 4, "input PROMPT"); }, ErrorCode::kInvalidArgument,
               {"input PROMPT", "ends in element 3 of 4"});
  expect_error([&] { bytes_elements(data, 2, "input PROMPT"); }, ErrorCode::kInvalidArgument,
               {"input PROMPT", "6 bytes are left after its 2 BYTES elements"});
  std::string lying;
  append_element(lying, uint32_t{1000});
  lying += "short";
  expect_error([&] { bytes_elements(lying, 1, "input PROMPT"); }, ErrorCode::kInvalidArgument,
               {"element 0 says 1000 bytes and 5 are left"});
  // A length of 4 GiB - 1 on a short buffer is a fault, never a read past the end.
  std::string huge;
  append_element(huge, uint32_t{0xffffffff});
  expect_error([&] { bytes_elements(huge, 1, "input PROMPT"); }, ErrorCode::kInvalidArgument,
               "says 4294967295 bytes");
}

TEST(InferenceTensorTest, NumbersAreLittleEndianBothWays) {
  std::string data;
  append_element(data, int32_t{-2});
  EXPECT_EQ(data, std::string("\xfe\xff\xff\xff", 4));
  append_element(data, int32_t{258});
  EXPECT_EQ(*integer_element(data, DataType::kInt32, 0), -2);
  EXPECT_EQ(*integer_element(data, DataType::kInt32, 1), 258);

  std::string floats;
  append_element(floats, 1.5f);
  append_element(floats, -0.25f);
  EXPECT_EQ(numeric_element(floats, DataType::kFp32, 0), 1.5);
  EXPECT_EQ(numeric_element(floats, DataType::kFp32, 1), -0.25);
  EXPECT_FALSE(integer_element(floats, DataType::kFp32, 0));

  std::string wide;
  append_element(wide, int64_t{-9'000'000'000});
  append_element(wide, uint64_t{1} << 63);
  EXPECT_EQ(*integer_element(wide, DataType::kInt64, 0), -9'000'000'000);
  // Past int64's range: no whole number this model takes.
  EXPECT_FALSE(integer_element(wide, DataType::kUint64, 1));

  std::string half;
  append_element(half, uint16_t{0x3c00});  // FP16 1.0
  append_element(half, uint16_t{0xc000});  // FP16 -2.0
  EXPECT_EQ(numeric_element(half, DataType::kFp16, 0), 1.0);
  EXPECT_EQ(numeric_element(half, DataType::kFp16, 1), -2.0);
  std::string bf;
  append_element(bf, uint16_t{0x3fc0});  // BF16 1.5
  EXPECT_EQ(numeric_element(bf, DataType::kBf16, 0), 1.5);
  EXPECT_EQ(shape_text({2, 1}), "[2, 1]");
  EXPECT_EQ(shape_text({}), "[]");
}

}  // namespace
}  // namespace cube3d::inference
