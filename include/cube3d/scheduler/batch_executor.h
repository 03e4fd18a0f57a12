// What the scheduler drives: something that runs a batch of jobs in one bucket. The server
// implements it over the engine and the mesh stage; tests use a fake.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cube3d/scheduler/job.h"

namespace cube3d {

class BatchExecutor {
 public:
  virtual ~BatchExecutor() = default;
  // Runs `jobs` (1 <= size <= bucket) padded to `bucket` rows. Must deliver an outcome to every
  // job (succeed or fail), possibly later from another thread, and should stop early when all
  // jobs are cancelled. Exceptions escaping it fail the batch's unfinished jobs.
  virtual void execute(const std::vector<std::shared_ptr<Job>>& jobs, int64_t bucket) = 0;
};

}  // namespace cube3d
