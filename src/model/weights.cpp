#include "cube3d/model/weights.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <mutex>
#include <numeric>
#include <set>
#include <utility>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/tensor_io/safetensors.h"

namespace cube3d {
namespace {

bool keeps_float32(TensorRole role) {
  // Norm parameters and the codebook feed float32 math (norms, codebook normalisation).
  return role == TensorRole::kNormWeight || role == TensorRole::kNormBias ||
         role == TensorRole::kCodebook || role == TensorRole::kFourier;
}

at::ScalarType run_dtype(TensorRole role, const WeightOptions& options) {
  return keeps_float32(role) ? at::kFloat : options.dtype;
}

// No copy when the tensor already has the run dtype and device and is contiguous: a safetensors
// tensor then stays a view of the file's private copy-on-write mapping, so the weights exist
// once (in the page cache) and an in-place op on them copies only the pages it writes, never
// changing the file. Otherwise one blocking copy, which has consumed the source when it returns
// (a CPU -> CUDA copy with a dtype change converts on the CPU first: one temporary of this
// tensor's size at most).
at::Tensor convert(const at::Tensor& t, TensorRole role, const WeightOptions& options) {
  return t.to(options.device, run_dtype(role, options)).contiguous();
}

// Seeds derived from (seed, tensor name): SplitMix64 over FNV-1a, stable across platforms and
// independent of a tensor's position in the spec.
uint64_t mix_seed(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t fnv1a(const std::string& text) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

uint64_t tensor_seed(uint64_t seed, const std::string& name) {
  return mix_seed(mix_seed(seed) ^ fnv1a(name));
}

// A fresh generator of the tensor's device (CPU: mt19937; CUDA: Philox), seeded with `seed`.
at::Generator device_generator(const at::Device& device, uint64_t seed) {
  if (device.is_cpu()) return at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Generator gen = at::globalContext()
                          .getAcceleratorHooksInterface(device.type())
                          .getNewGenerator(device.index());
  const std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_current_seed(seed);
  return gen;
}

// Turns unit-normal draws into the role's distribution, in place.
void scale_for_role(at::Tensor& value, const TensorSpec& t, RandomInit init) {
  const double last_dim = static_cast<double>(t.shape.back());  // a weight's fan-in
  switch (t.role) {
    case TensorRole::kWeight:
      // Scaled so activations keep unit variance through the stack. A division and a multiply
      // by the reciprocal round apart; each scheme keeps the numbers its seeds were chosen with.
      if (init == RandomInit::kSequentialCpu) {
        value.div_(std::sqrt(last_dim));
      } else {
        value.mul_(1.0 / std::sqrt(last_dim));
      }
      break;
    case TensorRole::kBias:
    case TensorRole::kNormBias:
      value.mul_(0.02);
      break;
    case TensorRole::kNormWeight:
      value.mul_(0.1).add_(1.0);
      break;
    case TensorRole::kEmbedding:
      if (init == RandomInit::kSequentialCpu) value.mul_(0.02);  // transformers' initialisation
      break;
    case TensorRole::kCodebook:
      break;
    case TensorRole::kFourier:
      // The official initialisation: randn * sqrt(F / 2).
      value.mul_(std::sqrt(0.5 * last_dim));
      break;
  }
}

// One random tensor of a kPerTensor spec, drawn in its run dtype on the run device and scaled
// in place: no float32 temporary and no conversion copy.
at::Tensor random_tensor(const TensorSpec& t, uint64_t seed, const WeightOptions& options) {
  at::Tensor value = at::empty(
      t.shape, at::TensorOptions().dtype(run_dtype(t.role, options)).device(options.device));
  // value.device() has the index resolved ("cuda" -> the current device).
  value.normal_(0.0, 1.0, device_generator(value.device(), tensor_seed(seed, t.name())));
  scale_for_role(value, t, RandomInit::kPerTensor);
  return value;
}

// Every tensor of a kSequentialCpu spec, from one CPU generator in spec order.
std::vector<at::Tensor> sequential_cpu_tensors(const CheckpointSpec& spec, uint64_t seed,
                                               const WeightOptions& options) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<at::Tensor> values;
  values.reserve(spec.tensors.size());
  for (const TensorSpec& t : spec.tensors) {
    at::Tensor value = at::empty(t.shape, at::TensorOptions().dtype(at::kFloat));
    value.normal_(0.0, 1.0, gen);
    scale_for_role(value, t, RandomInit::kSequentialCpu);
    values.push_back(convert(value, t.role, options));
  }
  return values;
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
  source.load = [file](const std::string& name) {
    file->prefetch(name);
    return file->tensor(name);
  };
  // A no-op for tensors kept as zero-copy views (SafetensorsFile checks that itself).
  source.release = [file](const std::string& name) { file->release_pages(name); };
  return source;
}

TensorMap resolve_checkpoint(const CheckpointSpec& spec, const TensorSource& source,
                             const WeightOptions& options) {
  std::vector<std::string> missing, misshapen, unexpected, disagreeing, nonfinite;
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
    at::Tensor converted;
    {
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
      converted = convert(first, t.role, options);
    }
    // NaN or infinite weights would run: every token 0, a mesh of garbage, exit 0.
    if (!at::isfinite(converted).all().item<bool>()) {
      const int64_t bad = converted.numel() - at::isfinite(converted).sum().item<int64_t>();
      nonfinite.push_back(present.front() + " (" + std::to_string(bad) + " of " +
                          std::to_string(converted.numel()) + " values)");
      continue;
    }
    // Every loaded temporary is gone: a copied tensor's source memory can go back now, so
    // loading onto a GPU needs host memory for one tensor at a time, not for the file.
    if (source.release) {
      for (const auto& name : present) source.release(name);
    }
    out[t.name()] = std::move(converted);
  }
  for (const auto& [name, shape] : source.shapes) {
    if (!claimed.count(name) && !ignored(spec, name)) unexpected.push_back(name);
  }
  if (!missing.empty() || !misshapen.empty() || !unexpected.empty() || !disagreeing.empty() ||
      !nonfinite.empty()) {
    std::string message = spec.what + " checkpoint " + source.description + " does not match " +
                          spec.config_source + ":";
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
    if (!nonfinite.empty()) {
      message += "\n  NaN or infinite values (" + std::to_string(nonfinite.size()) +
                 "): " + join_limited(nonfinite);
    }
    throw invalid_argument(message);
  }
  return out;
}

TensorMap random_checkpoint(const CheckpointSpec& spec, uint64_t seed,
                            const WeightOptions& options) {
  const size_t n = spec.tensors.size();
  std::vector<at::Tensor> values(n);
  if (spec.random_init == RandomInit::kSequentialCpu) {
    values = sequential_cpu_tensors(spec, seed, options);
  } else if (options.device.is_cpu()) {
    // The CPU generator is serial, so the parallelism is across tensors: every thread of
    // ATen's pool takes the next tensor, largest first, until none is left (ops inside a
    // parallel region run single-threaded). Each tensor's values depend on its own seed only.
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), size_t{0});
    const auto numel = [&](size_t i) {
      int64_t count = 1;
      for (const int64_t dim : spec.tensors[i].shape) count *= dim;
      return count;
    };
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return numel(a) > numel(b); });
    std::atomic<size_t> next{0};
    at::parallel_for(0, at::get_num_threads(), 1, [&](int64_t begin, int64_t end) {
      for (int64_t worker = begin; worker < end; ++worker) {
        for (size_t k = next++; k < n; k = next++) {
          values[order[k]] = random_tensor(spec.tensors[order[k]], seed, options);
        }
      }
    });
  } else {
    // On a GPU each tensor is one kernel launch; no host memory is involved.
    for (size_t i = 0; i < n; ++i) values[i] = random_tensor(spec.tensors[i], seed, options);
  }
  TensorMap out;
  for (size_t i = 0; i < n; ++i) out[spec.tensors[i].name()] = std::move(values[i]);
  return out;
}

