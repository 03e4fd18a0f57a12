// Tests of the CLIP text transformer against transformers' CLIPTextModel: the reference data
// (small random models and their last_hidden_state at all 77 positions) comes from
// tests/model/make_clip_fixture.py, which ctest runs first (fixture clip_fixture) and whose
// output folder it passes in CUBE3D_CLIP_FIXTURE_DIR. Also: config.json parsing, checkpoint
// validation, random weights, input validation and concurrent use.
#include "cube3d/model/clip_text_model.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "cube3d/core/constants.h"
#include "cube3d/core/error.h"
#include "cube3d/core/files.h"
#include "cube3d/model/weight_spec.h"
#include "cube3d/model/weights.h"
#include "cube3d/tensor_io/safetensors.h"
#include "expect_error.h"
#include "scratch_dir.h"

namespace cube3d {
namespace test_clip_text_model {

constexpr double kTolerance = 1e-4;

// Empty when the binary runs outside ctest (then the fixture tests skip).
std::string fixture_dir() {
  const char* const dir = std::getenv("CUBE3D_CLIP_FIXTURE_DIR");
  return dir ? dir : "";
}

using testing::contains;
using testing::ScratchDir;
using testing::thrown_error;

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kCPU, at::kDouble) - b.to(at::kCPU, at::kDouble)).abs().max().item<double>();
}

// Writes a config.json holding `json` and returns the parsed config.
ClipTextConfig config_from(const ScratchDir& scratch, const std::string& json) {
  write_file(scratch.path("config.json"), json);
  return ClipTextConfig::from_json_file(scratch.path("config.json"));
}

// The text model of the fixture (make_clip_fixture.py's TEXT).
ClipTextConfig fixture_config(const std::string& hidden_act = "quick_gelu") {
  ClipTextConfig config;
  config.hidden_size = 64;
  config.intermediate_size = 128;
  config.num_hidden_layers = 3;
  config.num_attention_heads = 4;
  config.hidden_act = hidden_act;
  return config;
}

void expect_same_config(const ClipTextConfig& a, const ClipTextConfig& b) {
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.num_hidden_layers, b.num_hidden_layers);
  EXPECT_EQ(a.num_attention_heads, b.num_attention_heads);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
  EXPECT_EQ(a.hidden_act, b.hidden_act);
  EXPECT_DOUBLE_EQ(a.layer_norm_eps, b.layer_norm_eps);
}

// Fixture tests: the reference inputs and transformers' outputs.
class ClipTextModelReference : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fixture_dir();
    if (dir_.empty()) {
      GTEST_SKIP() << "CUBE3D_CLIP_FIXTURE_DIR is not set: run through ctest, or run "
                      "tests/model/make_clip_fixture.py DIR and set it to DIR";
    }
    const SafetensorsFile file = SafetensorsFile::open(dir_ + "/reference.safetensors");
    input_ids_ = file.tensor("input_ids").clone();
    attention_mask_ = file.tensor("attention_mask").clone();
    expected_ = file.tensor("last_hidden_state").clone();
    expected_gelu_ = file.tensor("last_hidden_state_gelu").clone();
    ASSERT_EQ(input_ids_.sizes(), (at::IntArrayRef{12, 77}));
    ASSERT_EQ(expected_.sizes(), (at::IntArrayRef{12, 77, 64}));
  }

  std::string path(const std::string& relative) const { return dir_ + "/" + relative; }

  // Checks every position of every case, naming the worst one.
  void expect_matches(const at::Tensor& actual, const at::Tensor& expected) const {
    ASSERT_EQ(actual.sizes(), expected.sizes());
    EXPECT_EQ(actual.scalar_type(), at::kFloat);
    const at::Tensor error = (actual.to(at::kCPU) - expected).abs().amax(-1);  // [B, L]
    const int64_t worst = error.argmax().item<int64_t>();
    const int64_t row = worst / error.size(1);
    const int64_t position = worst % error.size(1);
    EXPECT_LT(error.max().item<double>(), kTolerance)
        << "worst: case " << row << ", position " << position << " (the case has "
        << attention_mask_[row].sum().item<int64_t>() << " real tokens)";
  }

  std::string dir_;
  at::Tensor input_ids_, attention_mask_, expected_, expected_gelu_;
};

