// The Open Inference Protocol's gRPC messages (grpc/infer_proto.h): typed contents and raw
// contents into the raw layout, every mismatch named, and answers always raw.
#include "cube3d/server/grpc/infer_proto.h"

#include <gtest/gtest.h>

#include <string>

#include "expect_error.h"

namespace cube3d {
namespace {

using inference::DataType;
using testing::expect_error;

::inference::ModelInferRequest typed_request() {
  ::inference::ModelInferRequest r;
  r.set_model_name("demo");
  r.set_model_version("1");
  r.set_id("x1");
  (*r.mutable_parameters())["seed"].set_int64_param(4);
  (*r.mutable_parameters())["guidance_scale"].set_double_param(1.5);
  (*r.mutable_parameters())["big"].set_uint64_param(7);
  auto* prompt = r.add_inputs();
  prompt->set_name("PROMPT");
  prompt->set_datatype("BYTES");
  prompt->add_shape(2);
  prompt->mutable_contents()->add_bytes_contents("a chair");
  prompt->mutable_contents()->add_bytes_contents("a lamp");
  auto* res = r.add_inputs();
  res->set_name("RESOLUTION_BASE");
  res->set_datatype("INT32");
  res->add_shape(1);
  res->mutable_contents()->add_int_contents(5);
  r.add_outputs()->set_name("MESH");
  return r;
}

TEST(InferProtoTest, TypedContentsBecomeTheRawLayout) {
  const inference::InferRequest r = infer_request_of(typed_request());
  EXPECT_EQ(r.model_name, "demo");
  EXPECT_EQ(r.model_version, "1");
  EXPECT_EQ(r.id, "x1");
  EXPECT_EQ(std::get<int64_t>(r.parameters.at("seed")), 4);
  EXPECT_EQ(std::get<double>(r.parameters.at("guidance_scale")), 1.5);
  EXPECT_EQ(std::get<uint64_t>(r.parameters.at("big")), 7u);
  ASSERT_EQ(r.inputs.size(), 2u);
  EXPECT_EQ(inference::bytes_elements(r.inputs[0].data, 2, "P")[1], "a lamp");
  EXPECT_EQ(*inference::integer_element(r.inputs[1].data, DataType::kInt32, 0), 5);
  EXPECT_EQ(r.outputs, std::vector<std::string>{"MESH"});
}

TEST(InferProtoTest, RawContentsPairWithTheInputsInOrder) {
  ::inference::ModelInferRequest message = typed_request();
  for (auto& in : *message.mutable_inputs()) in.clear_contents();
  std::string prompts;
  inference::append_bytes_element(prompts, "a");
  inference::append_bytes_element(prompts, "b");
  std::string res;
  inference::append_element(res, int32_t{6});
  message.add_raw_input_contents(prompts);
  message.add_raw_input_contents(res);
  const inference::InferRequest r = infer_request_of(message);
  EXPECT_EQ(r.inputs[0].data, prompts);
  EXPECT_EQ(*inference::integer_element(r.inputs[1].data, DataType::kInt32, 0), 6);

  message.mutable_raw_input_contents()->RemoveLast();
  expect_error([&] { infer_request_of(message); }, ErrorCode::kInvalidArgument,
               {"raw_input_contents has 1 entries and the request 2 inputs"});
  message.add_raw_input_contents(res);
  message.mutable_inputs(0)->mutable_contents()->add_bytes_contents("c");
  expect_error([&] { infer_request_of(message); }, ErrorCode::kInvalidArgument,
               {"input PROMPT: elements in both contents and raw_input_contents"});
}

TEST(InferProtoTest, EveryMismatchIsNamed) {
  ::inference::ModelInferRequest message = typed_request();
  message.mutable_inputs(1)->set_datatype("INT64");  // its elements are in int_contents
  expect_error(
      [&] { infer_request_of(message); }, ErrorCode::kInvalidArgument,
      {"input RESOLUTION_BASE", "takes its elements in int64_contents", "came in int_contents"});
  message = typed_request();
  message.mutable_inputs(1)->set_datatype("INT8");
  message.mutable_inputs(1)->mutable_contents()->set_int_contents(0, 300);
  expect_error([&] { infer_request_of(message); }, ErrorCode::kInvalidArgument,
               {"300 is out of the datatype's range"});
  message = typed_request();
  message.mutable_inputs(0)->set_datatype("TEXT");
  expect_error([&] { infer_request_of(message); }, ErrorCode::kInvalidArgument,
               {"input PROMPT: datatype 'TEXT' is not one of the protocol's"});
  message = typed_request();
  message.mutable_inputs(0)->set_datatype("FP16");
  expect_error([&] { infer_request_of(message); }, ErrorCode::kInvalidArgument,
               {"FP16 has no contents field: send it in raw_input_contents"});
  message = typed_request();
  (*message.mutable_inputs(0)->mutable_parameters())["x"].set_bool_param(true);
  expect_error([&] { infer_request_of(message); }, ErrorCode::kInvalidArgument,
               {"input PROMPT: unknown parameter 'x'"});
  message = typed_request();
  (*message.mutable_parameters())["empty"];  // a parameter with no value
  expect_error([&] { infer_request_of(message); }, ErrorCode::kInvalidArgument,
               {"parameter empty: no value"});
}

TEST(InferProtoTest, AnswersGoBackRaw) {
  inference::InferAnswer answer;
  answer.model_name = "demo";
  answer.model_version = "1";
  answer.id = "x1";
  answer.parameters["cache_status"] = std::string("hit");
  inference::Tensor t;
  t.name = "VERTICES";
  t.datatype = DataType::kFp32;
  t.shape = {1, 3};
  for (float v : {1.f, 2.f, 3.f}) inference::append_element(t.data, v);
  answer.outputs = {t};
  ::inference::ModelInferResponse response;
  fill_infer_response(answer, &response);
  EXPECT_EQ(response.id(), "x1");
  EXPECT_EQ(response.parameters().at("cache_status").string_param(), "hit");
  ASSERT_EQ(response.outputs_size(), 1);
  EXPECT_EQ(response.outputs(0).datatype(), "FP32");
  EXPECT_EQ(response.outputs(0).shape_size(), 2);
  ASSERT_EQ(response.raw_output_contents_size(), 1);
  EXPECT_EQ(response.raw_output_contents(0), t.data);
}

}  // namespace
}  // namespace cube3d
