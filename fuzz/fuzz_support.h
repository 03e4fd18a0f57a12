// What every fuzz target shares: the contract it checks. Project code may refuse any input by
// throwing cube3d::Error; anything else (another exception type, an internal error, a failed
// check of ours) is a finding, reported as an abort so that libFuzzer saves the input.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "cube3d/core/error.h"

namespace cube3d::fuzz {

[[noreturn]] inline void fail(const std::string& what, const std::string& detail = "") {
  std::fprintf(stderr, "\n*** fuzz finding: %s%s%s\n", what.c_str(), detail.empty() ? "" : ": ",
               detail.c_str());
  std::abort();
}

// A property of the output that must hold; the message says which.
#define CUBE3D_FUZZ_CHECK(condition, what)                    \
  do {                                                        \
    if (!(condition)) ::cube3d::fuzz::fail(what, #condition); \
  } while (0)

// CUBE3D_FUZZ_VERBOSE=1 prints each refusal: to check that a new seed gets as deep as meant
// (fuzzing itself runs quiet).
inline bool verbose() {
  static const bool on = std::getenv("CUBE3D_FUZZ_VERBOSE") != nullptr;
  return on;
}

// Runs `body`; a cube3d::Error is a refusal of the input and fine, except kInternal, which the
// project uses for "an invariant of ours broke". Returns whether `body` ran to its end.
template <typename Body>
bool refusals_ok(Body&& body) {
  try {
    body();
    if (verbose()) std::fprintf(stderr, "accepted\n");
    return true;
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kInternal) fail("internal error", e.what());
    if (verbose()) std::fprintf(stderr, "refused: %s\n", e.what());
  } catch (const std::exception& e) {
    fail("exception other than cube3d::Error", e.what());
  } catch (...) {
    fail("exception of an unknown type");
  }
  return false;
}

}  // namespace cube3d::fuzz