TEST_F(ClipTextModelReference, MatchesTransformersAtAllPositionsPaddingIncluded) {
  const ClipTextModel model = ClipTextModel::load(path("text_model"), at::kCPU);
  expect_same_config(model.config(), fixture_config());
  expect_matches(model.forward(input_ids_, attention_mask_), expected_);
}

TEST_F(ClipTextModelReference, GeluModelMatchesTransformers) {
  const ClipTextModel model = ClipTextModel::load(path("text_model_gelu"), at::kCPU);
  EXPECT_EQ(model.config().hidden_act, "gelu");
  expect_matches(model.forward(input_ids_, attention_mask_), expected_gelu_);
}

TEST_F(ClipTextModelReference, FullClipFolderReadsTheTextModelAndIgnoresTheVisionTower) {
  // Make sure the fixture really holds what the test claims to ignore.
  const SafetensorsFile file = SafetensorsFile::open(path("full_clip/model.safetensors"));
  EXPECT_TRUE(file.contains("vision_model.embeddings.patch_embedding.weight"));
  EXPECT_TRUE(file.contains("visual_projection.weight"));
  EXPECT_TRUE(file.contains("logit_scale"));
  EXPECT_TRUE(file.contains("text_model.embeddings.token_embedding.weight"));

  const ClipTextModel model = ClipTextModel::load(path("full_clip"), at::kCPU);
  expect_same_config(model.config(), fixture_config());
  expect_matches(model.forward(input_ids_, attention_mask_), expected_);
}

TEST_F(ClipTextModelReference, LoadsASafetensorsFileWithItsConfigBeside) {
  const ClipTextModel model =
      ClipTextModel::load(path("full_clip/model.safetensors"), at::Device(at::kCPU));
  expect_matches(model.forward(input_ids_, attention_mask_), expected_);
}

TEST_F(ClipTextModelReference, AcceptsInt32IdsAndBoolMasks) {
  const ClipTextModel model = ClipTextModel::load(path("text_model"), at::kCPU);
  expect_matches(model.forward(input_ids_.to(at::kInt), attention_mask_.to(at::kBool)), expected_);
}

TEST_F(ClipTextModelReference, ShorterSequencesGiveThePrefixOfTheFullOne) {
  // Causal attention: position i depends on positions <= i only.
  const ClipTextModel model = ClipTextModel::load(path("text_model"), at::kCPU);
  for (const int64_t length : {1, 5, 40}) {
    SCOPED_TRACE(length);
    const at::Tensor out = model.forward(input_ids_.slice(1, 0, length).contiguous(),
                                         attention_mask_.slice(1, 0, length).contiguous());
    expect_matches(out, expected_.slice(1, 0, length));
  }
}

TEST_F(ClipTextModelReference, EachRowIsIndependentOfTheRestOfTheBatch) {
  const ClipTextModel model = ClipTextModel::load(path("text_model"), at::kCPU);
  for (const int64_t row : {0, 10}) {
    SCOPED_TRACE(row);
    const at::Tensor out =
        model.forward(input_ids_.slice(0, row, row + 1), attention_mask_.slice(0, row, row + 1));
    expect_matches(out, expected_.slice(0, row, row + 1));
  }
}

