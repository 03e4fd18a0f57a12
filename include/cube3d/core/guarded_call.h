// Calls a callback for a thread that must survive it (a timer, an I/O lane, a subscriber):
// whatever the callback throws is logged as "<who>: <what> threw: <reason>" and goes no further.
#pragma once

#include <spdlog/spdlog.h>

#include <exception>
#include <string_view>
#include <utility>

namespace cube3d {

template <typename Fn, typename... Args>
void guarded_call(std::string_view who, std::string_view what, Fn& fn, Args&&... args) {
  try {
    fn(std::forward<Args>(args)...);
  } catch (const std::exception& e) {
    spdlog::error("{}: {} threw: {}", who, what, e.what());
  } catch (...) {
    spdlog::error("{}: {} threw a non-standard exception", who, what);
  }
}

}  // namespace cube3d
