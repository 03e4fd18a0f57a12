// Tests of checkpoint validation and loading: the golden checkpoints resolve against their configs,
// every kind of mismatch is reported in one error, the shared Fourier embedder's aliases, the
// ignored encoder tensors, dtype conversion, memory (zero-copy float32 views of the file, copies
// of misaligned tensors, file pages handed back once copied), random weights (deterministic,
// parallel, in the run dtype, on the device; CLIP's one serial CPU stream), the lookup of
// tensors by name and the expected tensor names.
#include "cube3d/model/weights.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/core/model_config.h"
#include "cube3d/model/weight_spec.h"
#include "cube3d/tensor_io/safetensors.h"
#include "expect_error.h"
#include "scratch_dir.h"

namespace cube3d {
namespace test_weights {

// Plain POSIX instead of std::filesystem: the torch wheel's libtorch.so exports its own copies
// of std::filesystem functions, which interpose on libstdc++'s and crash (remove_all segfaults).

const std::string kEmbedder = "occupancy_decoder.embedder.weight";
const std::vector<std::string> kEmbedderAliases = {kEmbedder, "embedder.weight",
                                                   "encoder.embedder.weight"};

std::string golden_file(const std::string& model, const std::string& file) {
  return std::string(CUBE3D_TEST_DATA_DIR) + "/golden/" + model + "/" + file;
}

ModelConfig golden_config(const std::string& model) {
  return load_model_config(golden_file(model, "model.yaml"));
}

// Every tensor of a safetensors file, as zero-copy tensors (they keep the mapping alive).
TensorMap read_all_tensors(const std::string& path) {
  const SafetensorsFile file = SafetensorsFile::open(path);
  TensorMap tensors;
  for (const std::string& name : file.names()) tensors[name] = file.tensor(name);
  return tensors;
}

std::set<std::string> keys(const TensorMap& tensors) {
  std::set<std::string> out;
  for (const auto& [name, tensor] : tensors) out.insert(name);
  return out;
}

// A checkpoint held in memory, so alias and prefix cases need no files.
TensorSource memory_source(const TensorMap& tensors) {
  TensorSource source;
  source.description = "<in-memory test checkpoint>";
  for (const auto& [name, tensor] : tensors) {
    source.shapes[name] = tensor.sizes().vec();
  }
  source.load = [tensors](const std::string& name) { return tensors.at(name); };
  return source;
}

using testing::contains;
using testing::ScratchDir;
using testing::thrown_error;

// The line of a multi-line error message that mentions `part` ("" if none): lets a test check
// that a tensor's shapes are reported next to that tensor and not somewhere else.
std::string line_with(const std::string& message, const std::string& part) {
  size_t begin = 0;
  while (begin <= message.size()) {
    size_t end = message.find('\n', begin);
    if (end == std::string::npos) end = message.size();
    const std::string line = message.substr(begin, end - begin);
    if (contains(line, part)) return line;
    begin = end + 1;
  }
  return "";
}

// Every spec tensor is present under its canonical name with the spec shape and `dtype`
// (float32 for the norm/codebook/Fourier tensors whatever the dtype asked for).
void expect_matches_spec(const CheckpointSpec& spec, const TensorMap& tensors) {
  EXPECT_EQ(tensors.size(), spec.tensors.size());
  for (const TensorSpec& t : spec.tensors) {
    SCOPED_TRACE(t.name());
    const auto it = tensors.find(t.name());
    ASSERT_NE(it, tensors.end());
    EXPECT_EQ(it->second.sizes().vec(), t.shape);
    EXPECT_EQ(it->second.device().type(), at::kCPU);
    EXPECT_TRUE(it->second.is_contiguous());
  }
}

// Named explicitly (not through the spec's roles) so that a wrong role in the spec shows up.
bool stays_float32(const std::string& name) {
  const auto ends_with = [&](const std::string& suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends_with(".q_norm.weight") || ends_with(".k_norm.weight") ||
         name == "bottleneck.block.cb_weight" || name == "bottleneck.block.cb_bias" ||
         name == "bottleneck.block.norm.weight" || name == "bottleneck.block.codebook.weight" ||
         name == "occupancy_decoder.ln_f.weight" || name == "occupancy_decoder.ln_f.bias" ||
         name == kEmbedder;
}

class WeightsTest : public ::testing::Test {
 protected:
  std::string path(const std::string& file) const { return scratch_.path(file); }

  // The message of the INVALID_ARGUMENT error that resolving `tensors`, written to `file`, as the
  // GPT checkpoint of `config` throws.
  static std::string gpt_checkpoint_error(const ModelConfig& config, const TensorMap& tensors,
                                          const std::string& file) {
    write_safetensors(file, tensors);
    const Error e = thrown_error(
        [&] { resolve_checkpoint(gpt_checkpoint_spec(config.gpt), safetensors_source(file), {}); });
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.what();
  }

 private:
  ScratchDir scratch_{"cube3d_weights_"};
};

// --- the golden checkpoints ----------------------------------------------------------------------

TEST(WeightsGolden, BothGoldenCheckpointsResolveAgainstTheirConfigs) {
  for (const std::string model : {"tiny_v01", "tiny_v05"}) {
    SCOPED_TRACE(model);
    const ModelConfig config = golden_config(model);
    const std::string gpt_path = golden_file(model, "shape_gpt.safetensors");
    const std::string shape_path = golden_file(model, "shape_tokenizer.safetensors");
    const ModelWeights weights = load_model_weights(config, gpt_path, shape_path, {});

    expect_matches_spec(gpt_checkpoint_spec(config.gpt), weights.gpt);
    expect_matches_spec(shape_tokenizer_checkpoint_spec(config.shape), weights.shape);
    EXPECT_EQ(weights.gpt.count("bbox_proj.weight"), config.gpt.use_bbox ? 1u : 0u);
    ASSERT_EQ(weights.shape.count(kEmbedder), 1u);
    EXPECT_EQ(weights.shape.at(kEmbedder).sizes().vec(),
              (std::vector<int64_t>{3, config.shape.num_freqs}));

    // The default options keep the stored float32 values bit for bit.
    for (const auto& [file, loaded] :
         {std::pair{gpt_path, &weights.gpt}, std::pair{shape_path, &weights.shape}}) {
      const TensorMap stored = read_all_tensors(file);
      for (const auto& [name, tensor] : *loaded) {
        SCOPED_TRACE(name);
        EXPECT_EQ(tensor.scalar_type(), at::kFloat);
        ASSERT_EQ(stored.count(name), 1u);
        EXPECT_TRUE(at::equal(tensor, stored.at(name)));
      }
    }
  }
}

// --- one error listing every problem ------------------------------------------------------------

TEST_F(WeightsTest, ResolveReportsEveryProblemInOneError) {
  const ModelConfig config = golden_config("tiny_v01");
  TensorMap tensors = read_all_tensors(golden_file("tiny_v01", "shape_gpt.safetensors"));
  const std::string removed_1 = "lm_head.weight";
  const std::string removed_2 = "transformer.dual_blocks.1.attn.pre_x.c_v.bias";
  const std::string renamed_from = "transformer.single_blocks.0.mlp.up_proj.bias";
  const std::string renamed_to = "transformer.single_blocks.0.mlp.upp_proj.bias";
  const std::string reshaped = "transformer.dual_blocks.0.post_1.c_proj.weight";
  ASSERT_EQ(tensors.erase(removed_1), 1u);
  ASSERT_EQ(tensors.erase(removed_2), 1u);
  tensors[renamed_to] = tensors.at(renamed_from);
  ASSERT_EQ(tensors.erase(renamed_from), 1u);
  ASSERT_EQ(tensors.at(reshaped).sizes().vec(), (std::vector<int64_t>{64, 64}));
  tensors[reshaped] = tensors.at(reshaped).reshape({32, 128});
  const std::string file = path("broken_gpt.safetensors");
  const std::string message = gpt_checkpoint_error(config, tensors, file);
  EXPECT_TRUE(contains(message, file)) << message;
  // The renamed tensor is missing under its old name as well as unexpected under the new one.
  for (const std::string& name : {removed_1, removed_2, renamed_from, renamed_to, reshaped}) {
    EXPECT_TRUE(contains(message, name)) << "no '" << name << "' in: " << message;
  }
  EXPECT_TRUE(contains(line_with(message, renamed_to), "unexpected")) << message;
  EXPECT_TRUE(contains(line_with(message, removed_1), "missing")) << message;
  const std::string shape_line = line_with(message, reshaped);
  EXPECT_TRUE(contains(shape_line, "[32, 128]")) << "actual shape not reported: " << message;
  EXPECT_TRUE(contains(shape_line, "[64, 64]")) << "expected shape not reported: " << message;
}

TEST_F(WeightsTest, NanOrInfiniteWeightsAreRefusedNamingTheTensors) {
  // Accepted silently before: every token 0, a mesh written, exit 0.
  const ModelConfig config = golden_config("tiny_v01");
  TensorMap tensors = read_all_tensors(golden_file("tiny_v01", "shape_gpt.safetensors"));
  const std::string with_nan = "transformer.dual_blocks.0.post_1.c_proj.weight";
  const std::string with_inf = "lm_head.weight";
  tensors[with_nan] = tensors.at(with_nan).clone();
  tensors[with_nan].view(-1)[3] = std::numeric_limits<float>::quiet_NaN();
  tensors[with_inf] = tensors.at(with_inf).clone();
  tensors[with_inf].view(-1)[0] = std::numeric_limits<float>::infinity();
  tensors[with_inf].view(-1)[1] = -std::numeric_limits<float>::infinity();
  const std::string file = path("nan_gpt.safetensors");
  const std::string message = gpt_checkpoint_error(config, tensors, file);
  EXPECT_TRUE(contains(line_with(message, with_nan), "NaN or infinite")) << message;
  EXPECT_TRUE(contains(message, with_nan + " (1 of ")) << message;
  EXPECT_TRUE(contains(message, with_inf + " (2 of ")) << message;
}

TEST_F(WeightsTest, MissingFileIsNotFoundNamingThePath) {
  const ModelConfig config = golden_config("tiny_v01");
  const std::string missing = path("no_such.safetensors");
  const Error e = thrown_error([&] {
    load_model_weights(config, missing, golden_file("tiny_v01", "shape_tokenizer.safetensors"), {});
  });
  EXPECT_EQ(e.code(), ErrorCode::kNotFound) << e.what();
  EXPECT_TRUE(contains(e.what(), missing)) << e.what();
}

// --- the shared Fourier embedder ----------------------------------------------------------------

class WeightsEmbedderAliases : public ::testing::Test {
 protected:
  void SetUp() override {
    spec_ = shape_tokenizer_checkpoint_spec(golden_config("tiny_v01").shape);
    golden_ = read_all_tensors(golden_file("tiny_v01", "shape_tokenizer.safetensors"));
    for (const std::string& alias : kEmbedderAliases) ASSERT_EQ(golden_.count(alias), 1u);
    embedder_ = golden_.at(kEmbedder);
  }
  // The golden shape tokenizer with only `kept` of the three embedder names.
  TensorMap with_aliases(const std::vector<std::string>& kept) const {
    TensorMap tensors = golden_;
    for (const std::string& alias : kEmbedderAliases) tensors.erase(alias);
    for (const std::string& alias : kept) tensors[alias] = embedder_;
    return tensors;
  }

  CheckpointSpec spec_;
  TensorMap golden_;
  at::Tensor embedder_;
};

TEST_F(WeightsEmbedderAliases, AnyOneAliasLoads) {
  // save_model keeps a shared tensor under one of its names only; which one varies.
  for (const std::string& alias : kEmbedderAliases) {
    SCOPED_TRACE(alias);
    const TensorMap out = resolve_checkpoint(spec_, memory_source(with_aliases({alias})), {});
    ASSERT_EQ(out.count(kEmbedder), 1u);
    EXPECT_TRUE(at::equal(out.at(kEmbedder), embedder_));
    // Only the canonical name comes out.
    EXPECT_EQ(out.count("embedder.weight"), 0u);
    EXPECT_EQ(out.count("encoder.embedder.weight"), 0u);
  }
}

TEST_F(WeightsEmbedderAliases, NoAliasIsReportedMissing) {
  const Error e = thrown_error(
      [&] { resolve_checkpoint(spec_, memory_source(with_aliases({})), WeightOptions{}); });
  const std::string message = e.what();
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << message;
  EXPECT_TRUE(contains(line_with(message, kEmbedder), "missing")) << message;
}

TEST_F(WeightsEmbedderAliases, AliasesWithDifferentValuesAreReported) {
  TensorMap tensors = with_aliases({kEmbedder, "encoder.embedder.weight"});
  tensors["encoder.embedder.weight"] = embedder_ + 1.0;
  const Error e = thrown_error([&] { resolve_checkpoint(spec_, memory_source(tensors), {}); });
  const std::string message = e.what();
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << message;
  EXPECT_TRUE(contains(message, kEmbedder)) << message;
  EXPECT_TRUE(contains(message, "encoder.embedder.weight")) << message;
  // A disagreement, not any of the other problems.
  EXPECT_FALSE(contains(message, "missing")) << message;
  EXPECT_FALSE(contains(message, "unexpected")) << message;
  EXPECT_FALSE(contains(message, "misshapen")) << message;
}

TEST_F(WeightsEmbedderAliases, OneDisagreeingAliasAmongThreeIsNamed) {
  TensorMap tensors = with_aliases(kEmbedderAliases);
  tensors["embedder.weight"] = embedder_ * 2.0;
  const Error e = thrown_error([&] { resolve_checkpoint(spec_, memory_source(tensors), {}); });
  const std::string message = e.what();
  EXPECT_TRUE(contains(message, " embedder.weight")) << message;
  EXPECT_FALSE(contains(message, "missing")) << message;
}

TEST_F(WeightsEmbedderAliases, AnAliasWithTheWrongShapeIsMisshapen) {
  TensorMap tensors = with_aliases(kEmbedderAliases);
  tensors["embedder.weight"] = at::zeros({3, 9});
  const Error e = thrown_error([&] { resolve_checkpoint(spec_, memory_source(tensors), {}); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
  const std::string line = line_with(e.what(), "[3, 9]");
  EXPECT_TRUE(contains(line, "embedder.weight")) << e.what();
  EXPECT_TRUE(contains(line, "[3, 8]")) << e.what();
}

// --- ignored and unexpected tensors -------------------------------------------------------------

TEST(WeightsIgnored, EncoderAndBottleneckInputTensorsAreIgnored) {
  const CheckpointSpec spec = shape_tokenizer_checkpoint_spec(golden_config("tiny_v01").shape);
  const TensorMap golden = read_all_tensors(golden_file("tiny_v01", "shape_tokenizer.safetensors"));
  TensorMap tensors;
  for (const TensorSpec& t : spec.tensors) tensors[t.name()] = golden.at(t.name());
  // Shapes need not fit anything: these modules are never built.
  tensors["encoder.blocks.0.attn.c_qk.weight"] = at::zeros({5, 7});
  tensors["encoder.query"] = at::zeros({1, 2, 3});
  tensors["bottleneck.block.c_in.weight"] = at::zeros({8, 64});
  tensors["bottleneck.block.c_in.bias"] = at::zeros({8});
  tensors["bottleneck.block.c_x.weight"] = at::zeros({8, 64});
  tensors["bottleneck.block.c_x.bias"] = at::zeros({8});

  const TensorMap out = resolve_checkpoint(spec, memory_source(tensors), {});
  std::set<std::string> expected;
  for (const TensorSpec& t : spec.tensors) expected.insert(t.name());
  EXPECT_EQ(keys(out), expected);  // nothing of the ignored modules is loaded
}

TEST(WeightsIgnored, UnknownTensorsAreUnexpected) {
  const CheckpointSpec spec = shape_tokenizer_checkpoint_spec(golden_config("tiny_v01").shape);
  TensorMap tensors = read_all_tensors(golden_file("tiny_v01", "shape_tokenizer.safetensors"));
  tensors["decoder.extra.weight"] = at::zeros({4});
  // The prefixes are whole module names: c_inx is not c_in.
  tensors["bottleneck.block.c_inx.weight"] = at::zeros({4});
  const Error e = thrown_error([&] { resolve_checkpoint(spec, memory_source(tensors), {}); });
  const std::string message = e.what();
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << message;
  EXPECT_TRUE(contains(line_with(message, "decoder.extra.weight"), "unexpected")) << message;
  EXPECT_TRUE(contains(line_with(message, "bottleneck.block.c_inx.weight"), "unexpected"))
      << message;
  EXPECT_FALSE(contains(message, "missing")) << message;
}

TEST(WeightsIgnored, TheGptCheckpointIgnoresNothing) {
  const CheckpointSpec spec = gpt_checkpoint_spec(golden_config("tiny_v01").gpt);
  TensorMap tensors = read_all_tensors(golden_file("tiny_v01", "shape_gpt.safetensors"));
  tensors["encoder.blocks.0.weight"] = at::zeros({4});
  const Error e = thrown_error([&] { resolve_checkpoint(spec, memory_source(tensors), {}); });
  EXPECT_TRUE(contains(line_with(e.what(), "encoder.blocks.0.weight"), "unexpected")) << e.what();
}

// --- dtype conversion ----------------------------------------------------------------------------

void expect_bf16_layout(const TensorMap& tensors, const TensorMap* stored) {
  for (const auto& [name, tensor] : tensors) {
    SCOPED_TRACE(name);
    if (stays_float32(name)) {
      EXPECT_EQ(tensor.scalar_type(), at::kFloat);
      if (stored) {
        EXPECT_TRUE(at::equal(tensor, stored->at(name)));
      }
    } else {
      EXPECT_EQ(tensor.scalar_type(), at::kBFloat16);
      if (stored) {
        EXPECT_TRUE(at::equal(tensor, stored->at(name).to(at::kBFloat16)));
      }
    }
  }
}

TEST(WeightsDtype, Bf16KeepsNormsCodebookAndFourierInFloat32) {
  const ModelConfig config = golden_config("tiny_v05");
  const std::string gpt_path = golden_file("tiny_v05", "shape_gpt.safetensors");
  const std::string shape_path = golden_file("tiny_v05", "shape_tokenizer.safetensors");
  const ModelWeights weights =
      load_model_weights(config, gpt_path, shape_path, WeightOptions{at::kBFloat16});
  const TensorMap gpt_stored = read_all_tensors(gpt_path);
  const TensorMap shape_stored = read_all_tensors(shape_path);
  expect_bf16_layout(weights.gpt, &gpt_stored);
  expect_bf16_layout(weights.shape, &shape_stored);

  // Spot checks of the classification itself, so an empty map cannot pass.
  EXPECT_EQ(weights.gpt.at("transformer.dual_blocks.0.attn.pre_x.c_qk.weight").scalar_type(),
            at::kBFloat16);
  EXPECT_EQ(weights.gpt.at("transformer.dual_blocks.0.attn.pre_x.q_norm.weight").scalar_type(),
            at::kFloat);
  EXPECT_EQ(weights.gpt.at("transformer.wte.weight").scalar_type(), at::kBFloat16);
  EXPECT_EQ(weights.gpt.at("bbox_proj.bias").scalar_type(), at::kBFloat16);
  EXPECT_EQ(weights.shape.at("bottleneck.block.cb_bias").scalar_type(), at::kFloat);
  EXPECT_EQ(weights.shape.at("occupancy_decoder.ln_f.bias").scalar_type(), at::kFloat);
  EXPECT_EQ(weights.shape.at(kEmbedder).scalar_type(), at::kFloat);
  EXPECT_EQ(weights.shape.at("occupancy_decoder.c_head.weight").scalar_type(), at::kBFloat16);
}

TEST(WeightsDtype, RandomWeightsFollowTheSameDtypeRules) {
  const ModelConfig config = golden_config("tiny_v01");
  const WeightOptions bf16{at::kBFloat16};
  expect_bf16_layout(random_checkpoint(gpt_checkpoint_spec(config.gpt), 3, bf16), nullptr);
  expect_bf16_layout(random_checkpoint(shape_tokenizer_checkpoint_spec(config.shape), 3, bf16),
                     nullptr);
}

// --- memory: zero copy, converted copies, page release -------------------------------------------

// This process's mappings of `file` as [begin, end) address ranges with their resident bytes,
// from /proc/self/smaps.
struct FileMapping {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  int64_t resident = 0;
};

std::vector<FileMapping> mappings_of(const std::string& file) {
  char resolved[PATH_MAX];
  if (::realpath(file.c_str(), resolved) == nullptr) return {};
  const std::string suffix = std::string(" ") + resolved;
  std::vector<FileMapping> out;
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool ours = false;
  while (std::getline(smaps, line)) {
    const size_t space = line.find(' ');
    const size_t dash = line.find('-');
    if (dash != std::string::npos && dash < space) {  // "begin-end perms offset dev inode path"
      ours = line.size() >= suffix.size() &&
             line.compare(line.size() - suffix.size(), suffix.size(), suffix) == 0;
      if (ours) {
        out.push_back({std::stoull(line.substr(0, dash), nullptr, 16),
                       std::stoull(line.substr(dash + 1, space - dash - 1), nullptr, 16), 0});
      }
    } else if (ours && line.rfind("Rss:", 0) == 0) {
      out.back().resident += std::stoll(line.substr(4)) * 1024;  // "Rss:  123 kB"
    }
  }
  return out;
}

bool inside_a_mapping_of(const std::string& file, const at::Tensor& tensor) {
  const auto begin = reinterpret_cast<uintptr_t>(tensor.data_ptr());
  const uintptr_t end = begin + tensor.nbytes();
  for (const FileMapping& m : mappings_of(file)) {
    if (m.begin <= begin && end <= m.end) return true;
  }
  return false;
}

int64_t resident_bytes_of(const std::string& file) {
  int64_t bytes = 0;
  for (const FileMapping& m : mappings_of(file)) bytes += m.resident;
  return bytes;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A random float32 shape GPT checkpoint for `config`, written to `path`.
std::string write_random_gpt(const std::string& path, const ModelConfig& config) {
  write_safetensors(path, random_checkpoint(gpt_checkpoint_spec(config.gpt), 5, {}));
  return path;
}

// The tiny golden config, four times as wide: tensors of many pages each (about 25 MB in all), so
// the partial pages at their edges are a small part of the file.
ModelConfig wide_config() {
  ModelConfig config = golden_config("tiny_v01");
  config.gpt.n_embd = 256;
  return config;
}

// The tensors of a file as owned copies (no mapping of the file stays behind).
TensorMap copy_all_tensors(const std::string& path) {
  TensorMap tensors = read_all_tensors(path);
  for (auto& [name, tensor] : tensors) tensor = tensor.clone();
  return tensors;
}

TEST_F(WeightsTest, Float32CpuTensorsAreZeroCopyViewsOfTheFile) {
  const ModelConfig config = golden_config("tiny_v01");
  const std::string file = write_random_gpt(path("gpt.safetensors"), config);
  const std::string before = file_bytes(file);
  TensorMap out = resolve_checkpoint(gpt_checkpoint_spec(config.gpt), safetensors_source(file), {});
  ASSERT_FALSE(out.empty());

  // The data section's bytes, read independently of any mapping.
  const SafetensorsFile st = SafetensorsFile::open(file);
  uint64_t header = 0;
  std::memcpy(&header, before.data(), sizeof(header));
  for (const auto& [name, tensor] : out) {
    SCOPED_TRACE(name);
    EXPECT_EQ(tensor.scalar_type(), at::kFloat);
    EXPECT_TRUE(inside_a_mapping_of(file, tensor)) << "a copy, not a view of the file";
    const SafetensorsEntry& e = st.entry(name);
    ASSERT_EQ(static_cast<uint64_t>(tensor.nbytes()), e.end - e.begin);
    EXPECT_EQ(std::memcmp(tensor.data_ptr(), before.data() + 8 + header + e.begin, e.end - e.begin),
              0);
  }

  // The model may write its weights in place: the writes are private to the process.
  at::Tensor& lm_head = out.at("lm_head.weight");
  const at::Tensor original = lm_head.clone();
  lm_head.mul_(2.0).add_(1.0);
  EXPECT_TRUE(at::allclose(lm_head, original * 2.0 + 1.0));
  EXPECT_EQ(file_bytes(file), before) << "an in-place write reached the file";
  const TensorMap again =
      resolve_checkpoint(gpt_checkpoint_spec(config.gpt), safetensors_source(file), {});
  EXPECT_TRUE(at::equal(again.at("lm_head.weight"), original));
  // Both loads' mappings stay while their tensors do, and the first load keeps its write.
  EXPECT_TRUE(at::allclose(lm_head, original * 2.0 + 1.0));
}

TEST_F(WeightsTest, MisalignedTensorsAreCopiedWithTheirValues) {
  // A header whose end is 2 bytes past a multiple of 4 leaves no F32 in the file aligned.
  const at::Tensor w = at::randn({3, 5});
  const at::Tensor n = at::randn({5});
  nlohmann::json header;
  header["w"] = {{"dtype", "F32"}, {"shape", {3, 5}}, {"data_offsets", {0, 60}}};
  header["n"] = {{"dtype", "F32"}, {"shape", {5}}, {"data_offsets", {60, 80}}};
  std::string text = header.dump();
  while ((8 + text.size()) % 4 != 2) text += ' ';
  std::string bytes(8, '\0');
  const uint64_t size = text.size();
  std::memcpy(bytes.data(), &size, sizeof(size));
  bytes += text;
  bytes.append(static_cast<const char*>(w.data_ptr()), 60);
  bytes.append(static_cast<const char*>(n.data_ptr()), 20);
  const std::string file = path("misaligned.safetensors");
  std::ofstream(file, std::ios::binary) << bytes;

  const CheckpointSpec spec = [] {
    CheckpointSpec s;
    s.what = "test";
    s.tensors = {{{"w"}, {3, 5}, TensorRole::kWeight}, {{"n"}, {5}, TensorRole::kNormWeight}};
    return s;
  }();
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    const TensorMap out = resolve_checkpoint(spec, safetensors_source(file), {dtype});
    for (const auto& [name, tensor] : out) {
      SCOPED_TRACE(name);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(tensor.data_ptr()) % tensor.element_size(), 0u);
      EXPECT_FALSE(inside_a_mapping_of(file, tensor));
    }
    EXPECT_TRUE(at::equal(out.at("w"), w.to(dtype)));
    EXPECT_TRUE(at::equal(out.at("n"), n));  // a norm weight: float32 whatever the dtype
  }
}

TEST_F(WeightsTest, ConvertedTensorsHandTheirFilePagesBackAndKeepTheirValues) {
  // Converting to bfloat16 copies like loading onto a GPU does: once a tensor is copied, its
  // pages of the mapping go back to the kernel, so host memory does not grow to the file size.
  const ModelConfig config = wide_config();
  const std::string file = write_random_gpt(path("gpt.safetensors"), config);
  const CheckpointSpec spec = gpt_checkpoint_spec(config.gpt);
  const TensorMap stored = copy_all_tensors(file);
  const int64_t file_size = static_cast<int64_t>(file_bytes(file).size());
  ASSERT_GT(file_size, 16 << 20);
  ASSERT_EQ(resident_bytes_of(file), 0);  // no mapping of it is left

  const TensorSource source = safetensors_source(file);  // keeps its mapping open
  const TensorMap bf16 = resolve_checkpoint(spec, source, WeightOptions{at::kBFloat16});
  // What stays resident: the zero-copy float32 norm weights, partial pages at the edges of
  // each tensor, and the header.
  EXPECT_LT(resident_bytes_of(file), file_size / 8);
  expect_bf16_layout(bf16, &stored);  // the released pages took no values with them

  // Float32 tensors stay zero copy: their pages are never released, whatever is written.
  TensorMap f32 = resolve_checkpoint(spec, source, WeightOptions{});
  for (auto& [name, tensor] : f32) tensor.add_(1.0);
  EXPECT_GT(resident_bytes_of(file), file_size * 3 / 4);
  for (const auto& [name, tensor] : f32) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(at::equal(tensor, stored.at(name) + 1.0));
  }
}

TEST(WeightsRelease, EveryNameReadIsReleasedOnceItsTemporariesAreGone) {
  const CheckpointSpec spec = shape_tokenizer_checkpoint_spec(golden_config("tiny_v01").shape);
  const TensorMap golden = read_all_tensors(golden_file("tiny_v01", "shape_tokenizer.safetensors"));
  TensorSource source = memory_source(golden);
  std::multiset<std::string> released;
  source.release = [&](const std::string& name) {
    released.insert(name);
    // resolve_checkpoint holds no reference to a tensor it converted: only `golden` and the
    // source's copy of it do. (A float32 one is the result itself, zero copy.)
    if (!stays_float32(name)) {
      EXPECT_EQ(golden.at(name).use_count(), 2) << name;
    }
  };
  const TensorMap out = resolve_checkpoint(spec, source, WeightOptions{at::kBFloat16});
  std::multiset<std::string> expected;
  for (const TensorSpec& t : spec.tensors) expected.insert(t.names.begin(), t.names.end());
  EXPECT_EQ(released, expected);  // each once, the embedder's three aliases included
}

// --- random weights ------------------------------------------------------------------------------

bool all_equal(const TensorMap& a, const TensorMap& b) {
  if (keys(a) != keys(b)) return false;
  for (const auto& [name, tensor] : a) {
    if (!at::equal(tensor, b.at(name))) return false;
  }
  return true;
}

TEST(WeightsRandom, DeterministicPerSeedAndCoversTheSpec) {
  const ModelConfig config = golden_config("tiny_v05");
  for (const CheckpointSpec& spec :
       {gpt_checkpoint_spec(config.gpt), shape_tokenizer_checkpoint_spec(config.shape)}) {
    SCOPED_TRACE(spec.what);
    // Other draws from the global generator in between must not matter.
    const TensorMap a = random_checkpoint(spec, 42, {});
    at::manual_seed(123);
    (void)at::randn({100});
    const TensorMap b = random_checkpoint(spec, 42, {});
    const TensorMap c = random_checkpoint(spec, 43, {});

    expect_matches_spec(spec, a);
    EXPECT_TRUE(all_equal(a, b));
    for (const auto& [name, tensor] : a) {
      SCOPED_TRACE(name);
      EXPECT_EQ(tensor.scalar_type(), at::kFloat);
      EXPECT_TRUE(at::isfinite(tensor).all().item<bool>());
      EXPECT_FALSE(at::equal(tensor, c.at(name))) << "seed 43 gave the same values as 42";
    }
  }
}

// Restores ATen's intra-op thread count when a test changes it.
class ThreadCountGuard {
 public:
  ThreadCountGuard() : saved_(at::get_num_threads()) {}
  ~ThreadCountGuard() { at::set_num_threads(saved_); }
  ThreadCountGuard(const ThreadCountGuard&) = delete;
  ThreadCountGuard& operator=(const ThreadCountGuard&) = delete;

 private:
  int saved_;
};

TEST(WeightsRandom, IndependentOfThreadCountAndTensorOrder) {
  // Tensors are generated in parallel, in whatever order the threads take them: each draws
  // from its own generator, seeded from the seed and its name.
  const CheckpointSpec spec = gpt_checkpoint_spec(wide_config().gpt);
  const ThreadCountGuard guard;
  at::set_num_threads(1);
  const TensorMap one = random_checkpoint(spec, 42, {});
  at::set_num_threads(3);
  const TensorMap three = random_checkpoint(spec, 42, {});
  EXPECT_TRUE(all_equal(one, three));

  CheckpointSpec reversed = spec;
  std::reverse(reversed.tensors.begin(), reversed.tensors.end());
  reversed.tensors.resize(reversed.tensors.size() / 2);  // and fewer of them
  const TensorMap half = random_checkpoint(reversed, 42, {});
  ASSERT_FALSE(half.empty());
  for (const auto& [name, tensor] : half) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(at::equal(tensor, one.at(name)));
  }
  // Different tensors of the same shape get different values.
  EXPECT_FALSE(at::equal(one.at("transformer.dual_blocks.0.attn.pre_x.c_v.weight"),
                         one.at("transformer.dual_blocks.1.attn.pre_x.c_v.weight")));
}

TEST(WeightsRandom, DrawnInTheRunDtypeDeterministicallyWithTheRoleScales) {
  const ModelConfig config = wide_config();
  const CheckpointSpec spec = gpt_checkpoint_spec(config.gpt);
  const WeightOptions bf16{at::kBFloat16};
  const TensorMap a = random_checkpoint(spec, 9, bf16);
  EXPECT_TRUE(all_equal(a, random_checkpoint(spec, 9, bf16)));
  const TensorMap b = random_checkpoint(spec, 10, bf16);
  expect_bf16_layout(a, nullptr);
  for (const auto& [name, tensor] : a) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(at::isfinite(tensor).all().item<bool>());
    EXPECT_FALSE(at::equal(tensor, b.at(name)));
  }
  // Weights scaled by 1/sqrt(fan_in), biases by 0.02, norm weights around 1.
  const double d = static_cast<double>(config.gpt.n_embd);
  const auto stat = [&](const std::string& name, bool mean) {
    const at::Tensor t = a.at(name).to(at::kDouble);
    return (mean ? t.mean() : t.std()).item<double>();
  };
  EXPECT_NEAR(stat("lm_head.weight", false), 1.0 / std::sqrt(d), 0.05 / std::sqrt(d));
  EXPECT_NEAR(stat("transformer.dual_blocks.0.post_1.mlp.down_proj.weight", false),
              1.0 / std::sqrt(4 * d), 0.05 / std::sqrt(4 * d));
  EXPECT_NEAR(stat("transformer.dual_blocks.0.post_1.mlp.up_proj.bias", false), 0.02, 0.004);
  EXPECT_NEAR(stat("transformer.dual_blocks.0.attn.pre_x.q_norm.weight", true), 1.0, 0.05);
  EXPECT_NEAR(stat("transformer.wte.weight", false), 1.0, 0.05);
}

TEST(WeightsRandom, LoadModelWeightsGeneratesFromTheConfigSeed) {
  ModelConfig config = golden_config("tiny_v01");
  config.random_weights_seed = 7;
  const ModelWeights a = load_model_weights(config, "", "", {});
  const ModelWeights b = load_model_weights(config, "", "", {});
  expect_matches_spec(gpt_checkpoint_spec(config.gpt), a.gpt);
  expect_matches_spec(shape_tokenizer_checkpoint_spec(config.shape), a.shape);
  EXPECT_TRUE(all_equal(a.gpt, b.gpt));
  EXPECT_TRUE(all_equal(a.shape, b.shape));
  EXPECT_TRUE(all_equal(a.gpt, random_checkpoint(gpt_checkpoint_spec(config.gpt), 7, {})));

  config.random_weights_seed = 8;
  const ModelWeights c = load_model_weights(config, "", "", {});
  EXPECT_FALSE(at::equal(a.gpt.at("lm_head.weight"), c.gpt.at("lm_head.weight")));
  EXPECT_FALSE(at::equal(a.shape.at(kEmbedder), c.shape.at(kEmbedder)));
}

TEST(WeightsRandom, NoPathsAndNoSeedThrowsNamingTheConfig) {
  const ModelConfig config = golden_config("tiny_v01");
  ASSERT_FALSE(config.random_weights_seed.has_value());
  const Error e = thrown_error([&] { load_model_weights(config, "", "", {}); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
  EXPECT_TRUE(contains(e.what(), golden_file("tiny_v01", "model.yaml"))) << e.what();
  EXPECT_TRUE(contains(e.what(), "random_weights_seed")) << e.what();
}

TEST(WeightsRandom, OnlyOnePathThrows) {
  // A seed must not paper over a forgotten path.
  ModelConfig config = golden_config("tiny_v01");
  config.random_weights_seed = 7;
  const std::string gpt_path = golden_file("tiny_v01", "shape_gpt.safetensors");
  const std::string shape_path = golden_file("tiny_v01", "shape_tokenizer.safetensors");
  for (const auto& [gpt, shape] :
       {std::pair{gpt_path, std::string()}, std::pair{std::string(), shape_path}}) {
    SCOPED_TRACE("gpt='" + gpt + "' shape='" + shape + "'");
    const Error e = thrown_error([&] { load_model_weights(config, gpt, shape, {}); });
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
  }
}

TEST(WeightsRandom, SequentialCpuSpecsDrawInSpecOrderWhateverTheNamesAndThreads) {
  // CLIP's scheme: one CPU generator through the spec, so the values follow the position of a
  // tensor in the spec, not its name (a "text_model." prefix changes nothing).
  ClipTextConfig config;
  config.vocab_size = 300;
  config.hidden_size = 32;
  config.intermediate_size = 64;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 2;
  const CheckpointSpec spec = clip_text_checkpoint_spec(config, "");
  const CheckpointSpec prefixed = clip_text_checkpoint_spec(config, "text_model.");
  ASSERT_EQ(spec.random_init, RandomInit::kSequentialCpu);
  ASSERT_EQ(spec.tensors.size(), prefixed.tensors.size());
  const ThreadCountGuard guard;
  at::set_num_threads(1);
  const TensorMap a = random_checkpoint(spec, 42, {});
  at::set_num_threads(3);
  const TensorMap b = random_checkpoint(prefixed, 42, {});
  const TensorMap c = random_checkpoint(spec, 43, {});
  expect_matches_spec(spec, a);
  for (const TensorSpec& t : spec.tensors) {
    SCOPED_TRACE(t.name());
    EXPECT_EQ(a.at(t.name()).scalar_type(), at::kFloat);
    EXPECT_TRUE(at::equal(a.at(t.name()), b.at("text_model." + t.name())));
    EXPECT_FALSE(at::equal(a.at(t.name()), c.at(t.name())));
  }
  // transformers' embedding scale; weights, biases and norms as in the per-tensor scheme.
  const auto std_of = [&](const std::string& name) {
    return a.at(name).to(at::kDouble).std().item<double>();
  };
  EXPECT_NEAR(std_of("embeddings.token_embedding.weight"), 0.02, 0.002);
  EXPECT_NEAR(std_of("encoder.layers.0.mlp.fc2.weight"), 1.0 / 8.0, 0.02);
  EXPECT_NEAR(a.at("final_layer_norm.weight").mean().item<double>(), 1.0, 0.05);
}

// --- looking tensors up by name ------------------------------------------------------------------

TEST(WeightsLookup, FindsTensorsAndLinearsWithOrWithoutBias) {
  const TensorMap tensors = {{"p.a.weight", at::ones({2, 3})},
                             {"p.a.bias", at::zeros({2})},
                             {"p.b.weight", at::ones({4, 2})}};
  const WeightLookup lookup(tensors, "test model", "p.");
  EXPECT_TRUE(lookup.tensor("a.weight").is_same(tensors.at("p.a.weight")));
  const Linear a = lookup.linear("a");
  EXPECT_TRUE(a.weight.is_same(tensors.at("p.a.weight")));
  EXPECT_TRUE(a.bias.is_same(tensors.at("p.a.bias")));
  const Linear b = lookup.linear("b");
  EXPECT_TRUE(b.weight.is_same(tensors.at("p.b.weight")));
  EXPECT_FALSE(b.bias.defined());
}

TEST(WeightsLookup, AMissingNameIsAnInternalErrorNamingTheModelAndTheTensor) {
  // The map passed its spec, so only a spec and a model that disagree can get here.
  const TensorMap tensors = {{"a.bias", at::zeros({2})}};
  const WeightLookup lookup(tensors, "test model");
  for (const std::function<void()>& f : std::vector<std::function<void()>>{
           [&] { lookup.tensor("c.weight"); }, [&] { lookup.linear("a"); }}) {
    const Error e = thrown_error(f);
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
    EXPECT_TRUE(contains(e.what(), "test model")) << e.what();
    EXPECT_TRUE(contains(e.what(), ".weight")) << e.what();
  }
}

// --- on a GPU (skipped without one) -------------------------------------------------------------

TEST_F(WeightsTest, CudaLoadCopiesEachTensorAndHandsItsHostPagesBack) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  const ModelConfig config = wide_config();
  const std::string file = write_random_gpt(path("gpt.safetensors"), config);
  const CheckpointSpec spec = gpt_checkpoint_spec(config.gpt);
  const TensorMap stored = copy_all_tensors(file);
  const int64_t file_size = static_cast<int64_t>(file_bytes(file).size());
  const TensorSource source = safetensors_source(file);  // keeps its mapping open
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    const TensorMap out = resolve_checkpoint(spec, source, WeightOptions{dtype, at::kCUDA});
    // Every tensor, float32 norms included, was copied to the device and its pages released.
    EXPECT_LT(resident_bytes_of(file), file_size / 16);
    for (const auto& [name, tensor] : out) {
      SCOPED_TRACE(name);
      EXPECT_TRUE(tensor.is_cuda());
      const at::ScalarType expected = stays_float32(name) ? at::kFloat : dtype;
      EXPECT_EQ(tensor.scalar_type(), expected);
      EXPECT_TRUE(at::equal(tensor.cpu(), stored.at(name).to(expected)));
    }
  }
}

TEST(WeightsCuda, RandomWeightsAreDrawnOnTheDeviceDeterministically) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  const CheckpointSpec spec = gpt_checkpoint_spec(wide_config().gpt);
  const WeightOptions cuda{at::kBFloat16, at::kCUDA};
  const TensorMap a = random_checkpoint(spec, 42, cuda);
  const TensorMap b = random_checkpoint(spec, 42, cuda);
  const TensorMap c = random_checkpoint(spec, 43, cuda);
  expect_bf16_layout(a, nullptr);
  for (const auto& [name, tensor] : a) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(tensor.is_cuda());
    EXPECT_TRUE(at::isfinite(tensor).all().item<bool>());
    EXPECT_TRUE(at::equal(tensor, b.at(name)));
    EXPECT_FALSE(at::equal(tensor, c.at(name)));
  }
}