TEST_F(ClipTextModelReference, ConcurrentForwardCallsGiveIdenticalResults) {
  const ClipTextModel model = ClipTextModel::load(path("text_model"), at::kCPU);
  const at::Tensor baseline = model.forward(input_ids_, attention_mask_);
  constexpr int kThreads = 4;
  constexpr int kRepeats = 3;
  std::vector<at::Tensor> results(kThreads * kRepeats);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        for (int r = 0; r < kRepeats; ++r) {
          results[t * kRepeats + r] = model.forward(input_ids_, attention_mask_);
        }
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[t], "") << "thread " << t;
  for (const at::Tensor& result : results) {
    ASSERT_TRUE(result.defined());
    EXPECT_TRUE(at::equal(result, baseline)) << "max diff " << max_abs_diff(result, baseline);
  }
}

TEST_F(ClipTextModelReference, CudaMatchesTransformers) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  const ClipTextModel model = ClipTextModel::load(path("text_model"), at::kCUDA);
  EXPECT_TRUE(model.weights().token_embedding.is_cuda());
  const at::Tensor out = model.forward(input_ids_, attention_mask_);  // CPU inputs are fine
  EXPECT_TRUE(out.is_cuda());
  expect_matches(out, expected_);
  // Random weights are the same numbers on every device.
  const ClipTextModel cpu = ClipTextModel::random(fixture_config(), 5, at::kCPU);
  const ClipTextModel gpu = ClipTextModel::random(fixture_config(), 5, at::kCUDA);
  EXPECT_LT(max_abs_diff(cpu.forward(input_ids_, attention_mask_),
                         gpu.forward(input_ids_, attention_mask_)),
            kTolerance);
}

// --- checkpoint validation -----------------------------------------------------------------------

class ClipTextModelLoad : public ClipTextModelReference {
 protected:
  // Every tensor of the full CLIP fixture checkpoint (zero-copy; keeps the mapping alive).
  std::map<std::string, at::Tensor> full_clip_tensors() const {
    const SafetensorsFile file = SafetensorsFile::open(path("full_clip/model.safetensors"));
    std::map<std::string, at::Tensor> tensors;
    for (const std::string& name : file.names()) tensors[name] = file.tensor(name);
    return tensors;
  }
  // A model folder in `scratch` with these tensors and the full CLIP config.
  void write_folder(const ScratchDir& scratch, const std::map<std::string, at::Tensor>& tensors,
                    const std::string& config_json = "") const {
    write_safetensors(scratch.path("model.safetensors"), tensors);
    write_file(scratch.path("config.json"),
               config_json.empty() ? read_file(path("full_clip/config.json")) : config_json);
  }
  // Loading the full CLIP tensors under `config_json` is refused as INVALID_ARGUMENT; the message.
  std::string invalid_config_message(const ScratchDir& scratch,
                                     const std::string& config_json) const {
    const Error error = load_error(scratch, full_clip_tensors(), config_json);
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument) << error.what();
    return error.what();
  }
  // What loading that folder throws.
  Error load_error(const ScratchDir& scratch, const std::map<std::string, at::Tensor>& tensors,
                   const std::string& config_json = "") const {
    write_folder(scratch, tensors, config_json);
    return thrown_error([&] { ClipTextModel::load(scratch.dir(), at::kCPU); });
  }
  // The fixture's text model config.json with `from` (which it must hold) replaced by `to`.
  std::string config_with(const std::string& from, const std::string& to) const {
    std::string config = read_file(path("text_model/config.json"));
    const size_t at = config.find(from);
    EXPECT_NE(at, std::string::npos) << config;
    if (at != std::string::npos) config.replace(at, from.size(), to);
    return config;
  }
};

