#include "cube3d/server/http/infer_json.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>

#include "cube3d/core/error.h"
#include "cube3d/core/printable.h"

namespace cube3d::http {
namespace {

using inference::DataType;
using inference::Parameters;
using inference::ParameterValue;
using inference::Tensor;
using nlohmann::json;

// Deeper JSON than any request of this protocol needs (the body, an input, its data nested
// as a shape of a few dimensions) is refused while it is read.
constexpr int kMaxDepth = 16;
// A header length field longer than this is no byte count of a body we accept.
constexpr size_t kMaxLengthDigits = 12;

std::string kind_of(const json& value) {
  switch (value.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    default:
      return "a number";
  }
}

ParameterValue parameter_value(const json& value, const std::string& what) {
  if (value.is_boolean()) return value.get<bool>();
  if (value.is_number_unsigned()) {
    const auto u = value.get<uint64_t>();
    if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return static_cast<int64_t>(u);
    }
    return u;
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_number_float()) return value.get<double>();
  if (value.is_string()) return value.get<std::string>();
  throw invalid_argument(what + ": a boolean, a number or a string, not " + kind_of(value));
}

Parameters json_parameters(const json& object, const std::string& what) {
  if (!object.is_object()) {
    throw invalid_argument(what + ": an object of parameters, not " + kind_of(object));
  }
  Parameters parameters;
  for (const auto& [name, value] : object.items()) {
    parameters[name] = parameter_value(value, what + "." + name);
  }
  return parameters;
}

void only_fields(const json& object, std::initializer_list<const char*> known,
                 const std::string& what) {
  for (const auto& item : object.items()) {
    const std::string& name = item.key();
    if (std::find_if(known.begin(), known.end(), [&name](const char* k) { return name == k; }) ==
        known.end()) {
      std::string list;
      for (const char* k : known) list += list.empty() ? k : std::string(", ") + k;
      throw invalid_argument(what + ": unknown field '" + printable(name, 100) +
                             "' (the fields are " + list + ")");
    }
  }
}

const json* field(const json& object, const char* name) {
  const auto it = object.find(name);
  return it == object.end() ? nullptr : &*it;
}

std::string string_field(const json& object, const char* name, const std::string& what) {
  const json* v = field(object, name);
  if (!v) throw invalid_argument(what + ": field '" + name + "' is missing");
  if (!v->is_string()) {
    throw invalid_argument(what + "." + name + ": a string, not " + kind_of(*v));
  }
  return v->get<std::string>();
}

// One element of JSON `data`, appended to raw data of its datatype.
template <typename T>
void append_integer(std::string& raw, const json& v, const std::string& what) {
  if (!v.is_number_integer()) {
    throw invalid_argument(what + ": " + kind_of(v) + " where a whole number is expected");
  }
  const bool in_range =
      v.is_number_unsigned()
          ? v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
          : v.get<int64_t>() >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                (v.get<int64_t>() < 0 || static_cast<uint64_t>(v.get<int64_t>()) <=
                                             static_cast<uint64_t>(std::numeric_limits<T>::max()));
  if (!in_range) throw invalid_argument(what + ": " + v.dump() + " is out of the datatype's range");
  if (v.is_number_unsigned()) {
    inference::append_element(raw, static_cast<T>(v.get<uint64_t>()));
  } else {
    inference::append_element(raw, static_cast<T>(v.get<int64_t>()));
  }
}

void append_data_element(std::string& raw, DataType type, const json& v, const std::string& what) {
  switch (type) {
    case DataType::kBytes:
      if (!v.is_string()) {
        throw invalid_argument(what + ": " + kind_of(v) + " where a string is expected (BYTES)");
      }
      inference::append_bytes_element(raw, v.get_ref<const std::string&>());
      return;
    case DataType::kBool:
      if (!v.is_boolean())
        throw invalid_argument(what + ": " + kind_of(v) + " where true or false is expected");
      inference::append_element(raw, static_cast<uint8_t>(v.get<bool>() ? 1 : 0));
      return;
    case DataType::kFp32:
    case DataType::kFp64: {
      if (!v.is_number())
        throw invalid_argument(what + ": " + kind_of(v) + " where a number is expected");
      const double d = v.get<double>();
      if (type == DataType::kFp32) {
        inference::append_element(raw, static_cast<float>(d));
      } else {
        inference::append_element(raw, d);
      }
      return;
    }
    case DataType::kInt8:
      return append_integer<int8_t>(raw, v, what);
    case DataType::kInt16:
      return append_integer<int16_t>(raw, v, what);
    case DataType::kInt32:
      return append_integer<int32_t>(raw, v, what);
    case DataType::kInt64:
      return append_integer<int64_t>(raw, v, what);
    case DataType::kUint8:
      return append_integer<uint8_t>(raw, v, what);
    case DataType::kUint16:
      return append_integer<uint16_t>(raw, v, what);
    case DataType::kUint32:
      return append_integer<uint32_t>(raw, v, what);
    case DataType::kUint64:
      return append_integer<uint64_t>(raw, v, what);
    default:
      throw invalid_argument(what + ": datatype " + std::string(inference::datatype_name(type)) +
                             " cannot be given as JSON data here (send it as binary data)");
  }
}

// `data` flat or nested (row-major either way), into raw data.
void append_data(std::string& raw, DataType type, const json& data, const std::string& what,
                 int64_t& index) {
  if (!data.is_array()) {
    append_data_element(raw, type, data, what + ".data[" + std::to_string(index) + "]");
    ++index;
    return;
  }
  for (const json& item : data) append_data(raw, type, item, what, index);
}

Tensor input_of(const json& entry, size_t position, bool binary, std::string_view& binary_rest) {
  std::string what = "inputs[" + std::to_string(position) + "]";
  if (!entry.is_object()) throw invalid_argument(what + ": an object, not " + kind_of(entry));
  only_fields(entry, {"name", "shape", "datatype", "parameters", "data"}, what);
  Tensor t;
  t.name = string_field(entry, "name", what);
  what = "input " + printable(t.name, 100);
  const std::string type_name = string_field(entry, "datatype", what);
  const auto type = inference::parse_datatype(type_name);
  if (!type) {
    throw invalid_argument(what + ": datatype '" + printable(type_name, 40) +
                           "' is not one of the protocol's (BOOL, UINT8 ... UINT64, INT8 ... "
                           "INT64, FP16, FP32, FP64, BF16, BYTES)");
  }
  t.datatype = *type;
  const json* shape = field(entry, "shape");
  if (!shape || !shape->is_array()) {
    throw invalid_argument(what + ": field 'shape' must be an array of dimensions");
  }
  for (const json& dim : *shape) {
    if (!dim.is_number_integer()) {
      throw invalid_argument(what + ".shape: " + kind_of(dim) + " where a dimension is expected");
    }
    if (dim.is_number_unsigned() && dim.get<uint64_t>() > uint64_t{1} << 40) {
      throw invalid_argument(what + ".shape: dimension " + dim.dump() + " is too large");
    }
    t.shape.push_back(dim.get<int64_t>());
  }
  std::optional<int64_t> binary_size;
  if (const json* p = field(entry, "parameters")) {
    const Parameters parameters = json_parameters(*p, what + ".parameters");
    for (const auto& [name, value] : parameters) {
      if (name != "binary_data_size") {
        throw invalid_argument(what + ".parameters: unknown parameter '" + printable(name, 100) +
                               "' (an input's one parameter is binary_data_size)");
      }
      const auto* size = std::get_if<int64_t>(&value);
      if (!size || *size < 0) {
        throw invalid_argument(what + ".parameters.binary_data_size: a byte count (0 or more)");
      }
      binary_size = *size;
    }
  }
  const json* data = field(entry, "data");
  if (binary_size && data) {
    throw invalid_argument(what + ": both data and binary_data_size: give its elements one way");
  }
  if (binary_size) {
    if (!binary) {
      throw invalid_argument(what + ": binary_data_size " + std::to_string(*binary_size) +
                             ", and the request has no binary data (no " + kInferenceHeaderLength +
                             " header)");
    }
    if (static_cast<uint64_t>(*binary_size) > binary_rest.size()) {
      throw invalid_argument(what + ": binary_data_size " + std::to_string(*binary_size) +
                             ", and only " + std::to_string(binary_rest.size()) +
                             " bytes of binary data are left after the inputs before it");
    }
    t.data.assign(binary_rest.substr(0, static_cast<size_t>(*binary_size)));
    binary_rest.remove_prefix(static_cast<size_t>(*binary_size));
    return t;
  }
  if (!data) throw invalid_argument(what + ": no data (neither data nor binary_data_size)");
  int64_t index = 0;
  append_data(t.data, t.datatype, *data, what, index);
  return t;
}

size_t header_length_of(const std::string& text, size_t body_size) {
  const bool digits =
      !text.empty() && text.size() <= kMaxLengthDigits &&
      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits) {
    throw invalid_argument(std::string(kInferenceHeaderLength) + ": '" + printable(text, 40) +
                           "' is not a byte count");
  }
  const uint64_t length = std::stoull(text);
  if (length > body_size) {
    throw invalid_argument(std::string(kInferenceHeaderLength) + ": " + text +
                           " bytes of JSON header, and the body has " + std::to_string(body_size));
  }
  return static_cast<size_t>(length);
}