// --- the spec against the golden files -----------------------------------------------------------

std::set<std::string> stored_names(const std::string& path) {
  const std::vector<std::string> names = SafetensorsFile::open(path).names();
  return {names.begin(), names.end()};
}

std::set<std::string> all_spec_names(const CheckpointSpec& spec) {
  std::set<std::string> names;
  for (const TensorSpec& t : spec.tensors) names.insert(t.names.begin(), t.names.end());
  return names;
}

TEST(WeightsSpec, GptSpecNamesEqualTheGoldenCheckpoints) {
  for (const std::string model : {"tiny_v01", "tiny_v05"}) {
    SCOPED_TRACE(model);
    const CheckpointSpec spec = gpt_checkpoint_spec(golden_config(model).gpt);
    const std::set<std::string> names = all_spec_names(spec);
    EXPECT_EQ(names.size(), spec.tensors.size()) << "duplicate or aliased GPT tensor names";
    EXPECT_EQ(names, stored_names(golden_file(model, "shape_gpt.safetensors")));
    EXPECT_EQ(names.count("bbox_proj.weight"), model == "tiny_v05" ? 1u : 0u);
    EXPECT_EQ(names.count("bbox_proj.bias"), model == "tiny_v05" ? 1u : 0u);
  }
}

TEST(WeightsSpec, ShapeTokenizerSpecPlusIgnoredPrefixesCoverTheGoldenCheckpoints) {
  for (const std::string model : {"tiny_v01", "tiny_v05"}) {
    SCOPED_TRACE(model);
    const CheckpointSpec spec = shape_tokenizer_checkpoint_spec(golden_config(model).shape);
    const std::set<std::string> spec_names = all_spec_names(spec);
    const std::set<std::string> stored =
        stored_names(golden_file(model, "shape_tokenizer.safetensors"));
    std::set<std::string> covered;  // stored names the spec or a prefix accounts for
    std::map<std::string, int> prefix_hits;
    for (const std::string& name : stored) {
      bool ignored = false;
      for (const std::string& prefix : spec.ignored_prefixes) {
        if (name.rfind(prefix, 0) == 0) {
          ignored = true;
          ++prefix_hits[prefix];
        }
      }
      if (spec_names.count(name) || ignored) {
        covered.insert(name);
      } else {
        ADD_FAILURE() << "golden tensor not covered by the spec: " << name;
      }
    }
    EXPECT_EQ(covered, stored);
    // The golden file stores every alias, so every spec name is in it.
    for (const std::string& name : spec_names) {
      EXPECT_EQ(stored.count(name), 1u) << "spec tensor not in the golden file: " << name;
    }
    // Every ignored prefix is needed, and the three-name embedder is the only aliased tensor.
    for (const std::string& prefix : spec.ignored_prefixes) {
      EXPECT_GT(prefix_hits[prefix], 0) << "prefix matches nothing: " << prefix;
    }
    EXPECT_EQ(spec_names.size(), spec.tensors.size() + 2);
  }
}

