#include "cube3d/clients/request_plan.h"

#include "cube3d/core/error.h"

namespace cube3d {

size_t RequestPlan::prompt_index(uint64_t i) const {
  if (prompts.empty()) throw invalid_argument("a request plan needs at least one prompt");
  if (!zipf) return i % prompts.size();
  if (zipf->n() != prompts.size()) {
    throw invalid_argument(
        "a Zipf request plan needs one prompt per rank: " + std::to_string(zipf->n()) + " ranks, " +
        std::to_string(prompts.size()) + " prompts");
  }
  return zipf->draw(mix_seed, i) - 1;
}

v1::GenerateMeshRequest RequestPlan::request(uint64_t i) const {
  const size_t index = prompt_index(i);
  v1::GenerateMeshRequest out = request_template;
  out.set_prompt(prompts[index]);
  out.set_seed(zipf ? base_seed + index : base_seed + i);
  if (!request_id_prefix.empty()) out.set_request_id(request_id_prefix + std::to_string(i));
  return out;
}

}  // namespace cube3d