TEST_F(ClipTextModelLoad, ReportsEveryMissingAndMisshapenTensorNamingTheFile) {
  std::map<std::string, at::Tensor> tensors = full_clip_tensors();
  const std::string gone = "text_model.encoder.layers.1.mlp.fc2.bias";
  const std::string also_gone = "text_model.final_layer_norm.weight";
  const std::string transposed = "text_model.encoder.layers.2.mlp.fc1.weight";
  ASSERT_EQ(tensors.erase(gone), 1u);
  ASSERT_EQ(tensors.erase(also_gone), 1u);
  tensors[transposed] = tensors.at(transposed).t();
  const ScratchDir scratch("cube3d_clip_");
  const Error error = load_error(scratch, tensors);
  EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
  const std::string message = error.what();
  EXPECT_TRUE(contains(message, scratch.path("model.safetensors"))) << message;
  EXPECT_TRUE(contains(message, "missing (2)")) << message;
  EXPECT_TRUE(contains(message, gone + " [64]")) << message;
  EXPECT_TRUE(contains(message, also_gone)) << message;
  EXPECT_TRUE(contains(message, transposed + " is [64, 128], expected [128, 64]")) << message;
  EXPECT_FALSE(contains(message, "vision_model")) << message;
}

TEST_F(ClipTextModelLoad, ReportsTextLayersTheConfigDoesNotHave) {
  // A config with fewer layers than the checkpoint must not silently drop the rest.
  const ScratchDir scratch("cube3d_clip_");
  const std::string message = invalid_config_message(
      scratch, config_with("\"num_hidden_layers\": 3", "\"num_hidden_layers\": 2"));
  EXPECT_TRUE(contains(message, "unexpected (16)")) << message;
  EXPECT_TRUE(contains(message, "text_model.encoder.layers.2.mlp.fc1.weight")) << message;
}

TEST_F(ClipTextModelLoad, AMismatchNamesTheConfigTheShapesCameFrom) {
  const ScratchDir scratch("cube3d_clip_");
  const std::string message = invalid_config_message(
      scratch, config_with("\"num_hidden_layers\": 3", "\"num_hidden_layers\": 4"));
  EXPECT_TRUE(contains(message, "does not match " + scratch.path("config.json"))) << message;
  EXPECT_TRUE(contains(message, "text_model.encoder.layers.3.mlp.fc1.weight [128, 64]")) << message;
}

TEST_F(ClipTextModelLoad, AFileWithoutTextTensorsNamesTheFirstExpectedOnes) {
  std::map<std::string, at::Tensor> tensors;
  for (const auto& [name, tensor] : full_clip_tensors()) {
    if (name.rfind("text_model.", 0) != 0) tensors[name] = tensor;
  }
  const ScratchDir scratch("cube3d_clip_");
  const Error error = load_error(scratch, tensors);
  EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(error.what(), "text_model.embeddings.token_embedding.weight [49408, 64]"))
      << error.what();
}

TEST_F(ClipTextModelLoad, UnsupportedHiddenActNamesTheField) {
  const ScratchDir scratch("cube3d_clip_");
  const std::string message =
      invalid_config_message(scratch, config_with("\"quick_gelu\"", "\"relu\""));
  for (const std::string& part :
       {std::string("hidden_act"), std::string("relu"), scratch.path("config.json")}) {
    EXPECT_TRUE(contains(message, part)) << "no \"" << part << "\" in: " << message;
  }
}

TEST_F(ClipTextModelLoad, MissingFilesAreNotFound) {
  const ScratchDir scratch("cube3d_clip_");
  Error error = thrown_error([&] { ClipTextModel::load(scratch.path("nothing"), at::kCPU); });
  EXPECT_EQ(error.code(), ErrorCode::kNotFound);
  EXPECT_TRUE(contains(error.what(), scratch.path("nothing"))) << error.what();

  // An empty folder: no model.safetensors.
  error = thrown_error([&] { ClipTextModel::load(scratch.dir(), at::kCPU); });
  EXPECT_EQ(error.code(), ErrorCode::kNotFound);
  EXPECT_TRUE(contains(error.what(), "model.safetensors")) << error.what();

  // A safetensors file with no config.json beside it.
  write_safetensors(scratch.path("clip.safetensors"), full_clip_tensors());
  error = thrown_error([&] { ClipTextModel::load(scratch.path("clip.safetensors"), at::kCPU); });
  EXPECT_EQ(error.code(), ErrorCode::kNotFound);
  EXPECT_TRUE(contains(error.what(), scratch.path("config.json"))) << error.what();
}