json parse_json(std::string_view text) {
  try {
    return json::parse(text, [](int depth, json::parse_event_t, json&) {
      if (depth > kMaxDepth) {
        throw invalid_argument("the request body is nested deeper than " +
                               std::to_string(kMaxDepth) + " levels");
      }
      return true;
    });
  } catch (const json::exception& e) {
    throw invalid_argument(std::string("the request body is not JSON: ") + e.what());
  }
}

json data_of(const Tensor& t) {
  json data = json::array();
  if (t.datatype == DataType::kBytes) {
    const int64_t count = inference::element_count(t.shape, "output " + t.name);
    for (std::string& s : inference::bytes_elements(t.data, count, "output " + t.name)) {
      data.push_back(std::move(s));
    }
    return data;
  }
  const int64_t count = static_cast<int64_t>(t.data.size() / inference::element_size(t.datatype));
  for (int64_t i = 0; i < count; ++i) {
    if (const auto whole = inference::integer_element(t.data, t.datatype, i)) {
      data.push_back(*whole);
    } else {
      data.push_back(inference::numeric_element(t.data, t.datatype, i));
    }
  }
  return data;
}

}  // namespace

InferBody parse_infer_body(std::string_view body, const std::optional<std::string>& header_length) {
  std::string_view header = body;
  std::string_view binary_rest;
  if (header_length) {
    const size_t length = header_length_of(*header_length, body.size());
    header = body.substr(0, length);
    binary_rest = body.substr(length);
  }
  const json root = parse_json(header);
  if (!root.is_object())
    throw invalid_argument("the request body: a JSON object, not " + kind_of(root));
  only_fields(root, {"id", "parameters", "inputs", "outputs"}, "the request body");
  InferBody out;
  if (const json* id = field(root, "id")) {
    if (!id->is_string()) throw invalid_argument("id: a string, not " + kind_of(*id));
    out.request.id = id->get<std::string>();
  }
  if (const json* p = field(root, "parameters")) {
    out.request.parameters = json_parameters(*p, "parameters");
    const auto it = out.request.parameters.find("binary_data_output");
    if (it != out.request.parameters.end()) {
      const auto* b = std::get_if<bool>(&it->second);
      if (!b) throw invalid_argument("parameters.binary_data_output: true or false");
      out.binary_by_default = *b;
    }
  }
  const json* inputs = field(root, "inputs");
  if (!inputs || !inputs->is_array()) {
    throw invalid_argument("inputs: an array of input tensors is required");
  }
  for (size_t i = 0; i < inputs->size(); ++i) {
    out.request.inputs.push_back(input_of((*inputs)[i], i, header_length.has_value(), binary_rest));
  }
  if (!binary_rest.empty()) {
    throw invalid_argument(std::to_string(binary_rest.size()) +
                           " bytes of binary data follow the JSON header that no input's "
                           "binary_data_size accounts for");
  }
  if (const json* outputs = field(root, "outputs")) {
    if (!outputs->is_array()) throw invalid_argument("outputs: an array, not " + kind_of(*outputs));
    for (size_t i = 0; i < outputs->size(); ++i) {
      const json& entry = (*outputs)[i];
      const std::string what = "outputs[" + std::to_string(i) + "]";
      if (!entry.is_object()) throw invalid_argument(what + ": an object, not " + kind_of(entry));
      only_fields(entry, {"name", "parameters"}, what);
      const std::string name = string_field(entry, "name", what);
      bool binary = out.binary_by_default;
      if (const json* p = field(entry, "parameters")) {
        for (const auto& [key, value] : json_parameters(*p, what + ".parameters")) {
          if (key == "binary_data") {
            const auto* b = std::get_if<bool>(&value);
            if (!b) throw invalid_argument(what + ".parameters.binary_data: true or false");
            binary = *b;
          } else if (key != "classification") {
            throw invalid_argument(what + ".parameters: unknown parameter '" + printable(key, 100) +
                                   "' (an output's is binary_data)");
          } else {
            throw invalid_argument(what +
                                   ".parameters.classification: this model's outputs are "
                                   "meshes, not classes");
          }
        }
      }
      out.request.outputs.push_back(name);
      if (binary) out.binary_outputs.push_back(name);
    }
  }
  return out;
}

