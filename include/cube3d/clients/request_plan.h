// What cube3d-loadgen sends: request i of a run (warm-up first, from 0) is the template with
// prompt i mod the prompt count and seed base_seed + i, whatever the protocol.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cube3d/v1/mesh_service.pb.h"

namespace cube3d {

struct RequestPlan {
  v1::GenerateMeshRequest request_template;  // every field but prompt and seed
  std::vector<std::string> prompts;          // at least one
  uint64_t base_seed = 0;

  // Throws invalid_argument when there are no prompts.
  v1::GenerateMeshRequest request(uint64_t i) const;
};

}  // namespace cube3d
