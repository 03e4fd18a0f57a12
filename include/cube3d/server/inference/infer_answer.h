// The answer to an Open Inference Protocol request from the service's responses, one per
// prompt of its plan (infer_plan.h): the outputs it asked for, in its order, and parameters
// that say what the service did (each prompt's request id and cache status, warnings).
//
//   MESH      BYTES, [B] or [B, 1]: each prompt's file (its FORMAT)
//   VERTICES  FP32, [N, 3] (one prompt without a batch dimension) or [B, N, 3]: the meshes'
//             vertices
//   FACES     INT32, [M, 3] or [B, M, 3]: their triangles, three vertex indices each,
//             counter-clockwise seen from outside
// Meshes differ in size, and a tensor is a box: with more than one prompt, N and M are the
// largest mesh's, and a smaller mesh's rows past its own end are padding, NaN in VERTICES and
// -1 in FACES; the parameters vertex_count and face_count say where each mesh ends.
//
// Parameters: request_id, cache_status (hit, miss, coalesced, bypass), vertex_count and
// face_count, each a string with one value a prompt, comma-separated; warnings, when any,
// joined by " | ".
#pragma once

#include <vector>

#include "cube3d/server/inference/infer_messages.h"
#include "cube3d/server/inference/infer_plan.h"
#include "cube3d/v1/mesh_service.pb.h"

namespace cube3d::inference {

InferAnswer answer_of(const InferRequest& request, const ModelDescription& model,
                      const InferPlan& plan,
                      const std::vector<v1::GenerateMeshResponse>& responses);

}  // namespace cube3d::inference
