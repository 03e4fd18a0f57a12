#include "cube3d/server/inference/infer_plan.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <set>
#include <sstream>
#include <utility>

#include "cube3d/core/error.h"
#include "cube3d/core/printable.h"
#include "cube3d/server/wire/proto_enums.h"

namespace cube3d::inference {
namespace {

// The request parameters this model reads, besides the door's own.
constexpr std::array<const char*, 12> kParameters = {
    "seed", "guidance_scale", "top_p", "resolution_base", "bbox", "format", "target_face_count",
    "mesh_profile", "priority", "timeout", "progress",
    // Asked of a decoupled model's stream by tritonclient; every stream response here is
    // already a full one (the last carries triton_final_response), so there is nothing to add.
    "triton_enable_empty_final_response"};
// Triton's sequence batching: a stateful model's. This one has no state between requests.
constexpr std::array<const char*, 3> kSequenceParameters = {"sequence_id", "sequence_start",
                                                            "sequence_end"};

std::string input_what(const std::string& name) { return "input " + name; }

std::string lower(std::string text) {
  for (char& c : text) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return text;
}

// One input as it came, checked against its spec: the datatype, the shape's elements against
// the data.
struct CheckedInput {
  const Tensor* tensor = nullptr;
  int64_t count = 0;
  std::vector<std::string> strings;  // BYTES
};

CheckedInput check_input(const Tensor& tensor, const TensorSpec& spec) {
  const std::string what = input_what(tensor.name);
  if (tensor.datatype != spec.datatype) {
    throw invalid_argument(what + ": datatype " + std::string(datatype_name(tensor.datatype)) +
                           ", and the model takes " + std::string(datatype_name(spec.datatype)));
  }
  CheckedInput checked;
  checked.tensor = &tensor;
  checked.count = element_count(tensor.shape, what);
  if (spec.datatype == DataType::kBytes) {
    checked.strings = bytes_elements(tensor.data, checked.count, what);
    return checked;
  }
  const auto expected = static_cast<uint64_t>(checked.count) * element_size(spec.datatype);
  if (tensor.data.size() != expected) {
    throw invalid_argument(
        what + ": shape " + shape_text(tensor.shape) + " holds " + std::to_string(checked.count) +
        " " + std::string(datatype_name(spec.datatype)) + " elements (" + std::to_string(expected) +
        " bytes), and its data has " + std::to_string(tensor.data.size()) + " bytes");
  }
  return checked;
}

// How many prompts PROMPT holds, and whether it came with a batch dimension.
std::pair<int64_t, bool> batch_of(const Tensor& prompt, int64_t max_batch_size) {
  const auto& s = prompt.shape;
  const bool one_per_row = s.size() == 2 && s[1] == 1;
  if ((s.size() != 1 && !one_per_row) || s[0] < 1 || s[0] > max_batch_size) {
    throw invalid_argument("input PROMPT: shape " + shape_text(s) +
                           "; a PROMPT is [B] or [B, 1]: B prompts, B from 1 to the model's "
                           "max_batch_size " +
                           std::to_string(max_batch_size));
  }
  return {s[0], s.size() == 2};
}

// For an input with one value a prompt: which of its elements prompt i takes (all take the
// one when it holds one). `per_value` is how many elements one value has (BBOX: 3).
int64_t value_index(const CheckedInput& input, int64_t per_value, int64_t i) {
  return input.count == per_value ? 0 : i * per_value;
}

void check_value_count(const CheckedInput& input, int64_t per_value, int64_t batch) {
  const Tensor& t = *input.tensor;
  const auto& s = t.shape;
  // One value for all ([per_value] or [1, per_value]) or one a prompt ([B * per_value] when a
  // value is a scalar, [B, per_value]).
  const bool rank_ok =
      per_value == 1 ? (s.size() == 1 || (s.size() == 2 && s[1] == 1))
                     : (s.size() == 1 ? s[0] == per_value : s.size() == 2 && s[1] == per_value);
  if (!rank_ok || (input.count != per_value && input.count != batch * per_value)) {
    const std::string one = per_value == 1 ? "[1]" : "[" + std::to_string(per_value) + "]";
    throw invalid_argument(
        input_what(t.name) + ": shape " + shape_text(s) + "; it takes " + one +
        " (one value for every prompt) or " +
        (per_value == 1 ? "[B] or [B, 1]" : "[B, " + std::to_string(per_value) + "]") +
        " (one a prompt), and PROMPT holds " + std::to_string(batch));
  }
}

// A parameter's value as a number (a whole one for `whole`), or invalid_argument naming it.
double parameter_number(const std::string& name, const ParameterValue& value, bool whole) {
  if (const auto* i = std::get_if<int64_t>(&value)) return static_cast<double>(*i);
  if (const auto* u = std::get_if<uint64_t>(&value)) return static_cast<double>(*u);
  if (const auto* d = std::get_if<double>(&value); d && !whole) return *d;
  throw invalid_argument("parameter " + name + ": " + (whole ? "a whole number" : "a number") +
                         " is expected");
}

int64_t parameter_integer(const std::string& name, const ParameterValue& value, int64_t min,
                          int64_t max) {
  const auto outside = [&](const std::string& got) {
    return invalid_argument("parameter " + name + ": " + got + " is outside [" +
                            std::to_string(min) + ", " + std::to_string(max) + "]");
  };
  int64_t v = 0;
  if (const auto* i = std::get_if<int64_t>(&value)) {
    v = *i;
  } else if (const auto* u = std::get_if<uint64_t>(&value)) {
    if (*u > static_cast<uint64_t>(max)) throw outside(std::to_string(*u));
    v = static_cast<int64_t>(*u);
  } else {
    throw invalid_argument("parameter " + name + ": a whole number is expected");
  }
  if (v < min || v > max) throw outside(std::to_string(v));
  return v;
}

std::string parameter_string(const std::string& name, const ParameterValue& value) {
  if (const auto* s = std::get_if<std::string>(&value)) return *s;
  throw invalid_argument("parameter " + name + ": a string is expected");
}

bool parameter_bool(const std::string& name, const ParameterValue& value) {
  if (const auto* b = std::get_if<bool>(&value)) return *b;
  throw invalid_argument("parameter " + name + ": true or false is expected");
}

v1::MeshFormat file_format(const std::string& text, const std::string& what) {
  const std::string f = lower(text);
  if (f == "glb") return v1::MESH_FORMAT_GLB;
  if (f == "obj") return v1::MESH_FORMAT_OBJ;
  if (f == "ply") return v1::MESH_FORMAT_PLY;
  if (f == "compact") return v1::MESH_FORMAT_COMPACT;
  if (f == "raw") {
    throw invalid_argument(what +
                           ": raw is no file format: ask for the VERTICES and FACES "
                           "outputs instead (or as well as MESH)");
  }
  throw invalid_argument(what + ": '" + printable(text, 40) +
                         "' is not one of glb, obj, ply, compact");
}

std::array<float, 3> bbox_of_text(const std::string& text) {
  std::array<float, 3> box{};
  std::string rest = text;
  for (char& c : rest) {
    if (c == ',') c = ' ';
  }
  std::istringstream in(rest);
  for (float& side : box) {
    if (!(in >> side)) {
      throw invalid_argument("parameter bbox: '" + printable(text, 60) +
                             "' is not three numbers \"x,y,z\"");
    }
  }
  std::string extra;
  if (in >> extra) {
    throw invalid_argument("parameter bbox: '" + printable(text, 60) +
                           "' has more than three numbers \"x,y,z\"");
  }
  return box;
}

// A value given twice (an input and the parameter of the same name) is ambiguous.
void refuse_both(const Parameters& parameters, const char* parameter, const std::string& input,
                 bool have_input) {
  if (have_input && parameters.count(parameter)) {
    throw invalid_argument("input " + input + " and parameter " + parameter +
                           " both set it: give one");
  }
}

}  // namespace

InferPlan plan_infer(const InferRequest& request, const ModelDescription& model,
                     const DoorRules& door) {
  const std::vector<std::string>& door_parameters = door.parameters;
  // Parameters: ours, the door's, Triton's stateful ones refused by name, anything else
  // refused as unknown (a misspelt "sead" would otherwise pass for the default).
  for (const auto& [name, value] : request.parameters) {
    if (std::find(door_parameters.begin(), door_parameters.end(), name) != door_parameters.end()) {
      continue;
    }
    if (std::find(kParameters.begin(), kParameters.end(), name) != kParameters.end()) continue;
    if (std::find(kSequenceParameters.begin(), kSequenceParameters.end(), name) !=
        kSequenceParameters.end()) {
      const bool off = (std::holds_alternative<bool>(value) && !std::get<bool>(value)) ||
                       (std::holds_alternative<int64_t>(value) && std::get<int64_t>(value) == 0) ||
                       (std::holds_alternative<uint64_t>(value) && std::get<uint64_t>(value) == 0);
      if (off) continue;
      throw invalid_argument("parameter " + name + ": model '" + model.name +
                             "' has no sequences (each request stands alone)");
    }
    std::string known;
    for (const char* k : kParameters) {
      if (std::string_view(k).starts_with("triton_")) continue;
      known += known.empty() ? k : std::string(", ") + k;
    }
    throw invalid_argument("unknown parameter '" + printable(name, 100) + "': model '" +
                           model.name + "' takes " + known);
  }

  // Inputs: each known, once, of the model's datatype, its data matching its shape.
  std::map<std::string, CheckedInput> inputs;
  for (const Tensor& tensor : request.inputs) {
    const TensorSpec* spec = find_input(model, tensor.name);
    if (!spec) {
      if (tensor.name == kBoundingBox) {
        throw invalid_argument("input BBOX: model '" + model.name +
                               "' has no bounding-box input (a v0.5 model has one)");
      }
      throw invalid_argument("unknown input '" + printable(tensor.name, 100) + "': model '" +
                             model.name + "' takes " + tensor_names(model.inputs));
    }
    if (inputs.count(tensor.name)) {
      throw invalid_argument(input_what(tensor.name) + " is given twice");
    }
    inputs.emplace(tensor.name, check_input(tensor, *spec));
  }
  const auto prompt_it = inputs.find(kPrompt);
  if (prompt_it == inputs.end()) {
    throw invalid_argument(
        "input PROMPT is missing: the text to make a mesh of (BYTES, shape "
        "[1]); the model's inputs are " +
        tensor_names(model.inputs));
  }
  const CheckedInput& prompt = prompt_it->second;
  const auto [batch, batch_dimension] = batch_of(*prompt.tensor, model.max_batch_size);
  for (const auto& [name, input] : inputs) {
    if (name == kPrompt) continue;
    check_value_count(input, name == kBoundingBox ? 3 : 1, batch);
  }
  const auto input = [&](const char* name) -> const CheckedInput* {
    const auto it = inputs.find(name);
    return it == inputs.end() ? nullptr : &it->second;
  };
  const Parameters& params = request.parameters;
  const auto param = [&](const char* name) -> const ParameterValue* {
    const auto it = params.find(name);
    return it == params.end() ? nullptr : &it->second;
  };
  refuse_both(params, "seed", kSeed, input(kSeed));
  refuse_both(params, "guidance_scale", kGuidanceScale, input(kGuidanceScale));
  refuse_both(params, "top_p", kTopP, input(kTopP));
  refuse_both(params, "resolution_base", kResolutionBase, input(kResolutionBase));
  refuse_both(params, "bbox", kBoundingBox, input(kBoundingBox));
  refuse_both(params, "format", kFormat, input(kFormat));
  if (param("bbox") && !find_input(model, kBoundingBox)) {
    throw invalid_argument("parameter bbox: model '" + model.name +
                           "' has no bounding-box input (a v0.5 model has one)");
  }

  // Outputs: known, once each; VERTICES and FACES belong to one mesh.
  InferPlan plan;
  plan.batch_dimension = batch_dimension;
  for (const std::string& name : request.outputs) {
    if (!find_output(model, name)) {
      throw invalid_argument("unknown output '" + printable(name, 100) + "': model '" + model.name +
                             "' answers with " + tensor_names(model.outputs));
    }
    if (std::find(plan.outputs.begin(), plan.outputs.end(), name) != plan.outputs.end()) {
      throw invalid_argument("output " + name + " is asked for twice");
    }
    plan.outputs.push_back(name);
  }
  if (plan.outputs.empty()) plan.outputs.push_back(kMesh);
  const auto wants = [&](const char* name) {
    return std::find(plan.outputs.begin(), plan.outputs.end(), name) != plan.outputs.end();
  };
  const bool arrays = wants(kVertices) || wants(kFaces);

  // The call's parameters.
  if (const auto* v = param("timeout")) {
    plan.timeout = std::chrono::microseconds(
        parameter_integer("timeout", *v, 1, int64_t{365} * 24 * 3600 * 1'000'000));
  }
  if (const auto* v = param("progress")) plan.progress = parameter_bool("progress", *v);
  v1::Priority priority = v1::PRIORITY_UNSPECIFIED;
  if (const auto* v = param("priority")) {
    // Triton's levels: 1 is the highest; 0 the model's default.
    const int64_t level = parameter_integer("priority", *v, 0, 2);
    priority = level == 2 ? v1::PRIORITY_BATCH
                          : (level == 1 ? v1::PRIORITY_INTERACTIVE : v1::PRIORITY_UNSPECIFIED);
  }

  // The format of MESH: FORMAT, else the server's default unless that is no file (raw): GLB.
  std::optional<v1::MeshFormat> format;
  if (const auto* v = param("format"))
    format = file_format(parameter_string("format", *v), "parameter format");

  for (int64_t i = 0; i < batch; ++i) {
    v1::GenerateMeshRequest r;
    r.set_prompt(prompt.strings[static_cast<size_t>(i)]);
    if (const CheckedInput* in = input(kSeed)) {
      const int64_t seed =
          *integer_element(in->tensor->data, DataType::kInt64, value_index(*in, 1, i));
      if (seed < 0) {
        throw invalid_argument("input SEED: " + std::to_string(seed) +
                               " is negative; a seed is 0 or more");
      }
      r.set_seed(static_cast<uint64_t>(seed));
    } else if (const auto* v = param("seed")) {
      if (const auto* u = std::get_if<uint64_t>(v)) {
        r.set_seed(*u);
      } else {
        r.set_seed(static_cast<uint64_t>(parameter_integer("seed", *v, 0, INT64_MAX)));
      }
    }
    if (const CheckedInput* in = input(kGuidanceScale)) {
      r.set_guidance_scale(static_cast<float>(
          numeric_element(in->tensor->data, DataType::kFp32, value_index(*in, 1, i))));
    } else if (const auto* v = param("guidance_scale")) {
      r.set_guidance_scale(static_cast<float>(parameter_number("guidance_scale", *v, false)));
    }
    if (const CheckedInput* in = input(kTopP)) {
      r.set_top_p(static_cast<float>(
          numeric_element(in->tensor->data, DataType::kFp32, value_index(*in, 1, i))));
    } else if (const auto* v = param("top_p")) {
      r.set_top_p(static_cast<float>(parameter_number("top_p", *v, false)));
    }
    if (const CheckedInput* in = input(kResolutionBase)) {
      r.set_resolution_base(static_cast<int32_t>(
          *integer_element(in->tensor->data, DataType::kInt32, value_index(*in, 1, i))));
    } else if (const auto* v = param("resolution_base")) {
      r.set_resolution_base(
          static_cast<int32_t>(parameter_integer("resolution_base", *v, INT32_MIN, INT32_MAX)));
    }
    if (const CheckedInput* in = input(kBoundingBox)) {
      const int64_t at = value_index(*in, 3, i);
      auto* box = r.mutable_bounding_box();
      box->set_x(static_cast<float>(numeric_element(in->tensor->data, DataType::kFp32, at)));
      box->set_y(static_cast<float>(numeric_element(in->tensor->data, DataType::kFp32, at + 1)));
      box->set_z(static_cast<float>(numeric_element(in->tensor->data, DataType::kFp32, at + 2)));
    } else if (const auto* v = param("bbox")) {
      const std::array<float, 3> box = bbox_of_text(parameter_string("bbox", *v));
      r.mutable_bounding_box()->set_x(box[0]);
      r.mutable_bounding_box()->set_y(box[1]);
      r.mutable_bounding_box()->set_z(box[2]);
    }
    std::optional<v1::MeshFormat> mesh_format = format;
    if (const CheckedInput* in = input(kFormat)) {
      mesh_format =
          file_format(in->strings[static_cast<size_t>(value_index(*in, 1, i))], "input FORMAT");
    }
    if (wants(kMesh)) {
      r.set_format(mesh_format.value_or(to_proto(model.default_format)));
      if (arrays) r.set_return_raw_mesh(true);
    } else {
      r.set_format(v1::MESH_FORMAT_RAW);  // the arrays only: no file is made
    }
    if (const auto* v = param("target_face_count")) {
      r.set_target_face_count(
          static_cast<uint32_t>(parameter_integer("target_face_count", *v, 0, UINT32_MAX)));
    }
    if (const auto* v = param("mesh_profile")) {
      const std::string profile = lower(parameter_string("mesh_profile", *v));
      if (profile == "none") {
        r.set_mesh_profile(v1::MESH_PROFILE_NONE);
      } else if (profile == "roblox") {
        r.set_mesh_profile(v1::MESH_PROFILE_ROBLOX);
      } else {
        throw invalid_argument("parameter mesh_profile: '" + printable(profile, 40) +
                               "' is not one of none, roblox");
      }
    }
    r.set_priority(priority);
    if (wants(kMesh) && r.format() != v1::MESH_FORMAT_OBJ &&
        std::find(door.text_outputs.begin(), door.text_outputs.end(), kMesh) !=
            door.text_outputs.end()) {
      throw invalid_argument(
          "output MESH: a " + lower(std::string(to_string(from_proto(r.format())))) +
          " file is binary, and this answer would carry it as text: " + door.how_to_ask_binary +
          " (or ask for FORMAT obj, a text file)");
    }
    plan.requests.push_back(std::move(r));
  }
  return plan;
}

std::string in_protocol_terms(const std::string& message, size_t index, size_t batch) {
  // The request fields the plan fills, and where each came from.
  static const std::array<std::pair<std::string_view, std::string_view>, 9> kCarriers = {{
      {"prompt", "input PROMPT"},
      {"guidance_scale", "input GUIDANCE_SCALE"},
      {"top_p", "input TOP_P"},
      {"seed", "input SEED"},
      {"resolution_base", "input RESOLUTION_BASE"},
      {"bounding_box", "input BBOX"},
      {"format", "input FORMAT"},
      {"target_face_count", "parameter target_face_count"},
      {"mesh_profile", "parameter mesh_profile"},
  }};
  std::string out = message;
  for (const auto& [field, carrier] : kCarriers) {
    if (message.starts_with(field) && message.size() > field.size()) {
      const char next = message[field.size()];
      if (next == ' ' || next == ':' || next == '.' || next == '[') {
        out = std::string(carrier) + ": " + message;
        break;
      }
    }
  }
  if (batch > 1) out = "PROMPT[" + std::to_string(index) + "]: " + out;
  return out;
}

}  // namespace cube3d::inference
