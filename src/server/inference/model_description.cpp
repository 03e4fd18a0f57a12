#include "cube3d/server/inference/model_description.h"

#include <algorithm>

#include "cube3d/core/error.h"
#include "cube3d/core/printable.h"

namespace cube3d::inference {
namespace {

const TensorSpec* find(const std::vector<TensorSpec>& tensors, const std::string& name) {
  for (const TensorSpec& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

}  // namespace

ModelDescription describe_model(const ModelIdentity& model, const RequestPolicy& policy,
                                int64_t tokens_per_shape, const InferenceOptions& options) {
  ModelDescription d;
  d.name = model.name;
  d.identity = model;
  d.tokens_per_shape = tokens_per_shape;
  d.options = options;
  d.default_format =
      policy.defaults.format == MeshFormat::kRaw ? MeshFormat::kGlb : policy.defaults.format;
  d.max_batch_size =
      options.batch_buckets.empty()
          ? 1
          : *std::max_element(options.batch_buckets.begin(), options.batch_buckets.end());
  d.inputs = {
      {kPrompt, DataType::kBytes, {1}, false},        {kSeed, DataType::kInt64, {1}, true},
      {kGuidanceScale, DataType::kFp32, {1}, true},   {kTopP, DataType::kFp32, {1}, true},
      {kResolutionBase, DataType::kInt32, {1}, true},
  };
  if (policy.model_has_bbox) d.inputs.push_back({kBoundingBox, DataType::kFp32, {3}, true});
  d.inputs.push_back({kFormat, DataType::kBytes, {1}, true});
  d.outputs = {
      {kMesh, DataType::kBytes, {1}, false},
      {kVertices, DataType::kFp32, {-1, 3}, false},
      {kFaces, DataType::kInt32, {-1, 3}, false},
  };
  return d;
}

const TensorSpec* find_input(const ModelDescription& model, const std::string& name) {
  return find(model.inputs, name);
}

const TensorSpec* find_output(const ModelDescription& model, const std::string& name) {
  return find(model.outputs, name);
}

void check_model(const ModelDescription& model, const std::string& name,
                 const std::string& version) {
  if (name != model.name) {
    throw not_found("unknown model '" + printable(name, 200) + "': this server serves '" +
                    model.name + "' (version " + model.version + ")");
  }
  if (!version.empty() && version != model.version) {
    throw not_found("model '" + model.name + "' has no version '" + printable(version, 100) +
                    "': its one version is " + model.version);
  }
}

std::string tensor_names(const std::vector<TensorSpec>& tensors) {
  std::string names;
  for (const TensorSpec& t : tensors) {
    if (!names.empty()) names += ", ";
    names += t.name;
  }
  return names;
}

}  // namespace cube3d::inference
