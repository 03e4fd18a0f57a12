// Loads one golden folder (tests/golden/<name>): the official config, checkpoints, inputs and
// the official implementation's outputs, plus our model built from them. Shared by the model
// and engine golden tests.
#pragma once

#include <ATen/ATen.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include "cube3d/core/model_config.h"
#include "cube3d/model/shape_decoder.h"
#include "cube3d/model/shape_gpt.h"
#include "cube3d/model/weights.h"
#include "cube3d/tensor_io/safetensors.h"

namespace cube3d::testing {

// The build bakes in this checkout's paths; the GPU check runs the tests from a copy of the
// repository elsewhere, so the environment may point at the copy (scripts/gpu_check.sh).
inline std::string env_or(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}
inline std::string test_data_dir() { return env_or("CUBE3D_TEST_DATA_DIR", CUBE3D_TEST_DATA_DIR); }
inline std::string source_dir() { return env_or("CUBE3D_SOURCE_DIR", CUBE3D_SOURCE_DIR); }

inline std::string golden_dir(const std::string& name) {
  return test_data_dir() + "/golden/" + name;
}

inline std::map<std::string, at::Tensor> read_all(const std::string& path) {
  const SafetensorsFile file = SafetensorsFile::open(path);
  std::map<std::string, at::Tensor> out;
  for (const auto& name : file.names()) out[name] = file.tensor(name).clone();
  return out;
}

struct GoldenModel {
  std::string dir;
  ModelConfig config;
  std::map<std::string, at::Tensor> inputs;
  std::map<std::string, at::Tensor> expected;
  std::unique_ptr<ShapeDecoder> decoder;
  std::unique_ptr<ShapeGpt> gpt;

  int64_t tokens() const { return config.shape.num_encoder_latents; }
  int64_t codes() const { return config.gpt.shape_model_vocab_size; }
};

inline GoldenModel load_golden(const std::string& name) {
  GoldenModel g;
  g.dir = golden_dir(name);
  g.config = load_model_config(g.dir + "/model.yaml");
  g.inputs = read_all(g.dir + "/inputs.safetensors");
  g.expected = read_all(g.dir + "/expected.safetensors");
  const ModelWeights weights =
      load_model_weights(g.config, g.dir + "/shape_gpt.safetensors",
                         g.dir + "/shape_tokenizer.safetensors", WeightOptions{});
  g.decoder = std::make_unique<ShapeDecoder>(
      g.config.shape, ShapeDecoderWeights::from_tensors(g.config.shape, weights.shape));
  g.gpt = std::make_unique<ShapeGpt>(
      g.config.gpt,
      GptWeights::from_tensors(g.config.gpt, weights.gpt, g.decoder->normalized_codebook()),
      g.tokens() + 1);
  return g;
}

inline double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

}  // namespace cube3d::testing
