#include "cube3d/model/clip_text_model.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <utility>

#include "cube3d/core/error.h"
#include "cube3d/core/safetensors.h"

namespace cube3d {
namespace {

using nlohmann::json;

// Far beyond any CLIP, small enough that products of two sizes cannot overflow int64.
constexpr int64_t kMaxDimension = int64_t{1} << 24;

// --- config.json ---------------------------------------------------------------------------

// transformers' CLIPTextConfig defaults: what a key missing from config.json means.
ClipTextConfig transformers_defaults() {
  ClipTextConfig config;
  config.vocab_size = 49408;
  config.hidden_size = 512;
  config.intermediate_size = 2048;
  config.num_hidden_layers = 12;
  config.num_attention_heads = 8;
  config.max_position_embeddings = 77;
  config.hidden_act = "quick_gelu";
  config.layer_norm_eps = 1e-5;
  return config;
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

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw not_found(path + ": cannot open the file");
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) throw invalid_argument(path + ": read error");
  return contents.str();
}

// --- files -----------------------------------------------------------------------------------

// POSIX stat rather than std::filesystem: the torch wheel's libtorch exports its own
// std::filesystem symbols, which interpose on libstdc++'s and have crashed tests.
enum class PathKind { kMissing, kFile, kDirectory, kOther };

PathKind path_kind(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return PathKind::kMissing;
  if (S_ISDIR(st.st_mode)) return PathKind::kDirectory;
  if (S_ISREG(st.st_mode)) return PathKind::kFile;
  return PathKind::kOther;
}

std::string parent_folder(const std::string& file) {
  const size_t slash = file.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return file.substr(0, slash);
}

// --- tensors ---------------------------------------------------------------------------------

enum class TensorKind { kEmbedding, kWeight, kBias, kNormWeight, kNormBias };

struct TensorSpec {
  std::string name;  // without the "text_model." prefix
  std::vector<int64_t> shape;
  TensorKind kind;
};

std::string layer_prefix(int64_t layer) { return "encoder.layers." + std::to_string(layer) + "."; }

// Every tensor of CLIPTextModel's state dict, in a fixed order (random() depends on it).
std::vector<TensorSpec> text_tensor_specs(const ClipTextConfig& c) {
  const int64_t d = c.hidden_size;
  const int64_t f = c.intermediate_size;
  std::vector<TensorSpec> specs = {
      {"embeddings.token_embedding.weight", {c.vocab_size, d}, TensorKind::kEmbedding},
      {"embeddings.position_embedding.weight",
       {c.max_position_embeddings, d},
       TensorKind::kEmbedding},
  };
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const std::string p = layer_prefix(layer);
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      specs.push_back({p + "self_attn." + proj + ".weight", {d, d}, TensorKind::kWeight});
      specs.push_back({p + "self_attn." + proj + ".bias", {d}, TensorKind::kBias});
    }
    specs.push_back({p + "layer_norm1.weight", {d}, TensorKind::kNormWeight});
    specs.push_back({p + "layer_norm1.bias", {d}, TensorKind::kNormBias});
    specs.push_back({p + "mlp.fc1.weight", {f, d}, TensorKind::kWeight});
    specs.push_back({p + "mlp.fc1.bias", {f}, TensorKind::kBias});
    specs.push_back({p + "mlp.fc2.weight", {d, f}, TensorKind::kWeight});
    specs.push_back({p + "mlp.fc2.bias", {d}, TensorKind::kBias});
    specs.push_back({p + "layer_norm2.weight", {d}, TensorKind::kNormWeight});
    specs.push_back({p + "layer_norm2.bias", {d}, TensorKind::kNormBias});
  }
  specs.push_back({"final_layer_norm.weight", {d}, TensorKind::kNormWeight});
  specs.push_back({"final_layer_norm.bias", {d}, TensorKind::kNormBias});
  return specs;
}

// Parts of the text model's state dict that hold no weights of the forward pass.
bool is_text_buffer(const std::string& unprefixed_name) {
  return unprefixed_name == "embeddings.position_ids";
}