// --- config.json ---------------------------------------------------------------------------------

TEST(ClipTextModelConfig, StructDefaultsAreVitL14sTextModel) {
  const ClipTextConfig config;
  EXPECT_EQ(config.vocab_size, 49408);
  EXPECT_EQ(config.hidden_size, 768);
  EXPECT_EQ(config.intermediate_size, 3072);
  EXPECT_EQ(config.num_hidden_layers, 12);
  EXPECT_EQ(config.num_attention_heads, 12);
  EXPECT_EQ(config.max_position_embeddings, 77);
  EXPECT_EQ(config.hidden_act, "quick_gelu");
  EXPECT_DOUBLE_EQ(config.layer_norm_eps, 1e-5);
  EXPECT_EQ(config.head_dim(), 64);
  EXPECT_NO_THROW(config.validate("defaults"));
}

TEST(ClipTextModelConfig, ReadsATextConfigAndTakesTransformersDefaultsForMissingKeys) {
  const ScratchDir scratch("cube3d_clip_");
  ClipTextConfig config = config_from(
      scratch, R"({"model_type": "clip_text_model", "hidden_size": 64, "num_attention_heads": 4,
                   "intermediate_size": 128, "num_hidden_layers": 2, "hidden_act": "gelu",
                   "layer_norm_eps": 1e-6, "vocab_size": 1000, "max_position_embeddings": 16})");
  expect_same_config(config, {.vocab_size = 1000,
                              .hidden_size = 64,
                              .intermediate_size = 128,
                              .num_hidden_layers = 2,
                              .num_attention_heads = 4,
                              .max_position_embeddings = 16,
                              .hidden_act = "gelu",
                              .layer_norm_eps = 1e-6});

  // transformers' CLIPTextConfig defaults (ViT-B/32's width), as transformers would load it.
  // The fields not named are this struct's defaults too.
  config = config_from(scratch, R"({"model_type": "clip_text_model"})");
  expect_same_config(config,
                     {.hidden_size = 512, .intermediate_size = 2048, .num_attention_heads = 8});
}

TEST(ClipTextModelConfig, FullClipConfigUsesTextConfigDictOverTextConfig) {
  const ScratchDir scratch("cube3d_clip_");
  ClipTextConfig config = config_from(scratch, R"({"model_type": "clip", "projection_dim": 768,
                   "text_config": {"hidden_size": 768, "intermediate_size": 3072,
                                   "num_attention_heads": 12, "num_hidden_layers": 12},
                   "vision_config": {"hidden_size": 1024, "num_attention_heads": 16}})");
  expect_same_config(config, ClipTextConfig{});

  // Like openai/clip-vit-large-patch14's file: text_config_dict wins, key by key and for the
  // keys it leaves out (transformers rebuilds the text config from it alone).
  config = config_from(scratch, R"({"model_type": "clip",
      "text_config": {"hidden_size": 512, "num_attention_heads": 8, "max_position_embeddings": 32},
      "text_config_dict": {"hidden_size": 768, "intermediate_size": 3072,
                           "num_attention_heads": 12, "num_hidden_layers": 12},
      "vision_config_dict": {"hidden_size": 1024}})");
  expect_same_config(config, ClipTextConfig{});

  // A CLIPConfig without a text config means the default text model.
  config = config_from(scratch, R"({"model_type": "clip"})");
  EXPECT_EQ(config.hidden_size, 512);
}