std::vector<std::string> text_outputs(const InferBody& body,
                                      const std::vector<std::string>& default_outputs) {
  const std::vector<std::string>& asked =
      body.request.outputs.empty() ? default_outputs : body.request.outputs;
  std::vector<std::string> text;
  for (const std::string& name : asked) {
    const bool binary = body.request.outputs.empty()
                            ? body.binary_by_default
                            : std::find(body.binary_outputs.begin(), body.binary_outputs.end(),
                                        name) != body.binary_outputs.end();
    if (!binary) text.push_back(name);
  }
  return text;
}

EncodedAnswer encode_infer_answer(const inference::InferAnswer& answer, const InferBody& body) {
  json outputs = json::array();
  std::string binary;
  bool any_binary = false;
  for (const Tensor& t : answer.outputs) {
    json out = {
        {"name", t.name}, {"datatype", inference::datatype_name(t.datatype)}, {"shape", t.shape}};
    const bool as_binary = body.request.outputs.empty()
                               ? body.binary_by_default
                               : std::find(body.binary_outputs.begin(), body.binary_outputs.end(),
                                           t.name) != body.binary_outputs.end();
    if (as_binary) {
      any_binary = true;
      out["parameters"] = {{"binary_data_size", t.data.size()}};
      binary += t.data;
    } else {
      out["data"] = data_of(t);
    }
    outputs.push_back(std::move(out));
  }
  json parameters = json::object();
  for (const auto& parameter : answer.parameters) {
    // (Not a structured binding: clang 14, which builds the fuzz targets, cannot capture one.)
    const std::string& name = parameter.first;
    std::visit([&parameters, &name](const auto& v) { parameters[name] = v; }, parameter.second);
  }
  json root = {{"model_name", answer.model_name},
               {"model_version", answer.model_version},
               {"outputs", std::move(outputs)}};
  if (!answer.id.empty()) root["id"] = answer.id;
  if (!parameters.empty()) root["parameters"] = std::move(parameters);
  // JSON text must be UTF-8: a client's id or a warning holding other bytes is replaced.
  EncodedAnswer encoded;
  encoded.body = root.dump(-1, ' ', false, json::error_handler_t::replace);
  if (any_binary) {
    encoded.header_length = encoded.body.size();
    encoded.body += binary;
  }
  return encoded;
}

std::string infer_error_body(std::string_view message) {
  return json{{"error", std::string(message)}}.dump(-1, ' ', false,
                                                    json::error_handler_t::replace) +
         "\n";
}

}  // namespace cube3d::http