bool is_text_model_name(const std::string& unprefixed_name) {
  for (const char* part : {"embeddings.", "encoder.", "final_layer_norm."}) {
    if (unprefixed_name.rfind(part, 0) == 0) return true;
  }
  return false;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

std::string join_limited(const std::vector<std::string>& items) {
  constexpr size_t kMaxListed = 20;
  std::string out;
  for (size_t i = 0; i < items.size() && i < kMaxListed; ++i) out += (i ? ", " : "") + items[i];
  if (items.size() > kMaxListed) {
    out += ", ... (" + std::to_string(items.size() - kMaxListed) + " more)";
  }
  return out;
}

bool is_float_dtype(SafetensorsDtype dtype) {
  return dtype == SafetensorsDtype::kF32 || dtype == SafetensorsDtype::kF16 ||
         dtype == SafetensorsDtype::kBF16;
}

// A float32 copy on `device`: never a view of the read-only file mapping.
at::Tensor to_model(const at::Tensor& t, at::Device device) {
  return t.to(device, at::kFloat, /*non_blocking=*/false, /*copy=*/true).contiguous();
}

// Builds the weights from float32 tensors keyed by unprefixed names (all present, all checked).
ClipTextWeights assemble(const ClipTextConfig& config, std::map<std::string, at::Tensor>& t) {
  const auto take = [&](const std::string& name) { return std::move(t.at(name)); };
  ClipTextWeights w;
  w.token_embedding = take("embeddings.token_embedding.weight");
  w.position_embedding = take("embeddings.position_embedding.weight");
  for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
    const std::string p = layer_prefix(layer);
    const std::string a = p + "self_attn.";
    ClipTextLayerWeights l;
    l.ln1_weight = take(p + "layer_norm1.weight");
    l.ln1_bias = take(p + "layer_norm1.bias");
    // One [3D, D] matmul instead of three: the same math, fewer kernel launches.
    l.qkv.weight =
        at::cat({take(a + "q_proj.weight"), take(a + "k_proj.weight"), take(a + "v_proj.weight")})
            .contiguous();
    l.qkv.bias =
        at::cat({take(a + "q_proj.bias"), take(a + "k_proj.bias"), take(a + "v_proj.bias")})
            .contiguous();
    l.out_proj = {take(a + "out_proj.weight"), take(a + "out_proj.bias")};
    l.ln2_weight = take(p + "layer_norm2.weight");
    l.ln2_bias = take(p + "layer_norm2.bias");
    l.fc1 = {take(p + "mlp.fc1.weight"), take(p + "mlp.fc1.bias")};
    l.fc2 = {take(p + "mlp.fc2.weight"), take(p + "mlp.fc2.bias")};
    w.layers.push_back(std::move(l));
  }
  w.final_ln_weight = take("final_layer_norm.weight");
  w.final_ln_bias = take("final_layer_norm.bias");
  return w;
}

void expect_shape(const at::Tensor& t, const std::vector<int64_t>& shape, const std::string& what,
                  at::Device device) {
  if (!t.defined() || t.sizes().vec() != shape || t.scalar_type() != at::kFloat ||
      t.device() != device) {
    throw invalid_argument("ClipTextModel: " + what + " must be float32 " + shape_string(shape) +
                           " on the embedding's device");
  }
}

// The public constructor takes weights from anywhere; a wrong shape would otherwise surface as
// an obscure ATen error in the middle of a request.
void check_weights(const ClipTextConfig& c, const ClipTextWeights& w) {
  const at::Device device = w.token_embedding.defined() ? w.token_embedding.device() : at::kCPU;
  const int64_t d = c.hidden_size;
  const int64_t f = c.intermediate_size;
  expect_shape(w.token_embedding, {c.vocab_size, d}, "token_embedding", device);
  expect_shape(w.position_embedding, {c.max_position_embeddings, d}, "position_embedding", device);
  if (static_cast<int64_t>(w.layers.size()) != c.num_hidden_layers) {
    throw invalid_argument("ClipTextModel: " + std::to_string(w.layers.size()) +
                           " layers given, the config has num_hidden_layers " +
                           std::to_string(c.num_hidden_layers));
  }
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const ClipTextLayerWeights& l = w.layers[i];
    const std::string p = "layer " + std::to_string(i) + " ";
    expect_shape(l.ln1_weight, {d}, p + "ln1_weight", device);
    expect_shape(l.ln1_bias, {d}, p + "ln1_bias", device);
    expect_shape(l.qkv.weight, {3 * d, d}, p + "qkv.weight", device);
    expect_shape(l.qkv.bias, {3 * d}, p + "qkv.bias", device);
    expect_shape(l.out_proj.weight, {d, d}, p + "out_proj.weight", device);
    expect_shape(l.out_proj.bias, {d}, p + "out_proj.bias", device);
    expect_shape(l.ln2_weight, {d}, p + "ln2_weight", device);
    expect_shape(l.ln2_bias, {d}, p + "ln2_bias", device);
    expect_shape(l.fc1.weight, {f, d}, p + "fc1.weight", device);
    expect_shape(l.fc1.bias, {f}, p + "fc1.bias", device);
    expect_shape(l.fc2.weight, {d, f}, p + "fc2.weight", device);
    expect_shape(l.fc2.bias, {d}, p + "fc2.bias", device);
  }
  expect_shape(w.final_ln_weight, {d}, "final_ln_weight", device);
  expect_shape(w.final_ln_bias, {d}, "final_ln_bias", device);
}

