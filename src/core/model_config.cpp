// Model config loading. The official Python builds its config dataclasses with `Config(**yaml)`:
// an unknown key is an error and a missing key takes the dataclass default. We keep those rules,
// but make the size keys whose official defaults describe no released model required, and check
// types strictly, so that a typo fails at load time with the file and the full key named instead
// of surfacing later as a tensor shape mismatch.
#include "cube3d/core/model_config.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <functional>
#include <span>
#include <sstream>
#include <string_view>
#include <vector>

#include "cube3d/core/yaml_reader.h"

namespace cube3d {
namespace {

// Upper bounds far above any released model; they only stop a typo (an extra digit or two) from
// making us try to allocate terabytes or loop for hours before failing.
constexpr int64_t kMaxWidth = 65536;       // n_embd, width, embed dims, point_feats
constexpr int64_t kMaxHeads = 4096;        // n_head, num_heads
constexpr int64_t kMaxLayers = 1024;       // every *layer* count
constexpr int64_t kMaxCodes = 1 << 20;     // shape_model_vocab_size, num_codes
constexpr int64_t kMaxLatents = 65536;     // num_encoder_latents, num_decoder_latents
constexpr int64_t kMaxFreqs = 4096;        // num_freqs
constexpr double kMaxParameters = 0x1p37;  // ~137G parameters: ~275 GB in bf16, no GPU holds it

using yaml::fail;
using yaml::read_bool;
using yaml::read_float;
using yaml::read_int;
using yaml::read_int_list;
using yaml::read_string;

struct Field {
  std::string_view name;
  bool required;
  // Reads the value into the config; `key` is the full dotted key for messages.
  std::function<void(const YAML::Node& value, const std::string& key)> read;
};

// The shared walker catches unknown and duplicate keys; the required ones are checked here,
// per mapping, since each section of a model config is a dataclass of its own.
void read_mapping(const YAML::Node& node, std::string_view source, const std::string& prefix,
                  std::span<const Field> fields) {
  std::vector<std::string_view> names;
  names.reserve(fields.size());
  for (const Field& field : fields) names.push_back(field.name);
  const std::vector<bool> seen =
      yaml::read_mapping(node, source, prefix, names,
                         [&](std::size_t index, const YAML::Node& value, const std::string& key) {
                           fields[index].read(value, key);
                         });
  for (std::size_t i = 0; i < fields.size(); ++i) {
    if (fields[i].required && !seen[i]) {
      fail(source,
           "missing required key " + (prefix.empty() ? std::string(fields[i].name)
                                                     : prefix + "." + std::string(fields[i].name)));
    }
  }
}

// The official dataclass defaults (DualStreamRoformer.Config), which differ in places from the
// struct's in-code defaults: those describe the released models, these what a YAML file that
// leaves a key out means to the official code.
GptConfig official_gpt_defaults() {
  GptConfig gpt;
  gpt.n_single_layer = 0;
  gpt.rope_theta = 1000.0;
  gpt.bias = false;
  gpt.eps = 1e-6;
  gpt.use_pooled_text_embed = false;
  gpt.encoder_with_cls_token = true;
  gpt.use_bbox = false;
  return gpt;
}

// OneDAutoEncoder.Config defaults, as above.
ShapeModelConfig official_shape_defaults() {
  ShapeModelConfig shape;
  shape.num_decoder_latents = 256;
  shape.out_dim = 1;
  shape.eps = 1e-6;
  shape.point_feats = 0;
  shape.embed_point_feats = false;
  shape.num_encoder_layers = 1;
  shape.encoder_cross_attention_levels.clear();
  shape.encoder_with_cls_token = true;
  return shape;
}

// Fields that read one typed scalar into a config member.
struct FieldMaker {
  std::string_view source;
  Field integer(std::string_view name, bool required, int64_t& out) const {
    return Field{name, required, [&out, s = source](const YAML::Node& v, const std::string& k) {
                   out = read_int(v, s, k);
                 }};
  }
  Field real(std::string_view name, double& out) const {
    return Field{name, false, [&out, s = source](const YAML::Node& v, const std::string& k) {
                   out = read_float(v, s, k);
                 }};
  }
  Field boolean(std::string_view name, bool& out) const {
    return Field{name, false, [&out, s = source](const YAML::Node& v, const std::string& k) {
                   out = read_bool(v, s, k);
                 }};
  }
};

GptConfig read_gpt(const YAML::Node& node, std::string_view source) {
  GptConfig gpt = official_gpt_defaults();
  const FieldMaker field{source};
  // The dataclass field order.
  const Field fields[] = {
      // Where the official code finds its checkpoint; ours come from the command line.
      Field{"checkpoint_path", false,
            [source](const YAML::Node& v, const std::string& k) {
              if (!v.IsNull()) read_string(v, source, k);
            }},
      field.integer("n_layer", true, gpt.n_layer),
      field.integer("n_single_layer", false, gpt.n_single_layer),
      field.real("rope_theta", gpt.rope_theta),
      field.integer("n_head", true, gpt.n_head),
      field.integer("n_embd", true, gpt.n_embd),
      field.boolean("bias", gpt.bias),
      field.real("eps", gpt.eps),
      field.integer("shape_model_vocab_size", true, gpt.shape_model_vocab_size),
      field.integer("shape_model_embed_dim", true, gpt.shape_model_embed_dim),
      field.integer("text_model_embed_dim", true, gpt.text_model_embed_dim),
      field.boolean("use_pooled_text_embed", gpt.use_pooled_text_embed),
      field.boolean("encoder_with_cls_token", gpt.encoder_with_cls_token),
      field.boolean("use_bbox", gpt.use_bbox),
  };
  read_mapping(node, source, "gpt_model", fields);
  return gpt;
}

ShapeModelConfig read_shape(const YAML::Node& node, std::string_view source) {
  ShapeModelConfig shape = official_shape_defaults();
  const FieldMaker field{source};
  const Field fields[] = {
      Field{"checkpoint_path", false,
            [source](const YAML::Node& v, const std::string& k) {
              if (!v.IsNull()) read_string(v, source, k);
            }},
      field.integer("num_encoder_latents", true, shape.num_encoder_latents),
      field.integer("num_decoder_latents", false, shape.num_decoder_latents),
      field.integer("embed_dim", true, shape.embed_dim),
      field.integer("width", true, shape.width),
      field.integer("num_heads", true, shape.num_heads),
      field.integer("out_dim", false, shape.out_dim),
      field.real("eps", shape.eps),
      field.integer("num_freqs", true, shape.num_freqs),
      field.integer("point_feats", false, shape.point_feats),
      field.boolean("embed_point_feats", shape.embed_point_feats),
      field.integer("num_encoder_layers", false, shape.num_encoder_layers),
      Field{"encoder_cross_attention_levels", false,
            [&shape, source](const YAML::Node& v, const std::string& k) {
              shape.encoder_cross_attention_levels = read_int_list(v, source, k);
            }},
      field.integer("num_decoder_layers", true, shape.num_decoder_layers),
      field.boolean("encoder_with_cls_token", shape.encoder_with_cls_token),
      field.integer("num_codes", true, shape.num_codes),
  };
  read_mapping(node, source, "shape_model", fields);
  return shape;
}

ModelConfig read_model(const YAML::Node& root, std::string_view source) {
  if (!root.IsDefined() || root.IsNull()) {
    fail(source, "empty document: expected a mapping with gpt_model and shape_model");
  }
  ModelConfig config;
  const Field fields[] = {
      Field{"gpt_model", true,
            [&](const YAML::Node& v, const std::string&) { config.gpt = read_gpt(v, source); }},
      Field{"shape_model", true,
            [&](const YAML::Node& v, const std::string&) { config.shape = read_shape(v, source); }},
      Field{"text_model_pretrained_model_name_or_path", false,
            [&](const YAML::Node& v, const std::string& k) {
              config.text_model_name = read_string(v, source, k);
              if (config.text_model_name.empty()) fail(source, k + ": must not be empty");
            }},
      // Null means "not set", so a file can disable it without deleting the line.
      Field{"random_weights_seed", false,
            [&](const YAML::Node& v, const std::string& k) {
              if (v.IsNull()) {
                config.random_weights_seed.reset();
                return;
              }
              const int64_t seed = read_int(v, source, k);
              if (seed < 0)
                fail(source, k + " (" + std::to_string(seed) + ") must not be negative");
              config.random_weights_seed = static_cast<uint64_t>(seed);
            }},
  };
  read_mapping(root, source, "", fields);
  config.source = std::string(source);
  return config;
}

// Messages from validate_model_config name the file when there is one.
std::string_view origin(const ModelConfig& config) {
  return config.source.empty() ? std::string_view("model config") : config.source;
}

void check_model_range(std::string_view source, std::string_view key, int64_t value, int64_t min,
                       int64_t max) {
  const std::string what = std::string(key) + " (" + std::to_string(value) + ")";
  if (value < min) {
    fail(source, what + (min == 1   ? " must be positive"
                         : min == 0 ? " must not be negative"
                                    : " must be at least " + std::to_string(min)));
  }
  if (value > max) fail(source, what + " exceeds the limit of " + std::to_string(max));
}

void check_positive_finite(std::string_view source, std::string_view key, double value) {
  if (!(value > 0.0) || !std::isfinite(value)) {
    std::ostringstream text;
    text << key << " (" << value << ") must be positive and finite";
    fail(source, text.str());
  }
}

}  // namespace

void validate_model_config(const ModelConfig& config) {
  const std::string_view src = origin(config);
  const GptConfig& gpt = config.gpt;
  const ShapeModelConfig& shape = config.shape;

  // Ranges first, so the divisibility checks below never divide by zero.
  check_model_range(src, "gpt_model.n_layer", gpt.n_layer, 1, kMaxLayers);
  check_model_range(src, "gpt_model.n_single_layer", gpt.n_single_layer, 0, kMaxLayers);
  check_model_range(src, "gpt_model.n_head", gpt.n_head, 1, kMaxHeads);
  check_model_range(src, "gpt_model.n_embd", gpt.n_embd, 1, kMaxWidth);
  check_model_range(src, "gpt_model.shape_model_vocab_size", gpt.shape_model_vocab_size, 1,
                    kMaxCodes);
  check_model_range(src, "gpt_model.shape_model_embed_dim", gpt.shape_model_embed_dim, 1,
                    kMaxWidth);
  check_model_range(src, "gpt_model.text_model_embed_dim", gpt.text_model_embed_dim, 1, kMaxWidth);
  check_positive_finite(src, "gpt_model.rope_theta", gpt.rope_theta);
  check_positive_finite(src, "gpt_model.eps", gpt.eps);

  check_model_range(src, "shape_model.num_encoder_latents", shape.num_encoder_latents, 1,
                    kMaxLatents);
  check_model_range(src, "shape_model.num_decoder_latents", shape.num_decoder_latents, 0,
                    kMaxLatents);
  check_model_range(src, "shape_model.embed_dim", shape.embed_dim, 1, kMaxWidth);
  check_model_range(src, "shape_model.width", shape.width, 1, kMaxWidth);
  check_model_range(src, "shape_model.num_heads", shape.num_heads, 1, kMaxHeads);
  check_model_range(src, "shape_model.num_freqs", shape.num_freqs, 1, kMaxFreqs);
  check_model_range(src, "shape_model.point_feats", shape.point_feats, 0, kMaxWidth);
  check_model_range(src, "shape_model.num_encoder_layers", shape.num_encoder_layers, 0, kMaxLayers);
  check_model_range(src, "shape_model.num_decoder_layers", shape.num_decoder_layers, 1, kMaxLayers);
  check_model_range(src, "shape_model.num_codes", shape.num_codes, 1, kMaxCodes);
  check_positive_finite(src, "shape_model.eps", shape.eps);

  if (gpt.use_pooled_text_embed) {
    fail(src,
         "gpt_model.use_pooled_text_embed: true is not supported (only the CLIP "
         "last_hidden_state condition is implemented)");
  }
  if (shape.out_dim != 1) {
    fail(src, "shape_model.out_dim (" + std::to_string(shape.out_dim) +
                  ") is not supported: only 1 (one occupancy logit per point) is");
  }

  if (gpt.n_embd % gpt.n_head != 0) {
    fail(src, "gpt_model.n_embd (" + std::to_string(gpt.n_embd) +
                  ") is not divisible by gpt_model.n_head (" + std::to_string(gpt.n_head) + ")");
  }
  if (gpt.head_dim() % 2 != 0) {
    fail(src, "gpt_model.n_embd / gpt_model.n_head (" + std::to_string(gpt.head_dim()) +
                  ") must be even: RoPE rotates pairs of channels");
  }
  // The decoder has no RoPE, so its head dim may be odd; it only has to divide evenly.
  if (shape.width % shape.num_heads != 0) {
    fail(src, "shape_model.width (" + std::to_string(shape.width) +
                  ") is not divisible by shape_model.num_heads (" +
                  std::to_string(shape.num_heads) + ")");
  }

  // The GPT predicts codebook indices and embeds codebook vectors: both sides must agree.
  if (gpt.shape_model_vocab_size != shape.num_codes) {
    fail(src, "gpt_model.shape_model_vocab_size (" + std::to_string(gpt.shape_model_vocab_size) +
                  ") differs from shape_model.num_codes (" + std::to_string(shape.num_codes) + ")");
  }
  if (gpt.shape_model_embed_dim != shape.embed_dim) {
    fail(src, "gpt_model.shape_model_embed_dim (" + std::to_string(gpt.shape_model_embed_dim) +
                  ") differs from shape_model.embed_dim (" + std::to_string(shape.embed_dim) + ")");
  }

  // The official encoder silently ignores a level it has no layer for; here it is a mistake
  // worth naming (we never build the encoder, but the file should still describe one).
  for (std::size_t i = 0; i < shape.encoder_cross_attention_levels.size(); ++i) {
    const int64_t level = shape.encoder_cross_attention_levels[i];
    if (level < 0 || level >= shape.num_encoder_layers) {
      fail(src, "shape_model.encoder_cross_attention_levels[" + std::to_string(i) + "] (" +
                    std::to_string(level) + ") is not a layer index below " +
                    "shape_model.num_encoder_layers (" + std::to_string(shape.num_encoder_layers) +
                    ")");
    }
  }

  // Each size is bounded above, but their products can still reach terabytes; bound the
  // parameter count too (a dual block holds two streams of attention + 4x MLP, ~12 D^2 each).
  const double d = static_cast<double>(gpt.n_embd);
  const double gpt_parameters =
      (24.0 * static_cast<double>(gpt.n_layer) + 12.0 * static_cast<double>(gpt.n_single_layer)) *
          d * d +
      2.0 * static_cast<double>(gpt.vocab_size()) * d;
  if (gpt_parameters > kMaxParameters) {
    std::ostringstream text;
    text.precision(2);
    text << "gpt_model.n_layer, n_single_layer and n_embd describe about " << gpt_parameters
         << " parameters, more than the limit of " << kMaxParameters;
    fail(src, text.str());
  }
  const double w = static_cast<double>(shape.width);
  const double decoder_parameters = 12.0 * static_cast<double>(shape.num_decoder_layers) * w * w;
  if (decoder_parameters > kMaxParameters) {
    std::ostringstream text;
    text.precision(2);
    text << "shape_model.num_decoder_layers and width describe about " << decoder_parameters
         << " parameters, more than the limit of " << kMaxParameters;
    fail(src, text.str());
  }
}

ModelConfig parse_model_config(const std::string& yaml_text, const std::string& source) {
  ModelConfig config =
      read_model(yaml::parse_single_document(yaml_text, source, "model config"), source);
  validate_model_config(config);
  return config;
}

ModelConfig load_model_config(const std::string& path) {
  return parse_model_config(yaml::read_config_file(path, "model config", " (is it a checkpoint?)"),
                            path);
}

}  // namespace cube3d
