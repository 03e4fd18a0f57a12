#include "cube3d/model/weights.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <set>

#include "cube3d/core/error.h"
#include "cube3d/core/safetensors.h"

namespace cube3d {
namespace {

bool keeps_float32(TensorRole role) {
  // Norm parameters and the codebook feed float32 math (norms, codebook normalisation).
  return role == TensorRole::kNormWeight || role == TensorRole::kNormBias ||
         role == TensorRole::kCodebook || role == TensorRole::kFourier;
}

at::Tensor convert(const at::Tensor& t, TensorRole role, const WeightOptions& options) {
  const at::ScalarType dtype = keeps_float32(role) ? at::kFloat : options.dtype;
  // contiguous() + clone on CPU: the result must not alias the read-only file mapping, since
  // the model keeps these tensors for its lifetime and may derive in-place views of them.
  at::Tensor out = t.to(options.device, dtype, /*non_blocking=*/false, /*copy=*/true);
  return out.contiguous();
}

bool ignored(const CheckpointSpec& spec, const std::string& name) {
  for (const auto& prefix : spec.ignored_prefixes) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

std::string join_limited(const std::vector<std::string>& items) {
  constexpr size_t kMaxListed = 20;
  std::string out;
  for (size_t i = 0; i < items.size() && i < kMaxListed; ++i) {
    out += (i ? ", " : "") + items[i];
  }
  if (items.size() > kMaxListed) {
    out += ", ... (" + std::to_string(items.size() - kMaxListed) + " more)";
  }
  return out;
}

}  // namespace

TensorSource safetensors_source(const std::string& path) {
  // The file object is shared by the loader; tensors it returns keep the mapping alive.
  auto file = std::make_shared<SafetensorsFile>(SafetensorsFile::open(path));
  TensorSource source;
  source.description = path;
  for (const auto& name : file->names()) source.shapes[name] = file->entry(name).shape;
  source.load = [file](const std::string& name) { return file->tensor(name); };
  return source;
}

TensorMap resolve_checkpoint(const CheckpointSpec& spec, const TensorSource& source,
                             const WeightOptions& options) {
  std::vector<std::string> missing, misshapen, unexpected, disagreeing;
  std::set<std::string> claimed;
  TensorMap out;
  for (const auto& t : spec.tensors) {
    std::vector<std::string> present;
    for (const auto& name : t.names) {
      claimed.insert(name);
      if (source.shapes.count(name)) present.push_back(name);
    }
    if (present.empty()) {
      missing.push_back(t.name() + " " + shape_to_string(t.shape));
      continue;
    }
    bool shapes_ok = true;
    for (const auto& name : present) {
      const auto& shape = source.shapes.at(name);
      if (shape != t.shape) {
        misshapen.push_back(name + " is " + shape_to_string(shape) + ", expected " +
                            shape_to_string(t.shape));
        shapes_ok = false;
      }
    }
    if (!shapes_ok) continue;
    const at::Tensor first = source.load(present.front());
    if (!first.is_floating_point()) {
      misshapen.push_back(present.front() + " is stored as " +
                          std::string(c10::toString(first.scalar_type())) +
                          ", expected a floating-point dtype");
      continue;
    }
    for (size_t i = 1; i < present.size(); ++i) {
      if (!at::equal(first.to(at::kFloat), source.load(present[i]).to(at::kFloat))) {
        disagreeing.push_back(present.front() + " vs " + present[i]);
      }
    }
    out[t.name()] = convert(first, t.role, options);
  }
  for (const auto& [name, shape] : source.shapes) {
    if (!claimed.count(name) && !ignored(spec, name)) unexpected.push_back(name);
  }
  if (!missing.empty() || !misshapen.empty() || !unexpected.empty() || !disagreeing.empty()) {
    std::string message =
        spec.what + " checkpoint " + source.description + " does not match the model config:";
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
    if (!disagreeing.empty()) {
      message += "\n  shared tensor stored under several names with different values: " +
                 join_limited(disagreeing);
    }
    throw invalid_argument(message);
  }
  return out;
}

TensorMap random_checkpoint(const CheckpointSpec& spec, uint64_t seed,
                            const WeightOptions& options) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  TensorMap out;
  for (const auto& t : spec.tensors) {
    const at::Tensor noise = at::randn(t.shape, gen, f32);
    at::Tensor value;
    switch (t.role) {
      case TensorRole::kWeight:
        // Scaled so activations keep unit variance through the stack.
        value = noise / std::sqrt(static_cast<double>(t.shape.back()));
        break;
      case TensorRole::kBias:
      case TensorRole::kNormBias:
        value = noise * 0.02;
        break;
      case TensorRole::kNormWeight:
        value = 1.0 + noise * 0.1;
        break;
      case TensorRole::kEmbedding:
      case TensorRole::kCodebook:
        value = noise;
        break;
      case TensorRole::kFourier:
        // The official initialisation: randn * sqrt(F / 2).
        value = noise * std::sqrt(0.5 * static_cast<double>(t.shape.back()));
        break;
    }
    out[t.name()] = convert(value, t.role, options);
  }
  return out;
}

ModelWeights load_model_weights(const ModelConfig& config, const std::string& gpt_path,
                                const std::string& shape_path, const WeightOptions& options) {
  const CheckpointSpec gpt_spec = gpt_checkpoint_spec(config.gpt);
  const CheckpointSpec shape_spec = shape_tokenizer_checkpoint_spec(config.shape);
  if (gpt_path.empty() != shape_path.empty()) {
    throw invalid_argument("give both the shape GPT and the shape tokenizer checkpoints (got " +
                           (gpt_path.empty() ? std::string("only the shape tokenizer")
                                             : std::string("only the shape GPT")) +
                           ")");
  }
  if (gpt_path.empty()) {
    if (!config.random_weights_seed) {
      throw invalid_argument(config.source +
                             ": no checkpoints given and the config has no random_weights_seed");
    }
    const uint64_t seed = *config.random_weights_seed;
    spdlog::info("generating random weights from seed {} ({})", seed, config.source);
    return {random_checkpoint(gpt_spec, seed, options),
            random_checkpoint(shape_spec, seed + 1, options)};
  }
  return {resolve_checkpoint(gpt_spec, safetensors_source(gpt_path), options),
          resolve_checkpoint(shape_spec, safetensors_source(shape_path), options)};
}

}  // namespace cube3d