WeightLookup::WeightLookup(const TensorMap& tensors, std::string what, std::string prefix)
    : tensors_(tensors), what_(std::move(what)), prefix_(std::move(prefix)) {}

const at::Tensor& WeightLookup::tensor(const std::string& name) const {
  const auto it = tensors_.find(prefix_ + name);
  if (it == tensors_.end()) throw internal_error(what_ + " weights lack " + prefix_ + name);
  return it->second;
}

Linear WeightLookup::linear(const std::string& prefix) const {
  const auto bias = tensors_.find(prefix_ + prefix + ".bias");
  return {tensor(prefix + ".weight"), bias == tensors_.end() ? at::Tensor() : bias->second};
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
    const auto start = std::chrono::steady_clock::now();
    ModelWeights weights{random_checkpoint(gpt_spec, seed, options),
                         random_checkpoint(shape_spec, seed + 1, options),
                         {}};
    spdlog::info("random weights generated in {:.0f} ms",
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
    return weights;
  }
  const TensorSource gpt_source = safetensors_source(gpt_path);
  ModelWeights weights{resolve_checkpoint(gpt_spec, gpt_source, options),
                       resolve_checkpoint(shape_spec, safetensors_source(shape_path), options),
                       {}};
  // The model names tensors canonically; the file may store one under an alias (or several).
  std::map<std::string, std::vector<std::string>> stored;
  for (const auto& t : gpt_spec.tensors) {
    for (const auto& name : t.names) {
      if (gpt_source.shapes.count(name)) stored[t.name()].push_back(name);
    }
  }
  weights.release_gpt = [release = gpt_source.release,
                         stored = std::move(stored)](const std::string& name) {
    const auto it = stored.find(name);
    if (it == stored.end()) return;
    for (const std::string& alias : it->second) release(alias);
  };
  return weights;
}

}  // namespace cube3d
