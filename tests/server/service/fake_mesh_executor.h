// A BatchExecutor for the service's tests (a real scheduler over it, no model): each job
// succeeds with a small mesh of `vertices` vertices, or fails with `error`, or is held without an
// outcome (a long generation) while `hold` is set.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/scheduler/batch_executor.h"
#include "cube3d/scheduler/task.h"
#include "cube3d/server/work/work_request.h"
#include "cube3d/server/work/work_result.h"

namespace cube3d::testing {

class FakeMeshExecutor final : public BatchExecutor {
 public:
  int64_t vertices = 3;
  std::optional<Error> error;

  std::atomic<bool> hold{false};  // keep the jobs without an outcome (a long generation)

  size_t held_count() {
    const std::lock_guard lock(mutex_);
    return held_.size();
  }
  std::shared_ptr<Task> held_job(size_t i) {
    const std::lock_guard lock(mutex_);
    return held_.at(i);
  }

  // The requests the executor was given, in order.
  std::vector<WorkRequest> seen() {
    const std::lock_guard lock(mutex_);
    return seen_;
  }

  void execute(const std::vector<std::shared_ptr<Task>>& jobs, int64_t bucket) override {
    for (const auto& job : jobs) {
      {
        const std::lock_guard lock(mutex_);
        seen_.push_back(job->payload<WorkRequest>());
      }
      if (hold) {
        const std::lock_guard lock(mutex_);
        held_.push_back(job);
        continue;
      }
      if (error) {
        job->fail(*error);
        continue;
      }
      WorkResult result;
      result.request_id = job->ticket().request_id;
      result.format = job->payload<WorkRequest>().format;
      result.vertices.assign(static_cast<size_t>(3 * vertices), 0.5f);
      result.indices = {0, 1, 2};
      result.encoded = std::string(static_cast<size_t>(vertices), 'g');
      result.vertex_count = vertices;
      result.face_count = 1;
      result.occupancy_points = 1000;
      result.batch_bucket = bucket;
      job->succeed(std::move(result));
    }
  }

 private:
  std::mutex mutex_;
  std::vector<std::shared_ptr<Task>> held_;
  std::vector<WorkRequest> seen_;
};

}  // namespace cube3d::testing
