// Test support: waits for something another thread does, bounded in time (a loaded CI machine
// gets seconds for what takes milliseconds). Returns the predicate's last answer, for the test to
// assert.
#pragma once

#include <chrono>
#include <thread>

namespace cube3d::testing {

template <typename Predicate>
bool eventually(Predicate predicate, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!predicate()) {
    if (std::chrono::steady_clock::now() >= until) return predicate();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

}  // namespace cube3d::testing
