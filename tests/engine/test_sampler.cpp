// Classifier-free guidance and token choice on hand-built logits: the CFG schedule against a
// float64 hand computation, greedy choice, and top-p sampling against known distributions
// whose inverse-CDF answers can be worked out on paper.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "cube3d/engine/sampler.h"

namespace cube3d {
namespace test_sampler {

at::Tensor doubles(const std::vector<double>& v) { return at::tensor(v, at::kDouble); }
at::Tensor floats(const std::vector<float>& v) { return at::tensor(v, at::kFloat); }
at::Tensor longs(const std::vector<int64_t>& v) { return at::tensor(v, at::kLong); }
at::Tensor bools(const std::vector<int64_t>& v) { return at::tensor(v, at::kLong).to(at::kBool); }

// Buffers for b requests; `uniforms` is [b, T].
SamplingBuffers buffers(const std::vector<double>& guidance, const std::vector<float>& top_p,
                        const std::vector<int64_t>& greedy, const at::Tensor& uniforms) {
  return {doubles(guidance), floats(top_p), bools(greedy), uniforms};
}

// Logits whose softmax is exactly `probs` (up to rounding), as one row.
at::Tensor log_probs(const std::vector<float>& probs) { return floats(probs).log(); }

// --- guided_logits ------------------------------------------------------------------------

TEST(GuidedLogits, MatchesHandComputedScheduleForPerRowGuidanceAndStep) {
  const int64_t b = 3, codes = 5, total = 10;
  // Raw logits carry the 3 special tokens after the codes; rows are [cond (b) ; uncond (b)].
  const at::Tensor logits = at::randn({2 * b, codes + 3}, at::kFloat);
  const std::vector<double> g = {0.0, 1.5, 3.0};
  const std::vector<int64_t> steps = {0, 4, 9};
  const SamplingBuffers buf = buffers(g, {1, 1, 1}, {1, 1, 1}, at::zeros({b, total}));
  const SamplingPlan plan{/*cfg=*/true, /*any_sampling=*/false, codes, total};

  const at::Tensor mixed = guided_logits(logits, longs(steps), buf, plan);
  ASSERT_EQ(mixed.sizes(), (std::vector<int64_t>{b, codes}));
  EXPECT_EQ(mixed.scalar_type(), at::kFloat);

  const at::Tensor l = logits.to(at::kDouble);
  for (int64_t r = 0; r < b; ++r) {
    const double gamma = g[r] * static_cast<double>(total - steps[r]) / static_cast<double>(total);
    for (int64_t c = 0; c < codes; ++c) {
      const double cond = l[r][c].item<double>();
      const double uncond = l[b + r][c].item<double>();
      const double expected = (1.0 + gamma) * cond - gamma * uncond;
      EXPECT_NEAR(mixed[r][c].item<double>(), expected, 1e-5 * (1.0 + std::abs(expected)))
          << "row " << r << " code " << c << " gamma " << gamma;
    }
  }
}

TEST(GuidedLogits, ScheduleDecaysToZeroAtTheLastStep) {
  // gamma = g (T - i) / T: at i = T the mix is the cond logits; at i = 0 the full g applies.
  const int64_t codes = 4, total = 8;
  const at::Tensor logits = at::randn({2, codes + 3}, at::kFloat);
  const SamplingBuffers buf = buffers({2.0}, {1}, {1}, at::zeros({1, total}));
  const SamplingPlan plan{true, false, codes, total};
  const at::Tensor cond = logits.narrow(0, 0, 1).narrow(1, 0, codes);
  const at::Tensor uncond = logits.narrow(0, 1, 1).narrow(1, 0, codes);
  EXPECT_TRUE(at::allclose(guided_logits(logits, longs({total}), buf, plan), cond));
  EXPECT_TRUE(at::allclose(guided_logits(logits, longs({0}), buf, plan), 3.0 * cond - 2.0 * uncond,
                           1e-5, 1e-5));
}

TEST(GuidedLogits, ZeroGuidanceRowReturnsCondLogitsExactly) {
  const int64_t b = 2, codes = 6, total = 12;
  at::Tensor logits = at::randn({2 * b, codes + 3}, at::kFloat);
  // Huge uncond values would leak into the result through any 0 * x that is not exactly 0 or
  // through a (1 + 0) * c that is not exactly c.
  logits.narrow(0, b, b).fill_(1e30);
  const SamplingBuffers buf = buffers({0.0, 2.0}, {1, 1}, {1, 1}, at::zeros({b, total}));
  const SamplingPlan plan{true, false, codes, total};
  const at::Tensor mixed = guided_logits(logits, longs({3, 3}), buf, plan);
  EXPECT_TRUE(at::equal(mixed[0], logits[0].narrow(0, 0, codes)));
  EXPECT_FALSE(at::equal(mixed[1], logits[1].narrow(0, 0, codes)));
}

TEST(GuidedLogits, WithoutCfgReturnsTheFirstCodeColumns) {
  const int64_t b = 3, codes = 5;
  const at::Tensor logits = at::randn({b, codes + 3}, at::kFloat);
  // Guidance in the buffers must be ignored when the plan has no uncond rows.
  const SamplingBuffers buf = buffers({4.0, 4.0, 4.0}, {1, 1, 1}, {1, 1, 1}, at::zeros({b, 4}));
  const SamplingPlan plan{/*cfg=*/false, false, codes, 4};
  const at::Tensor mixed = guided_logits(logits, longs({0, 1, 2}), buf, plan);
  ASSERT_EQ(mixed.sizes(), (std::vector<int64_t>{b, codes}));
  EXPECT_TRUE(at::equal(mixed, logits.narrow(1, 0, codes)));
}

// --- choose_tokens: greedy -------------------------------------------------------------------

TEST(ChooseTokens, GreedyRowsGiveArgmax) {
  const at::Tensor mixed = floats({0.1f, 2.0f, -1.0f, 0.5f,  //
                                   3.0f, 0.0f, 0.0f, 0.0f,   //
                                   -5.f, -4.f, -3.f, -2.f})
                               .view({3, 4});
  const at::Tensor uniforms = at::full({3, 4}, 0.99f);
  const SamplingBuffers buf = buffers({0, 0, 0}, {1, 1, 1}, {1, 1, 1}, uniforms);
  // Both the all-greedy fast path and the general path must give the argmax.
  for (bool any_sampling : {false, true}) {
    const SamplingPlan plan{false, any_sampling, 4, 4};
    const at::Tensor ids = choose_tokens(mixed, longs({0, 1, 2}), buf, plan);
    EXPECT_EQ(ids.scalar_type(), at::kLong);
    EXPECT_TRUE(at::equal(ids, longs({1, 0, 3}))) << "any_sampling " << any_sampling << ": " << ids;
  }
}

TEST(ChooseTokens, TinyTopPKeepsOnlyTheTopTokenEvenWhenSampling) {
  const at::Tensor row = log_probs({0.1f, 0.15f, 0.4f, 0.35f});
  const at::Tensor mixed = row.unsqueeze(0).expand({4, 4}).contiguous();
  // Draws spread over [0, 1): without the filter they would pick several different tokens.
  const at::Tensor uniforms = floats({0.0f, 0.3f, 0.7f, 0.999f}).unsqueeze(1).expand({4, 2});
  const SamplingBuffers buf =
      buffers({0, 0, 0, 0}, {1e-6f, 1e-6f, 1e-6f, 1e-6f}, {0, 0, 0, 0}, uniforms.contiguous());
  const SamplingPlan plan{false, true, 4, 2};
  EXPECT_TRUE(at::equal(choose_tokens(mixed, longs({1, 1, 1, 1}), buf, plan), longs({2, 2, 2, 2})));
}

// --- choose_tokens: top-p sampling -----------------------------------------------------------

// Samples one row of `probs` (in the given column order) with nucleus `top_p` and draw `u`.
int64_t sample_one(const std::vector<float>& probs, float top_p, float u) {
  const int64_t c = static_cast<int64_t>(probs.size());
  const at::Tensor mixed = log_probs(probs).unsqueeze(0);
  const SamplingBuffers buf = buffers({0}, {top_p}, {0}, floats({u}).view({1, 1}));
  const SamplingPlan plan{false, true, c, 1};
  return choose_tokens(mixed, longs({0}), buf, plan).item<int64_t>();
}

TEST(ChooseTokens, FullNucleusPicksByInverseCdf) {
  // Sorted masses 0.5 | 0.3 | 0.2: CDF 0.5, 0.8, 1.0.
  const std::vector<float> p = {0.5f, 0.3f, 0.2f};
  EXPECT_EQ(sample_one(p, 1.0f, 0.0f), 0);
  EXPECT_EQ(sample_one(p, 1.0f, 0.1f), 0);
  EXPECT_EQ(sample_one(p, 1.0f, 0.45f), 0);
  EXPECT_EQ(sample_one(p, 1.0f, 0.6f), 1);
  EXPECT_EQ(sample_one(p, 1.0f, 0.75f), 1);
  EXPECT_EQ(sample_one(p, 1.0f, 0.9f), 2);
  EXPECT_EQ(sample_one(p, 1.0f, 0.99999994f), 2);  // the largest draw lands on the last token
}

TEST(ChooseTokens, InverseCdfFollowsProbabilityOrderNotColumnOrder) {
  // The same masses in columns [0.2, 0.5, 0.3]: rank 0 is column 1, rank 1 column 2, rank 2
  // column 0. Catches a sampler that forgets to map sorted ranks back to token ids.
  const std::vector<float> p = {0.2f, 0.5f, 0.3f};
  EXPECT_EQ(sample_one(p, 1.0f, 0.1f), 1);
  EXPECT_EQ(sample_one(p, 1.0f, 0.6f), 2);
  EXPECT_EQ(sample_one(p, 1.0f, 0.9f), 0);
}

TEST(ChooseTokens, TopPBelowSecondCumulativeMassKeepsOnlyTheFirst) {
  // Inclusive cumulative masses 0.5, 0.8, 1.0: with top_p 0.6 only the first (always kept)
  // survives, so every draw picks it.
  const std::vector<float> p = {0.5f, 0.3f, 0.2f};
  for (float u : {0.0f, 0.1f, 0.6f, 0.9f, 0.99999994f}) {
    EXPECT_EQ(sample_one(p, 0.6f, u), 0) << "u " << u;
  }
}

TEST(ChooseTokens, TopPKeepsTokensWithinMassAndRenormalises) {
  // top_p 0.85 keeps ranks 0 and 1 (cumulative 0.5, 0.8 <= 0.85), drops rank 2 (1.0).
  // Renormalised: [0.625, 0.375], so u < 0.625 picks rank 0 and anything above picks rank 1,
  // never rank 2 (which the unfiltered CDF would give for u >= 0.8).
  const std::vector<float> p = {0.5f, 0.3f, 0.2f};
  EXPECT_EQ(sample_one(p, 0.85f, 0.1f), 0);
  EXPECT_EQ(sample_one(p, 0.85f, 0.6f), 0);  // 0.6 < 0.625: still rank 0 after renormalising
  EXPECT_EQ(sample_one(p, 0.85f, 0.7f), 1);
  EXPECT_EQ(sample_one(p, 0.85f, 0.9f), 1);
  EXPECT_EQ(sample_one(p, 0.85f, 0.99999994f), 1);
}

TEST(ChooseTokens, MixedGreedyAndSamplingRowsInOneBatch) {
  // Every row has argmax 0; a draw of 0.95 samples rank 2 under the full nucleus.
  const at::Tensor row = log_probs({0.5f, 0.3f, 0.2f});
  const at::Tensor mixed = row.unsqueeze(0).expand({4, 3}).contiguous();
  const at::Tensor uniforms = at::full({4, 1}, 0.95f);
  // Rows: greedy, sampling (top_p 1), greedy, sampling (top_p 0.6 -> only rank 0).
  const SamplingBuffers buf =
      buffers({0, 0, 0, 0}, {1.0f, 1.0f, 1.0f, 0.6f}, {1, 0, 1, 0}, uniforms);
  const SamplingPlan plan{false, true, 3, 1};
  EXPECT_TRUE(at::equal(choose_tokens(mixed, longs({0, 0, 0, 0}), buf, plan), longs({0, 2, 0, 0})));
}

TEST(ChooseTokens, UsesTheDrawAtEachRowsOwnStep) {
  // uniforms[row, step] is the only draw that gives the expected token for each row: every
  // other column of that row gives a different one.
  const at::Tensor row = log_probs({0.5f, 0.3f, 0.2f});
  const at::Tensor mixed = row.unsqueeze(0).expand({3, 3}).contiguous();
  const at::Tensor uniforms = floats({0.1f, 0.9f, 0.6f, 0.6f,   // row 0, step 1 -> 0.9 -> 2
                                      0.9f, 0.9f, 0.1f, 0.9f,   // row 1, step 2 -> 0.1 -> 0
                                      0.6f, 0.1f, 0.9f, 0.1f})  // row 2, step 0 -> 0.6 -> 1
                                  .view({3, 4});
  const SamplingBuffers buf = buffers({0, 0, 0}, {1, 1, 1}, {0, 0, 0}, uniforms);
  const SamplingPlan plan{false, true, 3, 4};
  EXPECT_TRUE(at::equal(choose_tokens(mixed, longs({1, 2, 0}), buf, plan), longs({2, 0, 1})));
}

TEST(ChooseTokens, GuidedThenSampledEndToEnd) {
  // guided_logits and choose_tokens chained as a runner does. With g = 1 at step 0 of T = 4,
  // gamma = 1 and the mix is 2 cond - uncond; uncond = 0 makes it 2 log p, whose softmax is
  // p^2 renormalised = [25, 9, 4] / 38 = [0.658, 0.237, 0.105].
  const at::Tensor cond = log_probs({0.5f, 0.3f, 0.2f});
  at::Tensor logits = at::zeros({2, 3 + 3}, at::kFloat);
  logits[0].narrow(0, 0, 3).copy_(cond);
  const SamplingBuffers buf = buffers({1.0}, {1.0f}, {0}, floats({0.85f}).view({1, 1}));
  const SamplingPlan plan{true, true, 3, 4};
  const at::Tensor mixed = guided_logits(logits, longs({0}), buf, plan);
  // 0.85 is past the first unguided CDF step (0.8, rank 2) but within 0.658 + 0.237 = 0.895.
  EXPECT_EQ(choose_tokens(mixed, longs({0}), buf, plan).item<int64_t>(), 1);
}

}  // namespace test_sampler
}  // namespace cube3d
