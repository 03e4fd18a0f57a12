#include "cube3d/server/inference/infer_answer.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <string>

#include "cube3d/core/error.h"
#include "cube3d/server/service/service.h"
#include "cube3d/server/wire/answer_codec.h"

namespace cube3d::inference {
namespace {

// The meshes' rows (vertices or triangles) as one [B, rows, 3] box (or [rows, 3] for one prompt
// without a batch dimension), a smaller mesh's missing rows filled with `pad`.
template <typename T, typename Rows>
Tensor rows_tensor(const char* name, DataType type, bool batch_dimension,
                   const std::vector<v1::GenerateMeshResponse>& responses, Rows rows, T pad) {
  Tensor out;
  out.name = name;
  out.datatype = type;
  int64_t most = 0;
  for (const auto& r : responses) most = std::max<int64_t>(most, rows(r).size() / 3);
  const auto batch = static_cast<int64_t>(responses.size());
  out.shape = batch_dimension || batch > 1 ? std::vector<int64_t>{batch, most, 3}
                                           : std::vector<int64_t>{most, 3};
  out.data.reserve(static_cast<size_t>(batch * most * 3) * sizeof(T));
  for (const auto& r : responses) {
    const auto& values = rows(r);
    for (const auto v : values) inference::append_element(out.data, static_cast<T>(v));
    for (int64_t i = values.size(); i < most * 3; ++i) inference::append_element(out.data, pad);
  }
  return out;
}

std::string joined(const std::vector<v1::GenerateMeshResponse>& responses,
                   const std::function<std::string(const v1::GenerateMeshResponse&)>& value) {
  std::string text;
  for (const auto& r : responses) {
    if (!text.empty()) text += ",";
    text += value(r);
  }
  return text;
}

}  // namespace

InferAnswer answer_of(const InferRequest& request, const ModelDescription& model,
                      const InferPlan& plan,
                      const std::vector<v1::GenerateMeshResponse>& responses) {
  if (responses.size() != plan.requests.size()) {
    throw internal_error("an inference of " + std::to_string(plan.requests.size()) +
                         " prompts came back with " + std::to_string(responses.size()) +
                         " answers");
  }
  InferAnswer answer;
  answer.model_name = model.name;
  answer.model_version = model.version;
  answer.id = request.id;
  const auto batch = static_cast<int64_t>(responses.size());
  for (const std::string& name : plan.outputs) {
    if (name == kMesh) {
      Tensor out;
      out.name = name;
      out.datatype = DataType::kBytes;
      out.shape = plan.batch_dimension ? std::vector<int64_t>{batch, 1} : std::vector{batch};
      for (const auto& r : responses) append_bytes_element(out.data, r.encoded());
      answer.outputs.push_back(std::move(out));
    } else if (name == kVertices) {
      answer.outputs.push_back(rows_tensor(
          kVertices, DataType::kFp32, plan.batch_dimension, responses,
          [](const v1::GenerateMeshResponse& r) -> const auto& { return r.raw().vertices(); },
          std::numeric_limits<float>::quiet_NaN()));
    } else if (name == kFaces) {
      answer.outputs.push_back(rows_tensor(
          kFaces, DataType::kInt32, plan.batch_dimension, responses,
          [](const v1::GenerateMeshResponse& r) -> const auto& { return r.raw().indices(); },
          int32_t{-1}));
    }
  }
  answer.parameters["request_id"] = joined(responses, [](const auto& r) { return r.request_id(); });
  answer.parameters["cache_status"] = joined(responses, [](const auto& r) {
    const auto status = cache_status_of(r.cache_status());
    return std::string(status ? cache_status_name(*status) : "none");
  });
  answer.parameters["vertex_count"] =
      joined(responses, [](const auto& r) { return std::to_string(r.vertex_count()); });
  answer.parameters["face_count"] =
      joined(responses, [](const auto& r) { return std::to_string(r.face_count()); });
  std::string warnings;
  for (const auto& r : responses) {
    for (const std::string& w : r.warnings()) {
      if (!warnings.empty()) warnings += " | ";
      warnings += w;
    }
  }
  if (!warnings.empty()) answer.parameters["warnings"] = warnings;
  return answer;
}

}  // namespace cube3d::inference
