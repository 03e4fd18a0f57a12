#include "cube3d/mesh/mesh_metadata.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <type_traits>

#include "cube3d/core/error.h"
#include "cube3d/core/json_string.h"
#include "cube3d/core/utf8.h"

namespace cube3d {
namespace {

bool is_identifier(std::string_view key) {
  if (key.empty() || (key[0] >= '0' && key[0] <= '9')) return false;
  return std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

void check_double(const std::string& key, double value) {
  if (!std::isfinite(value)) {
    throw invalid_argument("mesh metadata '" + key + "': " + std::to_string(value) +
                           " is not a finite number (JSON has no NaN or infinity)");
  }
}

template <typename T>
void append_number(std::string& out, T value) {
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  out.append(buffer, result.ptr);
}

// std::to_chars gives the shortest text that reads back to the same double; "3" gets a ".0" so
// that readers keep a double a double (Python's json reads 3 as an int).
void append_double(std::string& out, double value) {
  const std::size_t start = out.size();
  append_number(out, value);
  if (out.find_first_of(".e", start) == std::string::npos) out += ".0";
}

void append_value(std::string& out, const MeshMetadataValue& value, bool ensure_ascii) {
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          append_json_string(out, v, ensure_ascii);
        } else if constexpr (std::is_same_v<T, bool>) {
          out += v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, double>) {
          append_double(out, v);
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          out += '[';
          for (std::size_t i = 0; i < v.size(); ++i) {
            if (i > 0) out += ',';
            append_double(out, v[i]);
          }
          out += ']';
        } else {
          append_number(out, v);
        }
      },
      value);
}

}  // namespace

MeshMetadata& MeshMetadata::add(std::string key, MeshMetadataValue value) {
  if (!is_identifier(key)) {
    throw invalid_argument("mesh metadata key '" + key +
                           "' is not a plain identifier: use a-z, 0-9 and _, not starting with a "
                           "digit");
  }
  if (find(key) != nullptr) {
    throw invalid_argument("mesh metadata key '" + key + "' is already set");
  }
  if (const auto* d = std::get_if<double>(&value)) check_double(key, *d);
  if (const auto* a = std::get_if<std::vector<double>>(&value)) {
    for (const double d : *a) check_double(key, d);
  }
  if (const auto* s = std::get_if<std::string>(&value)) {
    if (const auto bad = find_invalid_utf8(*s)) {
      throw invalid_argument("mesh metadata '" + key + "' is not valid UTF-8 (byte offset " +
                             std::to_string(*bad) + ")");
    }
  }
  entries_.push_back({std::move(key), std::move(value)});
  return *this;
}

const MeshMetadataValue* MeshMetadata::find(std::string_view key) const {
  for (const MeshMetadataEntry& entry : entries_) {
    if (entry.key == key) return &entry.value;
  }
  return nullptr;
}

std::string metadata_json(const MeshMetadataValue& value, bool ensure_ascii) {
  std::string out;
  append_value(out, value, ensure_ascii);
  return out;
}

std::string metadata_json(const MeshMetadata& metadata, bool ensure_ascii) {
  std::string out = "{";
  for (const MeshMetadataEntry& entry : metadata.entries()) {
    if (out.size() > 1) out += ',';
    append_json_string(out, entry.key, ensure_ascii);
    out += ':';
    append_value(out, entry.value, ensure_ascii);
  }
  out += '}';
  return out;
}

}  // namespace cube3d
