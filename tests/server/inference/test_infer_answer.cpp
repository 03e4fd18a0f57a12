// The answer to an Open Inference Protocol request (inference/infer_answer.h): MESH with one
// file a prompt, VERTICES and FACES as [N, 3] / [B, N, 3] boxes (a smaller mesh padded with NaN
// and -1), and the parameters that say where each mesh ends and what the service did.
#include "cube3d/server/inference/infer_answer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cube3d/core/error.h"
#include "server/inference/infer_builders.h"

namespace cube3d::inference {
namespace {

using testing::bytes_tensor;
using testing::demo_model;
using testing::infer_request;

v1::GenerateMeshResponse mesh(const std::string& file, int vertices, int faces,
                              const std::string& id) {
  v1::GenerateMeshResponse r;
  r.set_request_id(id);
  r.set_encoded(file);
  r.set_vertex_count(static_cast<uint32_t>(vertices));
  r.set_face_count(static_cast<uint32_t>(faces));
  r.set_cache_status(v1::CACHE_STATUS_MISS);
  for (int i = 0; i < 3 * vertices; ++i) r.mutable_raw()->add_vertices(static_cast<float>(i));
  for (int i = 0; i < 3 * faces; ++i)
    r.mutable_raw()->add_indices(static_cast<uint32_t>(i % vertices));
  return r;
}

const Tensor& output(const InferAnswer& answer, const std::string& name) {
  for (const Tensor& t : answer.outputs) {
    if (t.name == name) return t;
  }
  throw std::runtime_error("no output " + name);
}

TEST(InferAnswerTest, OnePromptsMeshAndArraysInTheRequestsOrder) {
  InferRequest request = infer_request({bytes_tensor(kPrompt, {"a"})});
  request.id = "req-7";
  request.outputs = {kVertices, kMesh, kFaces};
  const InferPlan plan = plan_infer(request, demo_model());
  const InferAnswer answer = answer_of(request, demo_model(), plan, {mesh("glTF...", 4, 2, "r0")});
  EXPECT_EQ(answer.model_name, "demo");
  EXPECT_EQ(answer.model_version, "1");
  EXPECT_EQ(answer.id, "req-7");
  ASSERT_EQ(answer.outputs.size(), 3u);
  EXPECT_EQ(answer.outputs[0].name, kVertices);
  EXPECT_EQ(answer.outputs[1].name, kMesh);

  const Tensor& file = output(answer, kMesh);
  EXPECT_EQ(file.datatype, DataType::kBytes);
  EXPECT_EQ(file.shape, std::vector<int64_t>{1});
  EXPECT_EQ(bytes_elements(file.data, 1, "MESH"), std::vector<std::string>{"glTF..."});

  const Tensor& vertices = output(answer, kVertices);
  EXPECT_EQ(vertices.datatype, DataType::kFp32);
  EXPECT_EQ(vertices.shape, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(numeric_element(vertices.data, DataType::kFp32, 11), 11.0);
  const Tensor& faces = output(answer, kFaces);
  EXPECT_EQ(faces.datatype, DataType::kInt32);
  EXPECT_EQ(faces.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(*integer_element(faces.data, DataType::kInt32, 5), 1);

  EXPECT_EQ(std::get<std::string>(answer.parameters.at("request_id")), "r0");
  EXPECT_EQ(std::get<std::string>(answer.parameters.at("cache_status")), "miss");
  EXPECT_EQ(std::get<std::string>(answer.parameters.at("vertex_count")), "4");
  EXPECT_FALSE(answer.parameters.count("warnings"));
}

TEST(InferAnswerTest, ABatchsArraysArePaddedToTheLargestMesh) {
  InferRequest request = infer_request({bytes_tensor(kPrompt, {"a", "b"}, {2, 1})});
  request.outputs = {kMesh, kVertices, kFaces};
  const InferPlan plan = plan_infer(request, demo_model());
  v1::GenerateMeshResponse small = mesh("s", 3, 1, "r1");
  small.add_warnings("prompt truncated");
  small.set_cache_status(v1::CACHE_STATUS_HIT);
  const InferAnswer answer =
      answer_of(request, demo_model(), plan, {mesh("big", 5, 3, "r0"), small});
  EXPECT_EQ(output(answer, kMesh).shape, (std::vector<int64_t>{2, 1}));
  const Tensor& vertices = output(answer, kVertices);
  EXPECT_EQ(vertices.shape, (std::vector<int64_t>{2, 5, 3}));
  // The second mesh's 3 vertices, then 2 rows of NaN.
  EXPECT_EQ(numeric_element(vertices.data, DataType::kFp32, 15 + 8), 8.0);
  EXPECT_TRUE(std::isnan(numeric_element(vertices.data, DataType::kFp32, 15 + 9)));
  EXPECT_TRUE(std::isnan(numeric_element(vertices.data, DataType::kFp32, 29)));
  const Tensor& faces = output(answer, kFaces);
  EXPECT_EQ(faces.shape, (std::vector<int64_t>{2, 3, 3}));
  EXPECT_EQ(*integer_element(faces.data, DataType::kInt32, 9 + 2), 2);
  EXPECT_EQ(*integer_element(faces.data, DataType::kInt32, 9 + 3), -1);
  EXPECT_EQ(std::get<std::string>(answer.parameters.at("request_id")), "r0,r1");
  EXPECT_EQ(std::get<std::string>(answer.parameters.at("cache_status")), "miss,hit");
  EXPECT_EQ(std::get<std::string>(answer.parameters.at("vertex_count")), "5,3");
  EXPECT_EQ(std::get<std::string>(answer.parameters.at("face_count")), "3,1");
  EXPECT_EQ(std::get<std::string>(answer.parameters.at("warnings")), "prompt truncated");
}

TEST(InferAnswerTest, ABatchWithoutABatchDimensionKeepsItsFlatShape) {
  InferRequest request = infer_request({bytes_tensor(kPrompt, {"a", "b"})});
  const InferPlan plan = plan_infer(request, demo_model());
  const InferAnswer answer =
      answer_of(request, demo_model(), plan, {mesh("x", 3, 1, "a"), mesh("y", 3, 1, "b")});
  EXPECT_EQ(output(answer, kMesh).shape, std::vector<int64_t>{2});
  EXPECT_THROW(answer_of(request, demo_model(), plan, {mesh("x", 3, 1, "a")}), Error);
}

}  // namespace
}  // namespace cube3d::inference