TEST(WeightsSpec, LastDualBlockHasConditionKeysOnlyAndNoPost2) {
  const GptConfig gpt = golden_config("tiny_v01").gpt;
  ASSERT_EQ(gpt.n_layer, 3);
  const std::set<std::string> names = all_spec_names(gpt_checkpoint_spec(gpt));
  const std::string last = "transformer.dual_blocks.2.";
  EXPECT_EQ(names.count(last + "attn.pre_c.c_k.weight"), 1u);
  EXPECT_EQ(names.count(last + "attn.pre_c.c_k.bias"), 1u);
  EXPECT_EQ(names.count(last + "attn.pre_c.c_qk.weight"), 0u);
  EXPECT_EQ(names.count(last + "attn.pre_c.q_norm.weight"), 0u);
  EXPECT_EQ(names.count(last + "attn.pre_c.k_norm.weight"), 1u);
  EXPECT_EQ(names.count(last + "post_1.c_proj.weight"), 1u);
  for (const std::string& name : names) {
    EXPECT_FALSE(name.rfind(last + "post_2.", 0) == 0) << name;
  }
  // The other dual blocks have both streams in full.
  const std::string first = "transformer.dual_blocks.0.";
  EXPECT_EQ(names.count(first + "attn.pre_c.c_qk.weight"), 1u);
  EXPECT_EQ(names.count(first + "attn.pre_c.c_k.weight"), 0u);
  EXPECT_EQ(names.count(first + "post_2.mlp.down_proj.weight"), 1u);
}

}  // namespace test_weights
}  // namespace cube3d
