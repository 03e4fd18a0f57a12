// Test-only access to the Redis job store: what a replica killed with SIGKILL leaves behind, made
// on purpose. Included by tests alone (tools.layering refuses it elsewhere), so that nothing a
// production caller sees can stop a store's leases.
#pragma once

#include "cube3d/server/jobs/redis_job_store.h"

namespace cube3d {

struct RedisJobStoreTesting {
  // From now on `store` renews no lease, takes over nothing and hands nothing back; its jobs'
  // leases lapse, and other replicas take them over. Its work's outcomes are still written, and
  // then ignored (the records are no longer this replica's).
  static void stop_renewing(RedisJobStore& store);
};

}  // namespace cube3d
