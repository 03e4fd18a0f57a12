// The one clock every timing uses (monotonic), and milliseconds between two of its points.
#pragma once

#include <chrono>

namespace cube3d {

using SteadyClock = std::chrono::steady_clock;

inline double ms_between(SteadyClock::time_point from, SteadyClock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

inline double ms_since(SteadyClock::time_point from) {
  return ms_between(from, SteadyClock::now());
}

}  // namespace cube3d
