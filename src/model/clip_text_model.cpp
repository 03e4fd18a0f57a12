#include "cube3d/model/clip_text_model.h"

#include <ATen/ATen.h>
#include <spdlog/spdlog.h>

#include <utility>

#include "cube3d/core/error.h"
#include "cube3d/core/files.h"
#include "cube3d/core/paths.h"
#include "cube3d/model/weight_spec.h"
#include "cube3d/model/weights.h"

namespace cube3d {
namespace {

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

// CLIPModel (and transformers 4's CLIPTextModel) store "text_model.*"; transformers 5's
// CLIPTextModel stores the same names without the prefix.
std::string text_model_prefix(const TensorSource& source) {
  const std::string token_name = "embeddings.token_embedding.weight";
  return !source.shapes.count("text_model." + token_name) && source.shapes.count(token_name)
             ? ""
             : "text_model.";
}

// Hides all but the text transformer's weights, so that the vision tower, the projections,
// logit_scale and the position_ids buffer are neither reported nor read, while an extra text
// layer (a config with fewer layers than the checkpoint) still is.
TensorSource text_model_tensors(TensorSource source, const std::string& prefix) {
  std::erase_if(source.shapes, [&](const auto& entry) {
    const std::string& name = entry.first;
    if (name.rfind(prefix, 0) != 0) return true;
    const std::string unprefixed = name.substr(prefix.size());
    return !is_text_model_name(unprefixed) || is_text_buffer(unprefixed);
  });
  return source;
}

ClipTextWeights assemble(const ClipTextConfig& config, const WeightLookup& t) {
  ClipTextWeights w;
  w.token_embedding = t.tensor("embeddings.token_embedding.weight");
  w.position_embedding = t.tensor("embeddings.position_embedding.weight");
  for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
    const std::string p = "encoder.layers." + std::to_string(layer);
    const Linear q = t.linear(p + ".self_attn.q_proj");
    const Linear k = t.linear(p + ".self_attn.k_proj");
    const Linear v = t.linear(p + ".self_attn.v_proj");
    ClipTextLayerWeights l;
    l.ln1_weight = t.tensor(p + ".layer_norm1.weight");
    l.ln1_bias = t.tensor(p + ".layer_norm1.bias");
    // One [3D, D] matmul instead of three: the same math, fewer kernel launches.
    l.qkv = {at::cat({q.weight, k.weight, v.weight}), at::cat({q.bias, k.bias, v.bias})};
    l.out_proj = t.linear(p + ".self_attn.out_proj");
    l.ln2_weight = t.tensor(p + ".layer_norm2.weight");
    l.ln2_bias = t.tensor(p + ".layer_norm2.bias");
    l.fc1 = t.linear(p + ".mlp.fc1");
    l.fc2 = t.linear(p + ".mlp.fc2");
    w.layers.push_back(std::move(l));
  }
  w.final_ln_weight = t.tensor("final_layer_norm.weight");
  w.final_ln_bias = t.tensor("final_layer_norm.bias");
  return w;
}

void expect_shape(const at::Tensor& t, const std::vector<int64_t>& shape, const std::string& what,
                  at::Device device) {
  if (!t.defined() || t.sizes().vec() != shape || t.scalar_type() != at::kFloat ||
      t.device() != device) {
    throw invalid_argument("ClipTextModel: " + what + " must be float32 " + shape_to_string(shape) +
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

}  // namespace

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
      folder = folder_of(folder_or_file);
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
  const TensorSource file = safetensors_source(weights_path);
  const std::string prefix = text_model_prefix(file);
  CheckpointSpec spec = clip_text_checkpoint_spec(config, prefix);
  spec.config_source = config_path;
  const TensorMap tensors =
      resolve_checkpoint(spec, text_model_tensors(file, prefix), {at::kFloat, device});
  ClipTextWeights weights = assemble(config, WeightLookup(tensors, spec.what, prefix));
  spdlog::info("loaded CLIP text model from {} ({} layers, width {}, {})", weights_path,
               config.num_hidden_layers, config.hidden_size, device.str());
  return ClipTextModel(config, std::move(weights));
}

ClipTextModel ClipTextModel::random(const ClipTextConfig& config, uint64_t seed,
                                    at::Device device) {
  config.validate("ClipTextConfig");
  const CheckpointSpec spec = clip_text_checkpoint_spec(config, "");
  const TensorMap tensors = random_checkpoint(spec, seed, {at::kFloat, device});
  return ClipTextModel(config, assemble(config, WeightLookup(tensors, spec.what)));
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
