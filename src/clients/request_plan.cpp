#include "cube3d/clients/request_plan.h"

#include "cube3d/core/error.h"

namespace cube3d {

v1::GenerateMeshRequest RequestPlan::request(uint64_t i) const {
  if (prompts.empty()) throw invalid_argument("a request plan needs at least one prompt");
  v1::GenerateMeshRequest out = request_template;
  out.set_prompt(prompts[i % prompts.size()]);
  out.set_seed(base_seed + i);
  return out;
}

}  // namespace cube3d