// Reads the text tensors of `path`, checking them all against `config` before loading any.
ClipTextWeights load_text_weights(const ClipTextConfig& config, const std::string& path,
                                  const std::string& config_path, at::Device device) {
  const SafetensorsFile file = SafetensorsFile::open(path);
  // CLIPModel (and transformers 4's CLIPTextModel) store "text_model.*"; transformers 5's
  // CLIPTextModel stores the same names without the prefix.
  const std::string token_name = "embeddings.token_embedding.weight";
  const std::string prefix =
      !file.contains("text_model." + token_name) && file.contains(token_name) ? "" : "text_model.";

  const std::vector<TensorSpec> specs = text_tensor_specs(config);
  std::vector<std::string> missing, misshapen, unexpected;
  std::set<std::string> expected;
  for (const TensorSpec& spec : specs) {
    const std::string name = prefix + spec.name;
    expected.insert(name);
    if (!file.contains(name)) {
      missing.push_back(name + " " + shape_string(spec.shape));
      continue;
    }
    const SafetensorsEntry& entry = file.entry(name);
    if (entry.shape != spec.shape) {
      misshapen.push_back(name + " is " + shape_string(entry.shape) + ", expected " +
                          shape_string(spec.shape));
    } else if (!is_float_dtype(entry.dtype)) {
      misshapen.push_back(name + " is not a floating-point tensor");
    }
  }
  // A checkpoint with more layers than the config (or other extra text tensors) would
  // otherwise load silently and compute something else.
  for (const std::string& name : file.names()) {
    if (name.rfind(prefix, 0) != 0 || expected.count(name)) continue;
    const std::string unprefixed = name.substr(prefix.size());
    if (is_text_model_name(unprefixed) && !is_text_buffer(unprefixed)) unexpected.push_back(name);
  }
  if (!missing.empty() || !misshapen.empty() || !unexpected.empty()) {
    std::string message = "CLIP text checkpoint " + path + " does not match " + config_path + ":";
    if (!missing.empty()) {
      message += "\n  missing (" + std::to_string(missing.size()) + "): " + join_limited(missing);
    }
    if (!misshapen.empty()) {
      message +=
          "\n  misshapen (" + std::to_string(misshapen.size()) + "): " + join_limited(misshapen);
    }
    if (!unexpected.empty()) {
      message +=
          "\n  unexpected (" + std::to_string(unexpected.size()) + "): " + join_limited(unexpected);
    }
    throw invalid_argument(message);
  }

  // Only the text tensors are ever read from the mapping; the vision tower stays on disk.
  std::map<std::string, at::Tensor> tensors;
  for (const TensorSpec& spec : specs) {
    tensors[spec.name] = to_model(file.tensor(prefix + spec.name), device);
  }
  return assemble(config, tensors);
}

}  // namespace

// --- ClipTextConfig --------------------------------------------------------------------------

void ClipTextConfig::validate(const std::string& source) const {
  validate_config(*this, source + ": ");
}

