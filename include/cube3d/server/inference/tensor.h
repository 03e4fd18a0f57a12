// A tensor of the Open Inference Protocol as this server handles it, whichever way it came:
// its name, datatype, shape and elements in the protocol's raw layout (little-endian elements,
// row-major; a BYTES element is a 4-byte little-endian length and then its bytes). The doors
// turn what they read (JSON `data`, the binary extension, gRPC's typed `contents` or
// `raw_input_contents`) into this, so that the model's tensors are checked in one place.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace cube3d::inference {

// The protocol's datatypes ("BOOL", "UINT8", ..., "FP32", "BYTES").
enum class DataType {
  kBool,
  kUint8,
  kUint16,
  kUint32,
  kUint64,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kFp16,
  kFp32,
  kFp64,
  kBf16,
  kBytes,
};

// "FP32" -> kFp32; nullopt for a name the protocol does not have (names are upper case).
std::optional<DataType> parse_datatype(std::string_view name);
std::string_view datatype_name(DataType type);
// Triton's model configuration name ("TYPE_FP32"; BYTES is "TYPE_STRING").
std::string_view config_type_name(DataType type);
// Bytes an element takes in the raw layout; 0 for BYTES (each element has its own length).
size_t element_size(DataType type);

struct Tensor {
  std::string name;
  DataType datatype = DataType::kBytes;
  std::vector<int64_t> shape;
  std::string data;  // raw layout
};

// The number of elements of `shape`; throws invalid_argument naming `what` for a negative
// dimension or a count past 2^40 (no tensor of this model is near it).
int64_t element_count(const std::vector<int64_t>& shape, const std::string& what);

// The elements of a raw BYTES tensor; throws invalid_argument naming `what` when the data does
// not hold exactly `count` length-prefixed elements.
std::vector<std::string> bytes_elements(std::string_view data, int64_t count,
                                        const std::string& what);
// Appends one BYTES element (its length, then the bytes) to raw data.
void append_bytes_element(std::string& data, std::string_view element);

// Appends one numeric element, little-endian, to raw data.
template <typename T>
void append_element(std::string& data, T value) {
  using Bits = std::conditional_t<
      sizeof(T) == 1, uint8_t,
      std::conditional_t<sizeof(T) == 2, uint16_t,
                         std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;
  const auto bits = std::bit_cast<Bits>(value);
  for (size_t i = 0; i < sizeof(T); ++i) {
    // Little-endian by construction, whatever the host (the protocol's raw layout).
    data.push_back(static_cast<char>((static_cast<uint64_t>(bits) >> (8 * i)) & 0xff));
  }
}

// The element at `index` of raw numeric data (the caller has checked the size).
double numeric_element(std::string_view data, DataType type, int64_t index);
// The same as a whole number, exactly, for the integer types; nullopt for a non-integer type.
std::optional<int64_t> integer_element(std::string_view data, DataType type, int64_t index);

// "[2, 1]"
std::string shape_text(const std::vector<int64_t>& shape);

}  // namespace cube3d::inference
