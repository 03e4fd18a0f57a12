#include "cube3d/server/grpc/infer_proto.h"

#include <limits>
#include <string>
#include <type_traits>
#include <variant>

#include "cube3d/core/error.h"
#include "cube3d/core/printable.h"

namespace cube3d {
namespace {

using inference::DataType;
using ::inference::InferParameter;
using ::inference::InferTensorContents;
using inference::Parameters;
using inference::ParameterValue;

ParameterValue value_of(const InferParameter& p, const std::string& what) {
  switch (p.parameter_choice_case()) {
    case InferParameter::kBoolParam:
      return p.bool_param();
    case InferParameter::kInt64Param:
      return p.int64_param();
    case InferParameter::kStringParam:
      return p.string_param();
    case InferParameter::kDoubleParam:
      return p.double_param();
    case InferParameter::kUint64Param:
      return p.uint64_param();
    default:
      throw invalid_argument(what + ": no value");
  }
}

template <typename Map>
Parameters proto_parameters(const Map& map, const std::string& what) {
  Parameters out;
  for (const auto& [name, value] : map) out[name] = value_of(value, what + " " + name);
  return out;
}

// Which contents field holds a datatype's elements, and how many elements each field holds.
const char* field_of(DataType type) {
  switch (type) {
    case DataType::kBool:
      return "bool_contents";
    case DataType::kInt8:
    case DataType::kInt16:
    case DataType::kInt32:
      return "int_contents";
    case DataType::kInt64:
      return "int64_contents";
    case DataType::kUint8:
    case DataType::kUint16:
    case DataType::kUint32:
      return "uint_contents";
    case DataType::kUint64:
      return "uint64_contents";
    case DataType::kFp32:
      return "fp32_contents";
    case DataType::kFp64:
      return "fp64_contents";
    case DataType::kBytes:
      return "bytes_contents";
    default:
      return nullptr;  // FP16, BF16: raw only
  }
}

std::string filled_fields(const InferTensorContents& c) {
  std::string names;
  const auto note = [&](int size, const char* name) {
    if (size > 0) names += (names.empty() ? "" : ", ") + std::string(name);
  };
  note(c.bool_contents_size(), "bool_contents");
  note(c.int_contents_size(), "int_contents");
  note(c.int64_contents_size(), "int64_contents");
  note(c.uint_contents_size(), "uint_contents");
  note(c.uint64_contents_size(), "uint64_contents");
  note(c.fp32_contents_size(), "fp32_contents");
  note(c.fp64_contents_size(), "fp64_contents");
  note(c.bytes_contents_size(), "bytes_contents");
  return names;
}

// A narrow integer type's element from int_contents / uint_contents, in range.
template <typename T, typename Wide>
void append_narrow(std::string& raw, Wide v, const std::string& what) {
  if (v < static_cast<Wide>(std::numeric_limits<T>::min()) ||
      v > static_cast<Wide>(std::numeric_limits<T>::max())) {
    throw invalid_argument(what + ": " + std::to_string(v) + " is out of the datatype's range");
  }
  inference::append_element(raw, static_cast<T>(v));
}

std::string raw_of_contents(const InferTensorContents& c, DataType type, const std::string& what) {
  const char* field = field_of(type);
  if (!field) {
    throw invalid_argument(what + ": datatype " + std::string(inference::datatype_name(type)) +
                           " has no contents field: send it in raw_input_contents");
  }
  const std::string filled = filled_fields(c);
  if (!filled.empty() && filled != field) {
    throw invalid_argument(what + ": datatype " + std::string(inference::datatype_name(type)) +
                           " takes its elements in " + field + ", and they came in " + filled);
  }
  std::string raw;
  switch (type) {
    case DataType::kBool:
      for (const bool b : c.bool_contents())
        inference::append_element(raw, static_cast<uint8_t>(b));
      break;
    case DataType::kInt8:
      for (const int32_t v : c.int_contents()) append_narrow<int8_t>(raw, v, what);
      break;
    case DataType::kInt16:
      for (const int32_t v : c.int_contents()) append_narrow<int16_t>(raw, v, what);
      break;
    case DataType::kInt32:
      for (const int32_t v : c.int_contents()) inference::append_element(raw, v);
      break;
    case DataType::kInt64:
      for (const int64_t v : c.int64_contents()) inference::append_element(raw, v);
      break;
    case DataType::kUint8:
      for (const uint32_t v : c.uint_contents()) append_narrow<uint8_t>(raw, v, what);
      break;
    case DataType::kUint16:
      for (const uint32_t v : c.uint_contents()) append_narrow<uint16_t>(raw, v, what);
      break;
    case DataType::kUint32:
      for (const uint32_t v : c.uint_contents()) inference::append_element(raw, v);
      break;
    case DataType::kUint64:
      for (const uint64_t v : c.uint64_contents()) inference::append_element(raw, v);
      break;
    case DataType::kFp32:
      for (const float v : c.fp32_contents()) inference::append_element(raw, v);
      break;
    case DataType::kFp64:
      for (const double v : c.fp64_contents()) inference::append_element(raw, v);
      break;
    case DataType::kBytes:
      for (const std::string& v : c.bytes_contents()) inference::append_bytes_element(raw, v);
      break;
    default:
      break;
  }
  return raw;
}

}  // namespace

inference::InferRequest infer_request_of(const ::inference::ModelInferRequest& request) {
  inference::InferRequest out;
  out.model_name = request.model_name();
  out.model_version = request.model_version();
  out.id = request.id();
  out.parameters = proto_parameters(request.parameters(), "parameter");
  const bool raw = request.raw_input_contents_size() > 0;
  if (raw && request.raw_input_contents_size() != request.inputs_size()) {
    throw invalid_argument("raw_input_contents has " +
                           std::to_string(request.raw_input_contents_size()) +
                           " entries and the request " + std::to_string(request.inputs_size()) +
                           " inputs: one entry per input, in order");
  }
  for (int i = 0; i < request.inputs_size(); ++i) {
    const auto& in = request.inputs(i);
    const std::string what = "input " + printable(in.name(), 100);
    inference::Tensor t;
    t.name = in.name();
    const auto type = inference::parse_datatype(in.datatype());
    if (!type) {
      throw invalid_argument(what + ": datatype '" + printable(in.datatype(), 40) +
                             "' is not one of the protocol's (BOOL, UINT8 ... UINT64, INT8 ... "
                             "INT64, FP16, FP32, FP64, BF16, BYTES)");
    }
    t.datatype = *type;
    t.shape.assign(in.shape().begin(), in.shape().end());
    for (const auto& [name, value] : in.parameters()) {
      (void)value;
      throw invalid_argument(what + ": unknown parameter '" + printable(name, 100) +
                             "' (this model's inputs take none)");
    }
    if (raw) {
      if (in.has_contents() && !filled_fields(in.contents()).empty()) {
        throw invalid_argument(what +
                               ": elements in both contents and raw_input_contents: send "
                               "them one way");
      }
      t.data = request.raw_input_contents(i);
    } else {
      t.data = raw_of_contents(in.contents(), t.datatype, what);
    }
    out.inputs.push_back(std::move(t));
  }
  for (const auto& o : request.outputs()) {
    for (const auto& [name, value] : o.parameters()) {
      (void)value;
      // binary_data is HTTP's; over gRPC every output is raw already.
      if (name == "binary_data") continue;
      throw invalid_argument("output " + printable(o.name(), 100) + ": unknown parameter '" +
                             printable(name, 100) + "'");
    }
    out.outputs.push_back(o.name());
  }
  return out;
}

void set_parameter(const inference::ParameterValue& value, ::inference::InferParameter* out) {
  std::visit(
      [out](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) {
          out->set_bool_param(v);
        } else if constexpr (std::is_same_v<T, int64_t>) {
          out->set_int64_param(v);
        } else if constexpr (std::is_same_v<T, uint64_t>) {
          out->set_uint64_param(v);
        } else if constexpr (std::is_same_v<T, double>) {
          out->set_double_param(v);
        } else {
          out->set_string_param(v);
        }
      },
      value);
}

void fill_infer_response(const inference::InferAnswer& answer,
                         ::inference::ModelInferResponse* response) {
  response->set_model_name(answer.model_name);
  response->set_model_version(answer.model_version);
  response->set_id(answer.id);
  for (const auto& [name, value] : answer.parameters) {
    set_parameter(value, &(*response->mutable_parameters())[name]);
  }
  for (const inference::Tensor& t : answer.outputs) {
    auto* out = response->add_outputs();
    out->set_name(t.name);
    out->set_datatype(std::string(inference::datatype_name(t.datatype)));
    for (const int64_t d : t.shape) out->add_shape(d);
    response->add_raw_output_contents(t.data);
  }
}

}  // namespace cube3d
