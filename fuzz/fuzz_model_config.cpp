// Fuzzes the model config reader (parse_model_config): any YAML text must either load as a
// config that passes its own validation or be refused with a cube3d::Error; never a crash, a
// hang or unbounded memory (yaml-cpp 0.7.0's endless documents, see yaml_reader.cpp).
#include <cstddef>
#include <cstdint>
#include <string>

#include "cube3d/core/model_config.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  cube3d::fuzz::refusals_ok([&] {
    const cube3d::ModelConfig config = cube3d::parse_model_config(text, "fuzz-model.yaml");
    // What the loaders rely on after loading: validation passes again, and the derived sizes
    // are computable (no division by zero; UBSan checks the arithmetic).
    cube3d::validate_model_config(config);
    CUBE3D_FUZZ_CHECK(config.gpt.head_dim() > 0 && config.shape.head_dim() > 0,
                      "a loaded model config has a head dimension of zero");
    CUBE3D_FUZZ_CHECK(config.gpt.vocab_size() > config.gpt.shape_model_vocab_size,
                      "the GPT vocabulary has no room for BOS, EOS and PAD");
    (void)config.shape.fourier_dim();
    (void)config.cond_len();
  });
  return 0;
}