ClipTextConfig ClipTextConfig::from_json_file(const std::string& path) {
  const std::string text = read_text_file(path);
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

// --- ClipTextModel ---------------------------------------------------------------------------

ClipTextModel::ClipTextModel(ClipTextConfig config, ClipTextWeights weights)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      quick_gelu_(config_.hidden_act == "quick_gelu") {
  config_.validate("ClipTextConfig");
  check_weights(config_, weights_);
}

ClipTextModel ClipTextModel::load(const std::string& folder_or_file, at::Device device) {
  std::string folder, weights_path;
  switch (path_kind(folder_or_file)) {
    case PathKind::kDirectory:
      folder = folder_or_file;
      weights_path = folder + "/model.safetensors";
      if (path_kind(weights_path) == PathKind::kMissing) {
        if (path_kind(weights_path + ".index.json") != PathKind::kMissing) {
          throw unimplemented(folder +
                              ": sharded checkpoints (model.safetensors.index.json) are "
                              "not supported; merge the shards into one model.safetensors");
        }
        throw not_found(folder + ": no model.safetensors in the CLIP model folder");
      }
      break;
    case PathKind::kFile:
      folder = parent_folder(folder_or_file);
      weights_path = folder_or_file;
      break;
    case PathKind::kMissing:
      throw not_found(folder_or_file + ": no such CLIP model folder or safetensors file");
    case PathKind::kOther:
      throw invalid_argument(folder_or_file + ": not a folder or a regular file");
  }
  const std::string config_path = folder + "/config.json";
  if (path_kind(config_path) != PathKind::kFile) {
    throw not_found(config_path + ": missing; the CLIP text model's hyper-parameters (" +
                    weights_path + " alone does not give num_attention_heads) come from it");
  }
  const ClipTextConfig config = ClipTextConfig::from_json_file(config_path);
  ClipTextWeights weights = load_text_weights(config, weights_path, config_path, device);
  spdlog::info("loaded CLIP text model from {} ({} layers, width {}, {})", weights_path,
               config.num_hidden_layers, config.hidden_size, device.str());
  return ClipTextModel(config, std::move(weights));
}

ClipTextModel ClipTextModel::random(const ClipTextConfig& config, uint64_t seed,
                                    at::Device device) {
  config.validate("ClipTextConfig");
  // A CPU generator: the same numbers for a seed whatever the device.
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  std::map<std::string, at::Tensor> tensors;
  for (const TensorSpec& spec : text_tensor_specs(config)) {
    const at::Tensor noise = at::randn(spec.shape, gen, f32);
    at::Tensor value;
    switch (spec.kind) {
      case TensorKind::kEmbedding:
        value = noise * 0.02;  // transformers' initialisation
        break;
      case TensorKind::kWeight:
        // Unit-variance activations through the stack.
        value = noise / std::sqrt(static_cast<double>(spec.shape.back()));
        break;
      case TensorKind::kBias:
      case TensorKind::kNormBias:
        value = noise * 0.02;
        break;
      case TensorKind::kNormWeight:
        value = 1.0 + noise * 0.1;
        break;
    }
    tensors[spec.name] = to_model(value, device);
  }
  return ClipTextModel(config, assemble(config, tensors));
}

at::Tensor ClipTextModel::forward(const at::Tensor& input_ids,
                                  const at::Tensor& attention_mask) const {
  if (!input_ids.defined() || input_ids.dim() != 2 ||
      (input_ids.scalar_type() != at::kLong && input_ids.scalar_type() != at::kInt)) {
    throw invalid_argument("CLIP input_ids must be an int64 or int32 tensor [batch, length]");
  }
  const int64_t batch = input_ids.size(0);
  const int64_t length = input_ids.size(1);
  if (batch < 1 || length < 1 || length > config_.max_position_embeddings) {
    throw invalid_argument(
        "CLIP input_ids are [" + std::to_string(batch) + ", " + std::to_string(length) +
        "]; need batch >= 1 and 1 <= length <= " + std::to_string(config_.max_position_embeddings));
  }
  if (!attention_mask.defined() || attention_mask.sizes() != input_ids.sizes()) {
    throw invalid_argument("CLIP attention_mask must have the shape of input_ids [" +
                           std::to_string(batch) + ", " + std::to_string(length) + "]");
  }
  const at::Device device = this->device();
  const at::Tensor ids = input_ids.to(device, at::kLong);
  // An out-of-range id would be an index error on the CPU and a device-side assert (which
  // poisons the whole CUDA context) on the GPU; one scalar sync is cheap next to the model.
  if ((ids.lt(0) | ids.ge(config_.vocab_size)).any().item<bool>()) {
    throw invalid_argument("CLIP input_ids must lie in [0, " + std::to_string(config_.vocab_size) +
                           ")");
  }

  const ClipTextWeights& w = weights_;
  const double eps = config_.layer_norm_eps;
  const int64_t heads = config_.num_attention_heads;
  at::Tensor x = at::embedding(w.token_embedding, ids) +
                 w.position_embedding.slice(/*dim=*/0, /*start=*/0, /*end=*/length);

  // transformers' create_causal_mask: query i attends to key j iff j <= i and j is a real token.
  // Padding rows are not special: a padded query sees every real token before it (the prompt
  // and its EOS), which is what fills the padding positions of last_hidden_state.
  const at::Tensor key_is_real = attention_mask.to(device).ne(0).view({batch, 1, 1, length});
  const at::Tensor causal =
      at::ones({length, length}, at::TensorOptions().dtype(at::kBool).device(device)).tril();
  const at::Tensor mask = causal.logical_and(key_is_real);  // [B, 1, L, L]

  for (const ClipTextLayerWeights& l : w.layers) {
    const at::Tensor h = layer_norm(x, l.ln1_weight, l.ln1_bias, eps);
    const std::vector<at::Tensor> qkv = l.qkv(h).chunk(3, /*dim=*/-1);
    // attention() scales by head_dim^-0.5, CLIPAttention's scale.
    const at::Tensor a = attention(split_heads(qkv[0], heads), split_heads(qkv[1], heads),
                                   split_heads(qkv[2], heads), mask);
    x = x + l.out_proj(merge_heads(a));
    const at::Tensor up = l.fc1(layer_norm(x, l.ln2_weight, l.ln2_bias, eps));
    const at::Tensor act = quick_gelu_ ? up * at::sigmoid(up * 1.702) : at::gelu(up);
    x = x + l.fc2(act);
  }
  return layer_norm(x, w.final_ln_weight, w.final_ln_bias, eps);
}

}  // namespace cube3d
