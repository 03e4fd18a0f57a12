// Test support: runs f, which must throw a cube3d::Error with this code and a message that
// contains each needle (or hands the error back for checks of a test's own).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "cube3d/core/error.h"

namespace cube3d::testing {

inline void expect_error(const std::function<void()>& f, ErrorCode code,
                         const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing '" << needles.front() << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const std::string& needle : needles) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << "'" << e.what() << "' does not contain '" << needle << "'";
    }
  }
}

// expect_error(f, code, {"a", "b"}): a braced list of needles picks this one.
inline void expect_error(const std::function<void()>& f, ErrorCode code,
                         std::initializer_list<std::string> needles) {
  expect_error(f, code, std::vector<std::string>(needles));
}

inline void expect_error(const std::function<void()>& f, ErrorCode code,
                         const std::string& needle) {
  expect_error(f, code, std::vector<std::string>{needle});
}

// The cube3d::Error that f throws, for checks of its own; a failure of the test (and a
// placeholder) when f throws none.
inline Error thrown_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no cube3d::Error was thrown";
  return Error(ErrorCode::kInternal, "<nothing thrown>");
}

inline bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

}  // namespace cube3d::testing
