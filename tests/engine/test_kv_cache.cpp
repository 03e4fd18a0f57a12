// The KV-cache pool: layout per block kind, zero fill, views that alias the pool (so every
// batch bucket shares one allocation), bounds checks and the byte count.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/core/model_config.h"
#include "cube3d/engine/kv_cache.h"

namespace cube3d {
namespace test_kv_cache {

GptConfig gpt_config(int64_t dual, int64_t single) {
  GptConfig c;
  c.n_layer = dual;
  c.n_single_layer = single;
  c.n_head = 2;
  c.n_embd = 32;  // head_dim 16
  c.shape_model_vocab_size = 32;
  return c;
}

constexpr int64_t kRows = 4, kCond = 5, kTokens = 12, kHeads = 2, kHd = 16;

using Shape = std::vector<int64_t>;

TEST(KvCache, LayoutPerBlockKind) {
  const KvCache cache(gpt_config(2, 1), kRows, kCond, kTokens, at::kFloat, at::kCPU);
  EXPECT_EQ(cache.max_rows(), kRows);
  EXPECT_EQ(cache.cond_len(), kCond);
  EXPECT_EQ(cache.dual_len(), kCond + 1 + kTokens);
  EXPECT_EQ(cache.single_len(), 1 + kTokens);

  const KvState state = cache.view(kRows);
  EXPECT_EQ(state.cond_len, kCond);
  ASSERT_EQ(state.keys.size(), 3u);
  ASSERT_EQ(state.values.size(), 3u);
  // Dual blocks first (condition + BOS + tokens), then single blocks (BOS + tokens).
  for (size_t i = 0; i < 3; ++i) {
    const Shape expected = i < 2 ? Shape{kRows, kHeads, kCond + 1 + kTokens, kHd}
                                 : Shape{kRows, kHeads, 1 + kTokens, kHd};
    EXPECT_EQ(state.keys[i].sizes().vec(), expected) << "layer " << i;
    EXPECT_EQ(state.values[i].sizes().vec(), expected) << "layer " << i;
    EXPECT_EQ(state.keys[i].scalar_type(), at::kFloat);
    EXPECT_TRUE(state.keys[i].is_contiguous());
  }
}

TEST(KvCache, WithoutSingleBlocksHoldsDualLayersOnly) {
  const KvCache cache(gpt_config(3, 0), 2, kCond, kTokens, at::kFloat, at::kCPU);
  const KvState state = cache.view(2);
  ASSERT_EQ(state.keys.size(), 3u);
  for (const auto& k : state.keys) EXPECT_EQ(k.size(2), kCond + 1 + kTokens);
}

TEST(KvCache, IsZeroFilled) {
  // Masked slots are multiplied by zero attention weight; NaN garbage there would still poison
  // the output, so the pool must start as zeros, not uninitialised memory.
  const KvCache cache(gpt_config(2, 1), kRows, kCond, kTokens, at::kFloat, at::kCPU);
  const KvState state = cache.view(kRows);
  for (size_t i = 0; i < state.keys.size(); ++i) {
    EXPECT_EQ(state.keys[i].abs().sum().item<double>(), 0.0) << "keys " << i;
    EXPECT_EQ(state.values[i].abs().sum().item<double>(), 0.0) << "values " << i;
  }
}

TEST(KvCache, ViewSharesStorageWithThePool) {
  const KvCache cache(gpt_config(2, 1), kRows, kCond, kTokens, at::kFloat, at::kCPU);
  const KvState full = cache.view(kRows);
  KvState small = cache.view(2);
  ASSERT_EQ(small.keys.size(), full.keys.size());
  for (size_t i = 0; i < full.keys.size(); ++i) {
    EXPECT_EQ(small.keys[i].size(0), 2);
    EXPECT_EQ(small.keys[i].sizes().slice(1), full.keys[i].sizes().slice(1));
    // The first rows of the pool, not a copy.
    EXPECT_EQ(small.keys[i].data_ptr(), full.keys[i].data_ptr()) << "keys " << i;
    EXPECT_EQ(small.values[i].data_ptr(), full.values[i].data_ptr()) << "values " << i;
  }
  // Writes through one view are visible through every other view and a later one.
  small.keys[1][1][0][3][5] = 7.0f;
  small.values[2][0][1][4][0] = -3.0f;
  EXPECT_EQ(full.keys[1][1][0][3][5].item<float>(), 7.0f);
  EXPECT_EQ(full.values[2][0][1][4][0].item<float>(), -3.0f);
  EXPECT_EQ(cache.view(3).keys[1][1][0][3][5].item<float>(), 7.0f);
  // Only that element changed.
  EXPECT_EQ(full.keys[1].abs().sum().item<double>(), 7.0);
}

TEST(KvCache, ViewOutsideThePoolThrowsInvalidArgument) {
  const KvCache cache(gpt_config(2, 1), kRows, kCond, kTokens, at::kFloat, at::kCPU);
  for (int64_t rows : {int64_t{0}, int64_t{-1}, kRows + 1}) {
    try {
      (void)cache.view(rows);
      ADD_FAILURE() << "view(" << rows << ") did not throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    }
  }
  EXPECT_NO_THROW((void)cache.view(1));
  EXPECT_NO_THROW((void)cache.view(kRows));
}

TEST(KvCache, NonPositiveSizesThrowInvalidArgument) {
  for (const auto& [rows, cond, tokens] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {0, kCond, kTokens}, {kRows, 0, kTokens}, {kRows, kCond, 0}}) {
    try {
      KvCache cache(gpt_config(2, 1), rows, cond, tokens, at::kFloat, at::kCPU);
      ADD_FAILURE() << "no error for " << rows << ", " << cond << ", " << tokens;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    }
  }
}

TEST(KvCache, BytesIsTheSumOverAllLayers) {
  const KvCache cache(gpt_config(2, 1), kRows, kCond, kTokens, at::kFloat, at::kCPU);
  // Per tensor: rows x heads x len x hd floats; k and v for 2 dual + 1 single block.
  const int64_t dual = kRows * kHeads * (kCond + 1 + kTokens) * kHd;  // 2304
  const int64_t single = kRows * kHeads * (1 + kTokens) * kHd;        // 1664
  EXPECT_EQ(cache.bytes(), (2 * 2 * dual + 2 * single) * 4);          // 50176
  EXPECT_EQ(cache.bytes(), 50176);

  const KvCache half(gpt_config(2, 1), kRows, kCond, kTokens, at::kBFloat16, at::kCPU);
  EXPECT_EQ(half.bytes(), 50176 / 2);
}

}  // namespace test_kv_cache
}  // namespace cube3d
