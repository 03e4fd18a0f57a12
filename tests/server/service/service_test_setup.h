// The service and scheduler the service-level tests run (the mesh service's, the Open Inference
// Protocol run's): a 1 MiB message limit, T = 64 tokens a shape, and static batching over
// buckets {1, 2} with no queue delay on the fake executor, which runs whole batches.
#pragma once

#include <memory>

#include "cube3d/scheduler/scheduler.h"
#include "cube3d/server/service/service.h"
#include "server/service/fake_mesh_executor.h"

namespace cube3d::testing {

inline ServiceOptions test_service_options() {
  ServiceOptions options;
  options.policy.limits.max_message_bytes = 1 << 20;
  options.tokens_per_shape = 64;
  return options;
}

inline std::unique_ptr<Scheduler> test_scheduler(FakeMeshExecutor& executor) {
  SchedulerConfig config;
  config.mode = BatchingMode::kStatic;  // the fake executor runs whole batches
  config.batch_buckets = {1, 2};
  config.max_queue_delay_ms = 0;
  return std::make_unique<Scheduler>(config, executor);
}

}  // namespace cube3d::testing
