// The projections packed at load (issue 38): pack_linears, and what GptWeights::from_tensors
// packs ([c_qk ; c_v], [c_k ; c_v], [gate ; up], the joint q/k norm weights), drops from its map
// and hands to the release callback. That the packed model decodes the official tokens is the
// golden tests' part (tests/model/test_golden.cpp, tests/engine/test_golden_generation.cpp).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/core/model_config.h"
#include "cube3d/model/layers.h"
#include "cube3d/model/shape_gpt.h"
#include "cube3d/model/weights.h"

namespace cube3d {
namespace test_packed_projections {

// tests/golden/tiny_v01 (CUBE3D_TEST_DATA_DIR may point at a copy of the tests, as in
// tests/golden_model.h, which this file does not include: its cube3d::testing namespace would
// hide ::testing from the other files of a unity batch).
std::string tiny_v01(const std::string& file) {
  const char* dir = std::getenv("CUBE3D_TEST_DATA_DIR");
  return std::string(dir != nullptr && *dir != '\0' ? dir : CUBE3D_TEST_DATA_DIR) +
         "/golden/tiny_v01/" + file;
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

bool same_storage(const at::Tensor& a, const at::Tensor& b) {
  return a.storage().unsafeGetStorageImpl() == b.storage().unsafeGetStorageImpl();
}

TEST(PackLinears, StacksWeightsAndBiasesAndRebindsThePartsToViews) {
  at::manual_seed(5);
  Linear qk{at::randn({8, 4}), at::Tensor()};  // no bias, like c_qk
  Linear v{at::randn({4, 4}), at::randn({4})};
  const Linear qk_before{qk.weight.clone(), at::Tensor()};
  const Linear v_before{v.weight.clone(), v.bias.clone()};
  const Linear packed = pack_linears({&qk, &v}, "test");
  ASSERT_EQ(packed.weight.sizes().vec(), (std::vector<int64_t>{12, 4}));
  ASSERT_TRUE(packed.bias.defined());
  EXPECT_TRUE(at::equal(packed.weight, at::cat({qk_before.weight, v_before.weight})));
  EXPECT_TRUE(at::equal(packed.bias, at::cat({at::zeros({8}), v_before.bias})));
  // The parts are views of the packed tensors, with their own values and bias (or none).
  EXPECT_TRUE(same_storage(qk.weight, packed.weight));
  EXPECT_TRUE(same_storage(v.weight, packed.weight));
  EXPECT_TRUE(same_storage(v.bias, packed.bias));
  EXPECT_FALSE(qk.bias.defined());
  EXPECT_TRUE(at::equal(qk.weight, qk_before.weight));
  EXPECT_TRUE(at::equal(v.weight, v_before.weight));
  EXPECT_TRUE(at::equal(v.bias, v_before.bias));
  // One GEMM computes both outputs.
  const at::Tensor x = at::randn({2, 3, 4});
  const at::Tensor both = packed(x);
  EXPECT_LE(max_abs_diff(both.narrow(-1, 0, 8), qk_before(x)), 1e-6);
  EXPECT_LE(max_abs_diff(both.narrow(-1, 8, 4), v_before(x)), 1e-6);
}

TEST(PackLinears, NoBiasWhenNoPartHasOne) {
  Linear gate{at::ones({3, 2}), at::Tensor()};
  Linear up{at::ones({3, 2}), at::Tensor()};
  const Linear packed = pack_linears({&gate, &up}, "test");
  EXPECT_FALSE(packed.bias.defined());
  EXPECT_EQ(packed.out_features(), 6);
}

TEST(PackLinears, PartsThatDisagreeThrowNamingThem) {
  Linear a{at::ones({3, 2}), at::Tensor()};
  Linear wider{at::ones({3, 5}), at::Tensor()};
  Linear doubles{at::ones({3, 2}, at::kDouble), at::Tensor()};
  for (Linear* other : {&wider, &doubles}) {
    try {
      pack_linears({&a, other}, "block 7 attention");
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("block 7 attention"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(pack_linears({}, "nothing"), Error);
}

struct Loaded {
  ModelConfig config;
  GptWeights weights;
  std::vector<std::string> released;
};

// The tiny v0.1 golden checkpoint (3 dual blocks, 1 single block, D 64, 4 heads), packed.
Loaded load_tiny() {
  Loaded l;
  l.config = load_model_config(tiny_v01("model.yaml"));
  ModelWeights w = load_model_weights(l.config, tiny_v01("shape_gpt.safetensors"),
                                      tiny_v01("shape_tokenizer.safetensors"), WeightOptions{});
  EXPECT_TRUE(static_cast<bool>(w.release_gpt));  // from a file: its pages can go back
  const at::Tensor codebook =
      at::randn({l.config.gpt.shape_model_vocab_size, l.config.gpt.shape_model_embed_dim});
  l.weights = GptWeights::from_tensors(l.config.gpt, std::move(w.gpt), codebook,
                                       [&](const std::string& name) {
                                         l.released.push_back(name);
                                         w.release_gpt(name);  // the file's own, for real
                                       });
  return l;
}

TEST(PackedProjections, EveryStreamHasOneProjectionAndEveryMlpOneGateUp) {
  const Loaded l = load_tiny();
  const int64_t d = l.config.gpt.n_embd, heads = l.config.gpt.n_head, hd = d / heads;
  const auto check_stream = [&](const PreAttentionWeights& s, bool query) {
    ASSERT_EQ(s.qkv.out_features(), query ? 3 * d : 2 * d);
    EXPECT_EQ(s.qkv.in_features(), d);
    ASSERT_TRUE(s.qkv.bias.defined());  // c_v's bias (and c_k's), zeros for c_qk
    EXPECT_TRUE(same_storage((query ? s.c_qk : s.c_k).weight, s.qkv.weight));
    EXPECT_TRUE(same_storage(s.c_v.weight, s.qkv.weight));
    if (query) {
      EXPECT_TRUE(at::equal(s.qkv.bias.narrow(0, 0, 2 * d), at::zeros({2 * d})));
      ASSERT_EQ(s.qk_norm.sizes().vec(), (std::vector<int64_t>{2 * heads, 1, hd}));
      EXPECT_EQ(s.qk_norm.scalar_type(), at::kFloat);
      for (int64_t h = 0; h < heads; ++h) {
        EXPECT_TRUE(at::equal(s.qk_norm[h][0], s.q_norm.to(at::kFloat)));
        EXPECT_TRUE(at::equal(s.qk_norm[heads + h][0], s.k_norm.to(at::kFloat)));
      }
    } else {
      EXPECT_FALSE(s.qk_norm.defined());
    }
  };
  const auto check_mlp = [&](const SwiGluMlp& m) {
    ASSERT_EQ(m.gate_up.out_features(), 2 * m.gate.out_features());
    EXPECT_TRUE(same_storage(m.gate.weight, m.gate_up.weight));
    EXPECT_TRUE(same_storage(m.up.weight, m.gate_up.weight));
  };
  const auto& dual = l.weights.dual_blocks;
  for (size_t i = 0; i < dual.size(); ++i) {
    SCOPED_TRACE("dual block " + std::to_string(i));
    const bool last = i + 1 == dual.size();
    check_stream(dual[i].pre_x, true);
    check_stream(dual[i].pre_c, !last);
    check_mlp(dual[i].post_x.mlp);
    if (!last) check_mlp(dual[i].post_c.mlp);
  }
  for (const SingleBlockWeights& b : l.weights.single_blocks) {
    ASSERT_EQ(b.qkv.out_features(), 3 * d);
    EXPECT_TRUE(same_storage(b.c_qk.weight, b.qkv.weight));
    EXPECT_EQ(b.qk_norm.size(0), 2 * heads);
    check_mlp(b.mlp);
  }
}

TEST(PackedProjections, TheTensorsPackedIntoOthersAreReleasedByName) {
  const Loaded l = load_tiny();
  std::set<std::string> expected;
  const auto linear = [&](const std::string& prefix, bool bias) {
    expected.insert(prefix + ".weight");
    if (bias) expected.insert(prefix + ".bias");
  };
  const int64_t n = l.config.gpt.n_layer;
  for (int64_t i = 0; i < n; ++i) {
    const std::string p = "transformer.dual_blocks." + std::to_string(i);
    linear(p + ".attn.pre_x.c_qk", false);
    linear(p + ".attn.pre_x.c_v", true);
    if (i + 1 == n) {
      linear(p + ".attn.pre_c.c_k", true);
    } else {
      linear(p + ".attn.pre_c.c_qk", false);
    }
    linear(p + ".attn.pre_c.c_v", true);
    for (const std::string post : {".post_1", ".post_2"}) {
      if (post == ".post_2" && i + 1 == n) continue;
      linear(p + post + ".mlp.gate_proj", true);
      linear(p + post + ".mlp.up_proj", true);
    }
  }
  for (int64_t i = 0; i < l.config.gpt.n_single_layer; ++i) {
    const std::string p = "transformer.single_blocks." + std::to_string(i);
    linear(p + ".attn.c_qk", false);
    linear(p + ".attn.c_v", true);
    linear(p + ".mlp.gate_proj", true);
    linear(p + ".mlp.up_proj", true);
  }
  EXPECT_EQ(std::set<std::string>(l.released.begin(), l.released.end()), expected);
  EXPECT_EQ(l.released.size(), expected.size());  // each once
}

TEST(PackedProjections, RandomWeightsHaveNothingToRelease) {
  ModelConfig config = load_model_config(tiny_v01("model.yaml"));
  config.random_weights_seed = 3;
  const ModelWeights w = load_model_weights(config, "", "", WeightOptions{});
  EXPECT_FALSE(static_cast<bool>(w.release_gpt));
}

}  // namespace test_packed_projections
}  // namespace cube3d
