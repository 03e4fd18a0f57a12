// The service and scheduler the service-level tests run (the mesh service's, the Open Inference
// Protocol run's): a 1 MiB message limit, T = 64 tokens a shape, and static batching over
// buckets {1, 2} with no queue delay on the fake executor, which runs whole batches.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "cube3d/scheduler/scheduler.h"
#include "cube3d/server/observability/metrics.h"
#include "cube3d/server/service/service.h"
#include "cube3d/server/wire/answer_codec.h"
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

// A fixture's service over those: metrics by buckets {1, 2}, the server's answer codec and the
// fake executor, each built before what reads it and destroyed after (members in that order).
// A test may rebuild service_ with options of its own.
class ServiceTest : public ::testing::Test {
 protected:
  ServiceTest()
      : metrics_({1, 2}),
        service_(std::make_unique<Service>(test_service_options(), metrics_, answer_codec_)),
        scheduler_(test_scheduler(executor_)) {}

  Metrics metrics_;
  const ProtoAnswerCodec answer_codec_;
  FakeMeshExecutor executor_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<Scheduler> scheduler_;
};

}  // namespace cube3d::testing
