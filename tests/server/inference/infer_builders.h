// Test support for the Open Inference Protocol's model side: tensors in the raw layout, and a
// model described as the demo server describes it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cube3d/server/inference/infer_messages.h"
#include "cube3d/server/inference/model_description.h"

namespace cube3d::testing {

inline inference::Tensor bytes_tensor(const std::string& name,
                                      const std::vector<std::string>& elements,
                                      std::vector<int64_t> shape = {}) {
  inference::Tensor t;
  t.name = name;
  t.datatype = inference::DataType::kBytes;
  t.shape = shape.empty() ? std::vector<int64_t>{static_cast<int64_t>(elements.size())} : shape;
  for (const std::string& e : elements) inference::append_bytes_element(t.data, e);
  return t;
}

template <typename T>
inference::Tensor numbers_tensor(const std::string& name, inference::DataType type,
                                 const std::vector<T>& values, std::vector<int64_t> shape = {}) {
  inference::Tensor t;
  t.name = name;
  t.datatype = type;
  t.shape = shape.empty() ? std::vector<int64_t>{static_cast<int64_t>(values.size())} : shape;
  for (const T v : values) inference::append_element(t.data, v);
  return t;
}

// The demo model's description (v0.1-like: no bounding box unless `bbox`), buckets up to 8.
inline inference::ModelDescription demo_model(bool bbox = false) {
  RequestPolicy policy;
  policy.model_has_bbox = bbox;
  ModelIdentity identity;
  identity.name = bbox ? "cube3d-v0.5" : "demo";
  identity.server_version = "0.1.0 (test)";
  identity.weights_digest = "abc";
  return inference::describe_model(identity, policy, 64, inference::InferenceOptions{});
}

// A request for `model` with these inputs.
inline inference::InferRequest infer_request(std::vector<inference::Tensor> inputs,
                                             const std::string& model = "demo") {
  inference::InferRequest r;
  r.model_name = model;
  r.inputs = std::move(inputs);
  return r;
}

}  // namespace cube3d::testing
