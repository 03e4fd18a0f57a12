// An inference request and its answer in the Open Inference Protocol's terms, as plain values
// the doors fill from their transport (HTTP/JSON with the binary extension, gRPC) and render
// back; the model's side of the protocol (inference/model_description.h, infer_plan.h,
// infer_answer.h) works on these alone.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "cube3d/server/inference/tensor.h"

namespace cube3d::inference {

// A parameter's value: the protocol's kinds (JSON numbers come as int64 when whole, else
// double; gRPC says which).
using ParameterValue = std::variant<bool, int64_t, uint64_t, double, std::string>;
using Parameters = std::map<std::string, ParameterValue>;

struct InferRequest {
  std::string model_name;
  std::string model_version;  // empty: the server's choice
  std::string id;             // the client's, echoed in the answer
  Parameters parameters;
  std::vector<Tensor> inputs;
  std::vector<std::string> outputs;  // empty: the model's default outputs
};

struct InferAnswer {
  std::string model_name;
  std::string model_version;
  std::string id;
  Parameters parameters;
  std::vector<Tensor> outputs;
};

}  // namespace cube3d::inference
