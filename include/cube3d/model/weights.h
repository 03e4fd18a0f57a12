// Checkpoint loading for every model (shape GPT, shape tokenizer, CLIP text encoder): checks a
// checkpoint's tensors against the model's CheckpointSpec (reporting every missing, unexpected
// and misshapen tensor at once), converts them to the run dtype and device, or generates random
// weights from a seed for the same spec; WeightLookup then hands them to the model by name.
//
// Memory: the weights are held once. A tensor already in the run dtype on the CPU is not copied
// (a safetensors file's tensors stay zero-copy views of its private copy-on-write mapping);
// any other is converted tensor by tensor, and a file's pages of each tensor are handed back to
// the kernel as soon as it has been copied, so loading onto a GPU keeps host memory bounded.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cube3d/core/model_config.h"
#include "cube3d/model/layers.h"
#include "cube3d/model/weight_spec.h"

namespace cube3d {

// Canonical tensor name -> tensor, ready for the model.
using TensorMap = std::map<std::string, at::Tensor>;

struct WeightOptions {
  at::ScalarType dtype = at::kFloat;  // matmul weights; norm parameters always stay float32
  at::Device device = at::kCPU;
};

// What a checkpoint offers: every stored name with its shape, and a loader for one name.
struct TensorSource {
  std::string description;  // e.g. the file path, for messages
  std::map<std::string, std::vector<int64_t>> shapes;
  // The stored tensor; it may share memory with the source (resolve_checkpoint keeps it
  // as-is when it already has the run dtype and device).
  std::function<at::Tensor(const std::string&)> load;
  // Optional: called once for each name resolve_checkpoint has read, after it dropped its own
  // references to what load() returned. The source may then free its copy, but must keep
  // whatever tensors still handed out use (the safetensors source drops the file pages of
  // copied tensors and keeps those of zero-copy ones).
  std::function<void(const std::string&)> release;
};

TensorSource safetensors_source(const std::string& path);

// Throws invalid_argument listing all problems; a shared tensor stored under several aliases
// must hold the same values under each. Results already in the run dtype and device are the
// loaded tensors themselves (zero copy), the others are converted copies.
TensorMap resolve_checkpoint(const CheckpointSpec& spec, const TensorSource& source,
                             const WeightOptions& options);

// Random weights for `spec`, deterministic in `seed`, drawn as spec.random_init says. For the
// demo model, the tests and the bench.
// - kPerTensor: generated in the run dtype directly on options.device; each tensor has its own
//   generator, seeded from `seed` and the tensor's name, so the CPU generates tensors in
//   parallel (at::parallel_for threads) and the values do not depend on the order or the thread
//   count. A CUDA device draws with its own generator (Philox), so its values differ from the
//   CPU's (and may differ between GPU models, whose launch layouts differ).
// - kSequentialCpu: one CPU generator through the spec in order, then converted: the same
//   values on every device.
TensorMap random_checkpoint(const CheckpointSpec& spec, uint64_t seed,
                            const WeightOptions& options);

// A model's parameters out of a resolved TensorMap, by state_dict name, for building its weight
// structs. The map passed the model's spec, so a name it lacks is a bug between the spec and
// the model, not a bad file: internal_error naming the model and the tensor.
class WeightLookup {
 public:
  // `prefix` goes before every name asked for (a CLIP checkpoint's "text_model.").
  WeightLookup(const TensorMap& tensors, std::string what, std::string prefix = "");

  const at::Tensor& tensor(const std::string& name) const;
  // `prefix`.weight, with `prefix`.bias when the layer has one.
  Linear linear(const std::string& prefix) const;

 private:
  const TensorMap& tensors_;
  std::string what_;  // "shape GPT", for messages
  std::string prefix_;
};

struct ModelWeights {
  TensorMap gpt;
  TensorMap shape;
  // Hands a shape GPT tensor's checkpoint pages back once nothing uses it any more (the
  // safetensors source's release; empty for random weights): GptWeights::from_tensors calls it
  // for the tensors it packed into others, so that they are not held twice.
  std::function<void(const std::string&)> release_gpt;
};

// Loads both checkpoints (or generates them when the paths are empty and the config has
// random_weights_seed). Throws invalid_argument / not_found naming the file.
ModelWeights load_model_weights(const ModelConfig& config, const std::string& gpt_path,
                                const std::string& shape_path, const WeightOptions& options);

}  // namespace cube3d
