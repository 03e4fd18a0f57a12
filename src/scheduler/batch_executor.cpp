#include "cube3d/scheduler/batch_executor.h"

#include "cube3d/core/error.h"

namespace cube3d {
namespace {

Error static_only(const char* method) {
  return unimplemented(std::string("BatchExecutor::") + method +
                       ": this executor runs static batches only (batching.mode: static)");
}

}  // namespace

void BatchExecutor::admit(const std::vector<std::shared_ptr<Task>>& /*tasks*/) {
  throw static_only("admit");
}

void BatchExecutor::step() { throw static_only("step"); }

std::vector<std::shared_ptr<Task>> BatchExecutor::clear_slots() { return {}; }

}  // namespace cube3d
