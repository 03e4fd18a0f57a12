// What the scheduler's test files share besides the fake executor: the error a submit throws,
// and job ids built without GCC 12's false -Wstringop-overflow on "literal" + std::string&&.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "cube3d/core/error.h"
#include "cube3d/scheduler/job.h"
#include "cube3d/scheduler/scheduler.h"

namespace cube3d::test {

// The error that `submit` throws, if any.
inline std::optional<Error> submit_error(Scheduler& scheduler, std::shared_ptr<Job> job) {
  try {
    scheduler.submit(std::move(job));
  } catch (const Error& e) {
    return e;
  }
  return std::nullopt;
}

// "<prefix>-<index>", built by appending.
inline std::string job_id(const std::string& prefix, int index) {
  std::string id = prefix;
  id += '-';
  id += std::to_string(index);
  return id;
}

}  // namespace cube3d::test
