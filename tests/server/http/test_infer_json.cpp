// The Open Inference Protocol's REST inference body (http/infer_json.h): JSON `data` flat or
// nested into the raw layout, the binary tensor data extension both ways, the choice of binary
// outputs, and each fault of the body refused naming the field, input or output.
#include "cube3d/server/http/infer_json.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "expect_error.h"

namespace cube3d::http {
namespace {

using inference::DataType;
using testing::expect_error;

std::string le32(uint32_t v) {
  std::string s;
  inference::append_element(s, v);
  return s;
}

void expect_refused(const std::string& body, std::initializer_list<std::string> needles,
                    std::optional<std::string> header_length = std::nullopt) {
  expect_error([&] { parse_infer_body(body, header_length); }, ErrorCode::kInvalidArgument,
               needles);
}

TEST(InferJsonTest, JsonDataFlatOrNestedBecomesTheRawLayout) {
  const InferBody body = parse_infer_body(R"({
    "id": "r1",
    "parameters": {"seed": 3, "guidance_scale": 2.5, "format": "obj", "progress": true,
                   "big": 18446744073709551615},
    "inputs": [
      {"name": "PROMPT", "datatype": "BYTES", "shape": [2, 1], "data": [["a chair"], ["a lamp"]]},
      {"name": "SEED", "datatype": "INT64", "shape": [2], "data": [1, -2]},
      {"name": "BBOX", "datatype": "FP32", "shape": [1, 3], "data": [1, 2.5, 3]}],
    "outputs": [{"name": "MESH", "parameters": {"binary_data": true}}, {"name": "FACES"}]})",
                                          std::nullopt);
  const inference::InferRequest& r = body.request;
  EXPECT_EQ(r.id, "r1");
  EXPECT_EQ(std::get<int64_t>(r.parameters.at("seed")), 3);
  EXPECT_EQ(std::get<double>(r.parameters.at("guidance_scale")), 2.5);
  EXPECT_EQ(std::get<std::string>(r.parameters.at("format")), "obj");
  EXPECT_TRUE(std::get<bool>(r.parameters.at("progress")));
  EXPECT_EQ(std::get<uint64_t>(r.parameters.at("big")), 18446744073709551615u);
  ASSERT_EQ(r.inputs.size(), 3u);
  EXPECT_EQ(r.inputs[0].shape, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(inference::bytes_elements(r.inputs[0].data, 2, "PROMPT")[1], "a lamp");
  EXPECT_EQ(*inference::integer_element(r.inputs[1].data, DataType::kInt64, 1), -2);
  EXPECT_EQ(inference::numeric_element(r.inputs[2].data, DataType::kFp32, 1), 2.5);
  EXPECT_EQ(r.outputs, (std::vector<std::string>{"MESH", "FACES"}));
  EXPECT_EQ(body.binary_outputs, std::vector<std::string>{"MESH"});
  EXPECT_FALSE(body.binary_by_default);
  EXPECT_EQ(text_outputs(body, {"MESH"}), std::vector<std::string>{"FACES"});
}

TEST(InferJsonTest, BinaryInputsFollowTheHeaderInOrder) {
  const std::string header = R"({"inputs": [
    {"name": "PROMPT", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": 11}},
    {"name": "RESOLUTION_BASE", "datatype": "INT32", "shape": [1], "data": [5]},
    {"name": "TOP_P", "datatype": "FP32", "shape": [1], "parameters": {"binary_data_size": 4}}],
    "parameters": {"binary_data_output": true}})";
  std::string top_p;
  inference::append_element(top_p, 0.5f);
  const std::string body = header + le32(7) + "a table" + top_p;
  const InferBody parsed = parse_infer_body(body, std::to_string(header.size()));
  EXPECT_EQ(inference::bytes_elements(parsed.request.inputs[0].data, 1, "P")[0], "a table");
  EXPECT_EQ(*inference::integer_element(parsed.request.inputs[1].data, DataType::kInt32, 0), 5);
  EXPECT_EQ(inference::numeric_element(parsed.request.inputs[2].data, DataType::kFp32, 0), 0.5);
  EXPECT_TRUE(parsed.binary_by_default);
  EXPECT_TRUE(text_outputs(parsed, {"MESH"}).empty());

  // The sizes must account for every byte after the header, and no more.
  expect_refused(body + "x", {"1 bytes of binary data follow the JSON header"},
                 std::to_string(header.size()));
  expect_refused(body.substr(0, body.size() - 1),
                 {"input TOP_P: binary_data_size 4", "only 3 bytes"},
                 std::to_string(header.size()));
  expect_refused(body, {"Inference-Header-Content-Length: 99999", "the body has"}, "99999");
  expect_refused(body, {"Inference-Header-Content-Length: '-5' is not a byte count"}, "-5");
  expect_refused(body, {"Inference-Header-Content-Length: '12abc'"}, "12abc");
  // A header length that cuts the JSON short: it does not parse.
  expect_refused(body, {"not JSON"}, "10");
  // binary_data_size without binary data.
  expect_refused(header, {"input PROMPT: binary_data_size 11", "no binary data"});
}

