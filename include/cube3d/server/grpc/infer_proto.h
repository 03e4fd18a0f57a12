// The Open Inference Protocol's gRPC messages, both ways: a ModelInferRequest into the plain
// request the model side reads (inference/infer_messages.h), the answer into a
// ModelInferResponse. An input's elements come either in its typed `contents` (the field of its
// datatype: bytes_contents for BYTES, int64_contents for INT64, int_contents for INT8..INT32,
// fp32_contents, ...) or, for all inputs at once, in raw_input_contents, one entry per input;
// outputs always go back raw (raw_output_contents), as Triton answers and its clients read.
//
// Faults are invalid_argument naming the input: an unknown datatype, elements in another
// datatype's field, raw contents that do not pair with the inputs, both kinds at once.
#pragma once

#include "cube3d/server/inference/infer_messages.h"
#include "inference/grpc_service.pb.h"

namespace cube3d {

inference::InferRequest infer_request_of(const ::inference::ModelInferRequest& request);
void fill_infer_response(const inference::InferAnswer& answer,
                         ::inference::ModelInferResponse* response);
void set_parameter(const inference::ParameterValue& value, ::inference::InferParameter* out);

}  // namespace cube3d
