// The Open Inference Protocol's REST inference body, both ways: JSON, or a JSON header followed
// by binary tensor data (the binary tensor data extension: the header's length in the
// Inference-Header-Content-Length field, each binary input's byte count in its
// `binary_data_size` parameter, in the order of `inputs`).
//
// A request:  {"id": "...", "parameters": {...}, "inputs": [{"name", "datatype", "shape",
//              "parameters"?, "data"?}], "outputs"?: [{"name", "parameters"?: {"binary_data"}}]}
// `data` is the elements in row-major order, flat or nested as the shape; BYTES elements are
// strings (UTF-8), BOOL true / false, the rest numbers (whole ones for the integer types, within
// the type's range). An output is answered as binary data when it asks (its binary_data) or, by
// default, when the request's parameter binary_data_output is true.
//
// Every fault is invalid_argument naming the field, input or output: JSON that does not parse,
// an unknown field, a wrong kind of value, data that does not fit its datatype, a header length
// past the body, binary sizes that do not add up to the bytes after the header.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cube3d/server/inference/infer_messages.h"

namespace cube3d::http {

inline constexpr const char* kInferenceHeaderLength = "Inference-Header-Content-Length";

struct InferBody {
  inference::InferRequest request;
  // The outputs to answer as binary data (the rest as JSON `data`), and whether outputs the
  // request does not list (its default outputs) are.
  std::vector<std::string> binary_outputs;
  bool binary_by_default = false;
};

// `header_length`: the Inference-Header-Content-Length field as sent (nullopt: the whole body
// is JSON).
InferBody parse_infer_body(std::string_view body, const std::optional<std::string>& header_length);

// The outputs that will be answered as JSON text (for the plan's rules).
std::vector<std::string> text_outputs(const InferBody& body,
                                      const std::vector<std::string>& default_outputs);

struct EncodedAnswer {
  std::string body;
  std::optional<size_t> header_length;  // set when binary data follows the JSON
};
EncodedAnswer encode_infer_answer(const inference::InferAnswer& answer, const InferBody& body);

// The protocol's error body: {"error": "<message>"}.
std::string infer_error_body(std::string_view message);

}  // namespace cube3d::http
