// Test support: each of `needles` stands in `text`, in this order (a tool's --help: its flags,
// their metavars and texts, and where a shared group of flags falls among the tool's own).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace cube3d::testing {

inline void expect_in_order(const std::string& text, const std::vector<std::string>& needles) {
  size_t at = 0;
  for (const std::string& needle : needles) {
    const size_t found = text.find(needle, at);
    if (found == std::string::npos) {
      ADD_FAILURE() << "'" << needle << "' (in order) is not in:\n" << text;
      return;
    }
    at = found + needle.size();
  }
}

}  // namespace cube3d::testing
