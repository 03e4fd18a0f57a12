#include "cube3d/model/clip_text_config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "cube3d/core/error.h"
#include "cube3d/core/files.h"

namespace cube3d {
namespace {

using nlohmann::json;

// Far beyond any CLIP, small enough that products of two sizes cannot overflow int64.
constexpr int64_t kMaxDimension = int64_t{1} << 24;

// A real config.json is a few kilobytes; the cap keeps a wrong path (a checkpoint) from being
// read whole into memory.
constexpr int64_t kMaxConfigBytes = int64_t{1} << 20;

// transformers' CLIPTextConfig defaults: what a key missing from config.json means.
ClipTextConfig transformers_defaults() {
  return {.vocab_size = 49408,
          .hidden_size = 512,
          .intermediate_size = 2048,
          .num_hidden_layers = 12,
          .num_attention_heads = 8,
          .max_position_embeddings = kClipContextLength,
          .hidden_act = "quick_gelu",
          .layer_norm_eps = 1e-5};
}

// One object of config.json and how messages name it ("/x/config.json: text_config.").
struct JsonSection {
  const json* object;
  std::string where;
};

void read_int(const JsonSection& section, const char* key, int64_t* out) {
  const auto it = section.object->find(key);
  if (it == section.object->end() || it->is_null()) return;
  if (!it->is_number_integer() ||
      (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(kMaxDimension))) {
    throw invalid_argument(section.where + key + " must be a positive integer (got " + it->dump() +
                           ")");
  }
  *out = it->get<int64_t>();
}

void read_double(const JsonSection& section, const char* key, double* out) {
  const auto it = section.object->find(key);
  if (it == section.object->end() || it->is_null()) return;
  if (!it->is_number()) {
    throw invalid_argument(section.where + key + " must be a number (got " + it->dump() + ")");
  }
  *out = it->get<double>();
}

void read_string(const JsonSection& section, const char* key, std::string* out) {
  const auto it = section.object->find(key);
  if (it == section.object->end() || it->is_null()) return;
  if (!it->is_string()) {
    throw invalid_argument(section.where + key + " must be a string (got " + it->dump() + ")");
  }
  *out = it->get<std::string>();
}

// `where` prefixes every message: it names the file and the object the fields live in.
void validate_config(const ClipTextConfig& config, const std::string& where) {
  const auto check_dimension = [&](const char* key, int64_t value) {
    if (value < 1 || value > kMaxDimension) {
      throw invalid_argument(where + key + " must be in 1.." + std::to_string(kMaxDimension) +
                             " (got " + std::to_string(value) + ")");
    }
  };
  check_dimension("vocab_size", config.vocab_size);
  check_dimension("hidden_size", config.hidden_size);
  check_dimension("intermediate_size", config.intermediate_size);
  check_dimension("num_hidden_layers", config.num_hidden_layers);
  check_dimension("num_attention_heads", config.num_attention_heads);
  check_dimension("max_position_embeddings", config.max_position_embeddings);
  if (config.hidden_size % config.num_attention_heads != 0) {
    throw invalid_argument(
        where + "num_attention_heads (" + std::to_string(config.num_attention_heads) +
        ") must divide hidden_size (" + std::to_string(config.hidden_size) + ")");
  }
  if (config.hidden_act != "quick_gelu" && config.hidden_act != "gelu") {
    throw invalid_argument(where + "hidden_act \"" + config.hidden_act +
                           "\" is not supported (use \"quick_gelu\" or \"gelu\")");
  }
  if (!(config.layer_norm_eps > 0.0) || !std::isfinite(config.layer_norm_eps)) {
    throw invalid_argument(where + "layer_norm_eps must be a positive number (got " +
                           std::to_string(config.layer_norm_eps) + ")");
  }
}

}  // namespace

void ClipTextConfig::validate(const std::string& source) const {
  validate_config(*this, source + ": ");
}

ClipTextConfig ClipTextConfig::from_json_file(const std::string& path) {
  const std::string text = read_file(path, "CLIP config", kMaxConfigBytes);
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    throw invalid_argument(path + ": invalid JSON: " + e.what());
  }
  if (!root.is_object()) throw invalid_argument(path + ": the top level must be a JSON object");

  std::string model_type;
  read_string({&root, path + ": "}, "model_type", &model_type);
  const json defaults_only = json::object();
  JsonSection section{&root, path + ": "};
  // transformers' CLIPConfig builds its text model from text_config_dict when there is one
  // (every key it lacks taking the default, text_config ignored), else from text_config.
  const auto dict = root.find("text_config_dict");
  const auto nested = root.find("text_config");
  if (dict != root.end() && !dict->is_null()) {
    if (!dict->is_object()) throw invalid_argument(path + ": text_config_dict must be an object");
    section = {&*dict, path + ": text_config_dict."};
  } else if (nested != root.end() && !nested->is_null()) {
    if (!nested->is_object()) throw invalid_argument(path + ": text_config must be an object");
    section = {&*nested, path + ": text_config."};
  } else if (model_type == "clip") {
    section = {&defaults_only, path + ": text_config."};
  } else if (!model_type.empty() && model_type != "clip_text_model") {
    throw invalid_argument(path + ": model_type \"" + model_type +
                           "\" is not a CLIP text model (expected clip_text_model, or clip with "
                           "a text_config)");
  }

  ClipTextConfig config = transformers_defaults();
  read_int(section, "vocab_size", &config.vocab_size);
  read_int(section, "hidden_size", &config.hidden_size);
  read_int(section, "intermediate_size", &config.intermediate_size);
  read_int(section, "num_hidden_layers", &config.num_hidden_layers);
  read_int(section, "num_attention_heads", &config.num_attention_heads);
  read_int(section, "max_position_embeddings", &config.max_position_embeddings);
  read_string(section, "hidden_act", &config.hidden_act);
  read_double(section, "layer_norm_eps", &config.layer_norm_eps);
  validate_config(config, section.where);
  return config;
}

}  // namespace cube3d
