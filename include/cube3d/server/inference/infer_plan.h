// An Open Inference Protocol request read against the model's tensors: one GenerateMeshRequest
// per prompt of the batch (the service then checks each as it checks every request: ranges,
// UTF-8, limits), the outputs to answer with, and what the request's parameters ask of the call.
// Everything the protocol itself decides is checked here and refused with invalid_argument
// naming the tensor or parameter: an unknown or repeated input, a datatype or shape the model
// does not take, data that does not match its shape, a missing PROMPT, an unknown output, a
// BBOX on a model without one, an unknown parameter.
//
// A batch: PROMPT [B] or [B, 1] holds B prompts (B up to max_batch_size), each one request of
// its own to the service (the scheduler batches them as it batches any); every other input
// holds one value for all of them or one for each. Values may also come as request
// parameters (seed, guidance_scale, top_p, resolution_base, bbox as "x,y,z", format), one for
// the whole batch, and besides: target_face_count, mesh_profile (none, roblox), priority
// (Triton's: 0 default, 1 interactive, 2 batch), timeout (microseconds), progress (a stream's
// progress responses).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "cube3d/server/inference/infer_messages.h"
#include "cube3d/server/inference/model_description.h"
#include "cube3d/v1/mesh_service.pb.h"

namespace cube3d::inference {

struct InferPlan {
  std::vector<v1::GenerateMeshRequest> requests;  // one per prompt, in order
  // PROMPT came with a batch dimension ([B, 1]): every output's shape starts with B. Without
  // ([B]), MESH is [B], and VERTICES / FACES are [N, 3] / [M, 3] for one prompt ([B, N, 3] for
  // more: infer_answer.h).
  bool batch_dimension = false;
  std::vector<std::string> outputs;  // the outputs to answer with, in the request's order
  std::optional<std::chrono::microseconds> timeout;
  bool progress = false;
};

// What the calling door adds to the rules: parameters it reads itself (passed over here), and
// outputs it answers as text (HTTP's JSON `data`), which a binary file cannot be.
struct DoorRules {
  std::vector<std::string> parameters;
  std::vector<std::string> text_outputs;
  std::string how_to_ask_binary;  // for the message that refuses a binary file as text
};

InferPlan plan_infer(const InferRequest& request, const ModelDescription& model,
                     const DoorRules& door = {});

// A service's message about one of the plan's requests in the protocol's words: a message that
// starts with a request field ("guidance_scale must be ...") is prefixed with the input (or
// parameter) that carries it ("input GUIDANCE_SCALE: guidance_scale must be ..."), and with
// the prompt's place in a batch of more than one ("PROMPT[2]: ...", from 0).
std::string in_protocol_terms(const std::string& message, size_t index, size_t batch);

}  // namespace cube3d::inference
