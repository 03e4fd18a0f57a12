// A mapping between an enum and its names (or the values of another enum, e.g. the API's), listed
// once as a table of pairs and read in both directions: to_string and parse, or to and from the
// wire, cannot disagree, and a new value is added in one place.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "cube3d/core/error.h"

namespace cube3d {

template <typename A, typename B, std::size_t N>
using EnumTable = std::array<std::pair<A, B>, N>;

// The right side of the first row whose left side is `a`; nullopt when none is.
template <typename A, typename B, std::size_t N>
constexpr std::optional<B> lookup(const EnumTable<A, B, N>& table, const A& a) {
  for (const auto& [left, right] : table) {
    if (left == a) return right;
  }
  return std::nullopt;
}

// The left side of the first row whose right side is `b`; nullopt when none is.
template <typename A, typename B, std::size_t N>
constexpr std::optional<A> reverse_lookup(const EnumTable<A, B, N>& table, const B& b) {
  for (const auto& [left, right] : table) {
    if (right == b) return left;
  }
  return std::nullopt;
}

// The names, in table order, joined with ", ": "on, off, emulate".
template <typename A, std::size_t N>
std::string names_of(const EnumTable<A, std::string_view, N>& table) {
  std::string names;
  for (const auto& [value, name] : table) {
    if (!names.empty()) names += ", ";
    names += name;
  }
  return names;
}

// The value named `text`; throws invalid_argument "<field>: 'x' is not one of a, b, c".
template <typename A, std::size_t N>
A parse_enum(const EnumTable<A, std::string_view, N>& table, std::string_view text,
             const std::string& field) {
  if (const std::optional<A> value = reverse_lookup(table, text)) return *value;
  throw invalid_argument(field + ": '" + std::string(text) + "' is not one of " + names_of(table));
}

}  // namespace cube3d
