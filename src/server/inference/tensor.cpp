#include "cube3d/server/inference/tensor.h"

#include <array>
#include <bit>
#include <cmath>
#include <limits>

#include "cube3d/core/error.h"

namespace cube3d::inference {
namespace {

struct TypeInfo {
  DataType type;
  std::string_view name;
  std::string_view config_name;
  size_t size;
};

constexpr std::array<TypeInfo, 14> kTypes = {{
    {DataType::kBool, "BOOL", "TYPE_BOOL", 1},
    {DataType::kUint8, "UINT8", "TYPE_UINT8", 1},
    {DataType::kUint16, "UINT16", "TYPE_UINT16", 2},
    {DataType::kUint32, "UINT32", "TYPE_UINT32", 4},
    {DataType::kUint64, "UINT64", "TYPE_UINT64", 8},
    {DataType::kInt8, "INT8", "TYPE_INT8", 1},
    {DataType::kInt16, "INT16", "TYPE_INT16", 2},
    {DataType::kInt32, "INT32", "TYPE_INT32", 4},
    {DataType::kInt64, "INT64", "TYPE_INT64", 8},
    {DataType::kFp16, "FP16", "TYPE_FP16", 2},
    {DataType::kFp32, "FP32", "TYPE_FP32", 4},
    {DataType::kFp64, "FP64", "TYPE_FP64", 8},
    {DataType::kBf16, "BF16", "TYPE_BF16", 2},
    {DataType::kBytes, "BYTES", "TYPE_STRING", 0},
}};

const TypeInfo& info(DataType type) {
  for (const TypeInfo& t : kTypes) {
    if (t.type == type) return t;
  }
  return kTypes.back();
}

// No tensor of this model comes near it; a product past it is a client's error (or an attempt
// to overflow the arithmetic).
constexpr int64_t kMaxElements = int64_t{1} << 40;

uint64_t read_le(std::string_view data, size_t at, size_t size) {
  uint64_t value = 0;
  for (size_t i = 0; i < size; ++i) {
    value |= static_cast<uint64_t>(static_cast<uint8_t>(data[at + i])) << (8 * i);
  }
  return value;
}

template <typename T, typename Bits>
T from_bits(uint64_t bits) {
  return std::bit_cast<T>(static_cast<Bits>(bits));
}

// IEEE half precision and bfloat16, widened.
double half_to_double(uint16_t h) {
  const int sign = (h >> 15) & 1;
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  double value = 0;
  if (exponent == 0) {
    value = std::ldexp(mantissa, -24);
  } else if (exponent == 31) {
    value = mantissa ? std::numeric_limits<double>::quiet_NaN()
                     : std::numeric_limits<double>::infinity();
  } else {
    value = std::ldexp(mantissa + 1024, exponent - 25);
  }
  return sign ? -value : value;
}

}  // namespace

std::optional<DataType> parse_datatype(std::string_view name) {
  for (const TypeInfo& t : kTypes) {
    if (t.name == name) return t.type;
  }
  return std::nullopt;
}

std::string_view datatype_name(DataType type) { return info(type).name; }
std::string_view config_type_name(DataType type) { return info(type).config_name; }
size_t element_size(DataType type) { return info(type).size; }

int64_t element_count(const std::vector<int64_t>& shape, const std::string& what) {
  int64_t count = 1;
  for (const int64_t dim : shape) {
    if (dim < 0) {
      throw invalid_argument(what + ": shape " + shape_text(shape) + " has a negative dimension");
    }
    if (dim != 0 && count > kMaxElements / dim) {
      throw invalid_argument(what + ": shape " + shape_text(shape) + " has too many elements");
    }
    count *= dim;
  }
  return count;
}

std::vector<std::string> bytes_elements(std::string_view data, int64_t count,
                                        const std::string& what) {
  std::vector<std::string> elements;
  size_t at = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (data.size() - at < 4) {
      throw invalid_argument(what + ": the data ends in element " + std::to_string(i) + " of " +
                             std::to_string(count) +
                             " (each BYTES element is a 4-byte little-endian length and then "
                             "its bytes)");
    }
    const uint64_t length = read_le(data, at, 4);
    at += 4;
    if (length > data.size() - at) {
      throw invalid_argument(what + ": element " + std::to_string(i) + " says " +
                             std::to_string(length) + " bytes and " +
                             std::to_string(data.size() - at) + " are left");
    }
    elements.emplace_back(data.substr(at, length));
    at += length;
  }
  if (at != data.size()) {
    throw invalid_argument(what + ": " + std::to_string(data.size() - at) +
                           " bytes are left after its " + std::to_string(count) +
                           " BYTES elements");
  }
  return elements;
}

void append_bytes_element(std::string& data, std::string_view element) {
  append_element(data, static_cast<uint32_t>(element.size()));
  data.append(element);
}

double numeric_element(std::string_view data, DataType type, int64_t index) {
  const size_t size = element_size(type);
  const uint64_t bits = read_le(data, static_cast<size_t>(index) * size, size);
  switch (type) {
    case DataType::kBool:
      return bits != 0 ? 1.0 : 0.0;
    case DataType::kFp16:
      return half_to_double(static_cast<uint16_t>(bits));
    case DataType::kBf16:
      return static_cast<double>(from_bits<float, uint32_t>(bits << 16));
    case DataType::kFp32:
      return static_cast<double>(from_bits<float, uint32_t>(bits));
    case DataType::kFp64:
      return from_bits<double, uint64_t>(bits);
    case DataType::kUint64:
      return static_cast<double>(bits);
    case DataType::kBytes:
      return 0;
    default:
      return static_cast<double>(*integer_element(data, type, index));
  }
}

std::optional<int64_t> integer_element(std::string_view data, DataType type, int64_t index) {
  const size_t size = element_size(type);
  if (size == 0) return std::nullopt;
  const uint64_t bits = read_le(data, static_cast<size_t>(index) * size, size);
  switch (type) {
    case DataType::kUint8:
    case DataType::kUint16:
    case DataType::kUint32:
      return static_cast<int64_t>(bits);
    case DataType::kUint64:
      // Past int64's range it is no whole number this model takes either.
      if (bits > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
      return static_cast<int64_t>(bits);
    case DataType::kInt8:
      return from_bits<int8_t, uint8_t>(bits);
    case DataType::kInt16:
      return from_bits<int16_t, uint16_t>(bits);
    case DataType::kInt32:
      return from_bits<int32_t, uint32_t>(bits);
    case DataType::kInt64:
      return from_bits<int64_t, uint64_t>(bits);
    default:
      return std::nullopt;
  }
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

}  // namespace cube3d::inference