TEST(InferJsonTest, EveryFaultOfTheBodyIsNamed) {
  expect_refused("not json", {"the request body is not JSON"});
  expect_refused("[1]", {"the request body: a JSON object, not an array"});
  expect_refused(R"({"inputs": [], "extra": 1})", {"unknown field 'extra'", "id, parameters"});
  expect_refused(R"({})", {"inputs: an array of input tensors is required"});
  expect_refused(R"({"inputs": [{"name": "PROMPT", "datatype": "STRING", "shape": [1],
                    "data": ["a"]}]})",
                 {"input PROMPT: datatype 'STRING' is not one of the protocol's"});
  expect_refused(R"({"inputs": [{"name": "PROMPT", "datatype": "BYTES", "data": ["a"]}]})",
                 {"input PROMPT: field 'shape' must be an array"});
  expect_refused(R"({"inputs": [{"name": "PROMPT", "datatype": "BYTES", "shape": [1]}]})",
                 {"input PROMPT: no data"});
  expect_refused(R"({"inputs": [{"name": "PROMPT", "datatype": "BYTES", "shape": [1],
                    "data": [3]}]})",
                 {"input PROMPT.data[0]: a number where a string is expected"});
  expect_refused(R"({"inputs": [{"name": "SEED", "datatype": "INT64", "shape": [1],
                    "data": [1.5]}]})",
                 {"input SEED.data[0]", "a whole number"});
  expect_refused(R"({"inputs": [{"name": "RESOLUTION_BASE", "datatype": "INT32", "shape": [1],
                    "data": [4294967296]}]})",
                 {"input RESOLUTION_BASE.data[0]: 4294967296 is out of the datatype's range"});
  expect_refused(R"({"inputs": [{"name": "X", "datatype": "UINT8", "shape": [1],
                    "data": [-1]}]})",
                 {"-1 is out of the datatype's range"});
  expect_refused(R"({"inputs": [{"name": "P", "datatype": "BYTES", "shape": [1], "data": ["a"],
                    "parameters": {"binary_data_size": 1}}]})",
                 {"input P: both data and binary_data_size"});
  expect_refused(R"({"inputs": [{"name": "P", "datatype": "BYTES", "shape": [1], "data": ["a"],
                    "parameters": {"shm_region": "x"}}]})",
                 {"unknown parameter 'shm_region'"});
  expect_refused(R"({"inputs": [], "parameters": {"seed": [1]}})",
                 {"parameters.seed: a boolean, a number or a string, not an array"});
  expect_refused(R"({"inputs": [], "outputs": [{"name": "MESH",
                    "parameters": {"classification": 3}}]})",
                 {"classification", "meshes, not classes"});
  expect_refused(R"({"inputs": [], "id": 5})", {"id: a string, not a number"});
  // Nesting past any tensor's is refused while it is read (no deep recursion after).
  expect_refused(std::string(100000, '['), {"nested deeper than 16 levels"});
}

TEST(InferJsonTest, AnswersAreJsonOrAHeaderAndTheirBinaryData) {
  inference::InferAnswer answer;
  answer.model_name = "demo";
  answer.model_version = "1";
  answer.id = "r1";
  answer.parameters["request_id"] = std::string("abc");
  inference::Tensor mesh;
  mesh.name = "MESH";
  mesh.datatype = DataType::kBytes;
  mesh.shape = {1};
  inference::append_bytes_element(mesh.data, std::string("glTF\0\x01", 6));
  inference::Tensor faces;
  faces.name = "FACES";
  faces.datatype = DataType::kInt32;
  faces.shape = {1, 3};
  for (int32_t i : {0, 1, 2}) inference::append_element(faces.data, i);
  answer.outputs = {mesh, faces};

  InferBody asked;
  asked.request.outputs = {"MESH", "FACES"};
  asked.binary_outputs = {"MESH"};
  const EncodedAnswer encoded = encode_infer_answer(answer, asked);
  ASSERT_TRUE(encoded.header_length);
  const auto json = nlohmann::json::parse(encoded.body.substr(0, *encoded.header_length));
  EXPECT_EQ(json["model_name"], "demo");
  EXPECT_EQ(json["id"], "r1");
  EXPECT_EQ(json["parameters"]["request_id"], "abc");
  EXPECT_EQ(json["outputs"][0]["parameters"]["binary_data_size"], 10);
  EXPECT_EQ(json["outputs"][1]["data"], nlohmann::json::array({0, 1, 2}));
  EXPECT_EQ(json["outputs"][1]["shape"], nlohmann::json::array({1, 3}));
  EXPECT_EQ(encoded.body.substr(*encoded.header_length), mesh.data);

  // All as JSON (an OBJ is text): no header length, one JSON document.
  inference::Tensor obj = mesh;
  obj.data.clear();
  inference::append_bytes_element(obj.data, "v 0 0 0\n");
  answer.outputs = {obj};
  InferBody plain;
  const EncodedAnswer text = encode_infer_answer(answer, plain);
  EXPECT_FALSE(text.header_length);
  EXPECT_EQ(nlohmann::json::parse(text.body)["outputs"][0]["data"][0], "v 0 0 0\n");
  EXPECT_EQ(nlohmann::json::parse(infer_error_body("bad \xff input"))["error"],
            "bad \xef\xbf\xbd input");
}

}  // namespace
}  // namespace cube3d::http