TEST(ClipTextModelConfig, BadValuesNameTheFileAndTheKey) {
  const ScratchDir scratch("cube3d_clip_");
  const std::string file = scratch.path("config.json");
  const auto message_for = [&](const std::string& json) {
    const Error error = thrown_error([&] { config_from(scratch, json); });
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument) << error.what();
    EXPECT_TRUE(contains(error.what(), file)) << error.what();
    return std::string(error.what());
  };
  EXPECT_TRUE(contains(message_for(R"({"hidden_size": 64, "num_attention_heads": 5})"),
                       "num_attention_heads"));
  EXPECT_TRUE(contains(message_for(R"({"model_type": "clip", "text_config": {"vocab_size": 0}})"),
                       "text_config.vocab_size"));
  EXPECT_TRUE(contains(message_for(R"({"num_hidden_layers": -1})"), "num_hidden_layers"));
  EXPECT_TRUE(contains(message_for(R"({"hidden_size": "768"})"), "hidden_size"));
  EXPECT_TRUE(contains(message_for(R"({"intermediate_size": 1.5})"), "intermediate_size"));
  EXPECT_TRUE(contains(message_for(R"({"hidden_act": "gelu_new"})"), "hidden_act"));
  EXPECT_TRUE(contains(message_for(R"({"hidden_act": 3})"), "hidden_act"));
  EXPECT_TRUE(contains(message_for(R"({"layer_norm_eps": 0})"), "layer_norm_eps"));
  EXPECT_TRUE(contains(message_for(R"({"max_position_embeddings": 99999999999})"), "max_position"));
  EXPECT_TRUE(contains(message_for(R"({"model_type": "clip_vision_model"})"), "model_type"));
  EXPECT_TRUE(contains(message_for(R"({"text_config": [1, 2]})"), "text_config"));
  EXPECT_TRUE(contains(message_for(R"({"hidden_size": )"), "invalid JSON"));
  EXPECT_TRUE(contains(message_for(R"([1, 2])"), "object"));

  const Error missing = thrown_error([&] { ClipTextConfig::from_json_file(file + ".nope"); });
  EXPECT_EQ(missing.code(), ErrorCode::kNotFound);
}

// --- random weights and inputs -------------------------------------------------------------------

at::Tensor clip_style_ids(int64_t batch, int64_t real_tokens, int64_t length = 77) {
  at::Tensor ids = at::full({batch, length}, int64_t{49407}, at::kLong);
  ids.select(1, 0).fill_(49406);
  ids.slice(1, 1, real_tokens - 1).copy_(at::arange(1, real_tokens - 1, at::kLong) * 97);
  return ids;
}

at::Tensor clip_style_mask(int64_t batch, int64_t real_tokens, int64_t length = 77) {
  at::Tensor mask = at::zeros({batch, length}, at::kLong);
  mask.slice(1, 0, real_tokens).fill_(1);
  return mask;
}

TEST(ClipTextModelRandom, IsDeterministicPerSeedAndHasTheRightShape) {
  ClipTextConfig config = fixture_config();
  config.num_hidden_layers = 2;
  const at::Tensor ids = clip_style_ids(3, 9);
  const at::Tensor mask = clip_style_mask(3, 9);

  const at::Tensor a = ClipTextModel::random(config, 42, at::kCPU).forward(ids, mask);
  const at::Tensor b = ClipTextModel::random(config, 42, at::kCPU).forward(ids, mask);
  const at::Tensor c = ClipTextModel::random(config, 43, at::kCPU).forward(ids, mask);
  EXPECT_EQ(a.sizes(), (at::IntArrayRef{3, 77, 64}));
  EXPECT_EQ(a.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::isfinite(a).all().item<bool>());
  EXPECT_TRUE(at::equal(a, b));
  EXPECT_GT(max_abs_diff(a, c), 1e-3);

  const ClipTextModel model = ClipTextModel::random(config, 42, at::kCPU);
  EXPECT_EQ(model.weights().layers.size(), 2u);
  EXPECT_EQ(model.weights().token_embedding.sizes(), (at::IntArrayRef{49408, 64}));
  EXPECT_EQ(model.weights().layers[0].qkv.weight.sizes(), (at::IntArrayRef{192, 64}));
  // Identical rows of a batch give identical outputs; the padding changes the output.
  EXPECT_TRUE(at::allclose(a[0], a[2]));
  const at::Tensor unpadded = model.forward(ids, at::ones_like(mask));
  EXPECT_GT(max_abs_diff(a.slice(1, 9), unpadded.slice(1, 9)), 1e-3);
  EXPECT_LT(max_abs_diff(a.slice(1, 0, 9), unpadded.slice(1, 0, 9)), 1e-6);
}

