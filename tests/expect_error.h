// Test support: runs f, which must throw a cube3d::Error with this code and a message that
// contains each needle.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
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

inline void expect_error(const std::function<void()>& f, ErrorCode code,
                         const std::string& needle) {
  expect_error(f, code, std::vector<std::string>{needle});
}

}  // namespace cube3d::testing
