// Python's str.lower() (CPython 3.11) as CLIP's clean-up uses it. Expected strings from Python.
#include "cube3d/model/clip_lower_case.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cube3d/core/utf8.h"

namespace cube3d {
namespace test_clip_lower_case {

std::string lower(std::string_view text) { return encode_utf8(python_lower(decode_utf8(text))); }

TEST(ClipLowerCase, MatchesPython) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", ""},
      {"A Chair, 42!", "a chair, 42!"},
      {"\u00c0\u00c9\u00ce\u00de", "\u00e0\u00e9\u00ee\u00fe"},
      {"\u0100\u0101\u0178", "\u0101\u0101\u00ff"},  // stride-2 runs and a single mapping
      {"\u0130stanbul", "i\u0307stanbul"},           // the one one-to-many mapping
      {"\u1e9e", "\u00df"},                          // capital sharp s
      {"\u212a\u212b\u2126", "k\u00e5\u03c9"},       // Kelvin, Angstrom and Ohm signs
      {"\u24b6 \u216b", "\u24d0 \u217b"},            // circled letters, Roman numerals
      {"\u0410\u0401", "\u0430\u0451"},              // Cyrillic
      {"\U00010400", "\U00010428"},                  // Deseret, above the BMP
      {"\u00df\u01c5\u2170", "\u00df\u01c6\u2170"},  // no change / title case / already lower
  };
  for (const auto& [text, expected] : cases) {
    EXPECT_EQ(lower(text), expected) << "text: " << text;
  }
}

// CPython's handle_capital_sigma: final after a cased letter (case-ignorable ones skipped)
// unless a cased letter follows (the same skipped).
TEST(ClipLowerCase, FinalSigma) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"\u03a3", "\u03c3"},              // alone: not final
      {"\u0391\u03a3", "\u03b1\u03c2"},  // word end
      {"\u03a3\u0391\u03a3 \u03a3", "\u03c3\u03b1\u03c2 \u03c3"},
      {"\u0391\u03a3.", "\u03b1\u03c2."},              // '.' is case-ignorable
      {"\u0391\u03a3'\u0391", "\u03b1\u03c3'\u03b1"},  // a cased letter after the "'"
      {"\u0391'\u03a3", "\u03b1'\u03c2"},              // skipped before it too
      {"1\u03a3", "1\u03c3"},                          // a digit is not cased
      {"\u0391\u03a3\u0301", "\u03b1\u03c2\u0301"},    // a combining mark is ignorable
  };
  for (const auto& [text, expected] : cases) {
    EXPECT_EQ(lower(text), expected) << "text: " << text;
  }
}

}  // namespace test_clip_lower_case
}  // namespace cube3d