TEST(ClipTextModelRandom, AreTheSpecsRandomCheckpointWithQkvStacked) {
  // One weights machinery for every model: the CLIP spec drawn by random_checkpoint.
  ClipTextConfig config = fixture_config();
  config.num_hidden_layers = 1;
  EXPECT_EQ(config.max_position_embeddings, kClipContextLength);
  const ClipTextWeights w = ClipTextModel::random(config, 7, at::kCPU).weights();
  const TensorMap t = random_checkpoint(clip_text_checkpoint_spec(config, ""), 7, {});
  EXPECT_TRUE(at::equal(w.token_embedding, t.at("embeddings.token_embedding.weight")));
  EXPECT_TRUE(at::equal(w.position_embedding, t.at("embeddings.position_embedding.weight")));
  const std::string a = "encoder.layers.0.self_attn.";
  EXPECT_TRUE(at::equal(
      w.layers[0].qkv.weight,
      at::cat({t.at(a + "q_proj.weight"), t.at(a + "k_proj.weight"), t.at(a + "v_proj.weight")})));
  EXPECT_TRUE(at::equal(
      w.layers[0].qkv.bias,
      at::cat({t.at(a + "q_proj.bias"), t.at(a + "k_proj.bias"), t.at(a + "v_proj.bias")})));
  EXPECT_TRUE(at::equal(w.layers[0].fc2.weight, t.at("encoder.layers.0.mlp.fc2.weight")));
  EXPECT_TRUE(at::equal(w.final_ln_bias, t.at("final_layer_norm.bias")));
}

TEST(ClipTextModelRandom, RejectsBadConfigs) {
  ClipTextConfig config = fixture_config();
  config.hidden_act = "swish";
  Error error = thrown_error([&] { ClipTextModel::random(config, 1, at::kCPU); });
  EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(error.what(), "hidden_act")) << error.what();

  config = fixture_config();
  config.num_attention_heads = 3;
  error = thrown_error([&] { ClipTextModel::random(config, 1, at::kCPU); });
  EXPECT_TRUE(contains(error.what(), "num_attention_heads")) << error.what();
}

TEST(ClipTextModelRandom, ForwardRejectsBadInputs) {
  ClipTextConfig config = fixture_config();
  config.num_hidden_layers = 1;
  const ClipTextModel model = ClipTextModel::random(config, 3, at::kCPU);
  const at::Tensor ids = clip_style_ids(2, 5);
  const at::Tensor mask = clip_style_mask(2, 5);
  const auto expect_invalid = [&](const at::Tensor& i, const at::Tensor& m) {
    const Error error = thrown_error([&] { model.forward(i, m); });
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument) << error.what();
  };
  expect_invalid(ids.to(at::kFloat), mask);                             // dtype
  expect_invalid(ids[0], mask[0]);                                      // rank
  expect_invalid(ids, mask.slice(1, 0, 76));                            // shapes differ
  expect_invalid(clip_style_ids(2, 5, 78), clip_style_mask(2, 5, 78));  // longer than 77
  expect_invalid(ids.slice(1, 0, 0), mask.slice(1, 0, 0));              // empty
  expect_invalid(ids + 1, mask);                                        // id 49408 >= vocab
  expect_invalid(ids - 49406, mask);                                    // negative ids
  expect_invalid(ids, at::Tensor());                                    // no mask
}

}  // namespace test_clip_text_model
}  // namespace cube3d
