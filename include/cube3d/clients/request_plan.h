// What cube3d-loadgen sends: request i of a run (warm-up first, from 0) is the template with a
// prompt and a seed, whatever the protocol (prompt_mix.h):
//   fixed mix: prompt i mod the prompt count, seed base_seed + i;
//   Zipf mix:  prompt k (rank k of the Zipf draw of request i under mix_seed), seed
//              base_seed + k - 1. The seed follows the prompt so that a repeated prompt is an
//              identical request, which a result cache can answer (the seed is one of the
//              parameters that make a mesh, so a seed per request would never repeat one).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cube3d/clients/prompt_mix.h"
#include "cube3d/v1/mesh_service.pb.h"

namespace cube3d {

struct RequestPlan {
  v1::GenerateMeshRequest request_template;  // every field but prompt and seed
  // At least one. Zipf: exactly the law's n, prompt k at index k - 1 (zipf_prompts).
  std::vector<std::string> prompts;
  uint64_t base_seed = 0;
  std::optional<ZipfDistribution> zipf;  // set: the Zipf mix, else the fixed one
  uint64_t mix_seed = 0;                 // the Zipf draw's seed
  // Set: request i carries request_id prefix + i (the template's otherwise).
  std::string request_id_prefix;

  // The prompt's index in `prompts` of request i.
  size_t prompt_index(uint64_t i) const;
  // Throws invalid_argument when there are no prompts, or a Zipf law and prompts of different
  // counts.
  v1::GenerateMeshRequest request(uint64_t i) const;
};

}  // namespace cube3d
