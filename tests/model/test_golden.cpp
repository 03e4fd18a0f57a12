// The model's forward math against the official Python implementation's outputs
// (tests/golden/*: random-weight models run on CPU in float32). Generation itself (token ids
// through the KV cache) is checked in tests/engine/test_golden_generation.cpp.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "golden_model.h"

namespace cube3d {
namespace test_golden {

using testing::GoldenModel;
using testing::load_golden;
using testing::max_abs_diff;

constexpr double kTolerance = 1e-4;

class GoldenModelTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {}
  GoldenModel g = load_golden(GetParam());

  // [cond ; uncond] conditions as the official prepare_inputs builds them.
  at::Tensor conditions() const {
    const at::Tensor bbox = g.config.gpt.use_bbox ? g.inputs.at("bbox_xyz") : at::Tensor();
    const at::Tensor uncond_bbox = g.config.gpt.use_bbox ? at::zeros({1, 3}) : at::Tensor();
    return at::cat({g.gpt->encode_condition(g.inputs.at("clip_hidden_cond"), bbox),
                    g.gpt->encode_condition(g.inputs.at("clip_hidden_uncond"), uncond_bbox)});
  }

  at::Tensor bos_rows(int64_t rows) const {
    return g.gpt->embed(at::full({rows, 1}, g.config.gpt.bos_id(), at::kLong));
  }

  // Teacher-forced CFG logits of every step for the given ids [T] through the full forward.
  at::Tensor teacher_forced_logits(const at::Tensor& cond, const at::Tensor& ids,
                                   double guidance) const {
    const int64_t t = g.tokens();
    const at::Tensor prefix =
        at::cat({at::full({1}, g.config.gpt.bos_id(), at::kLong), ids.narrow(0, 0, t - 1)});
    const int64_t rows = cond.size(0);
    const at::Tensor embeds = g.gpt->embed(prefix).unsqueeze(0).expand({rows, t, -1});
    const at::Tensor logits = g.gpt->forward(cond, embeds).narrow(-1, 0, g.codes());
    if (rows == 1) return logits[0];
    const at::Tensor steps = at::arange(t, at::kDouble);
    const at::Tensor gamma = (guidance * (t - steps) / t).to(at::kFloat).unsqueeze(1);
    const at::Tensor one_plus = (guidance * (t - steps) / t + 1.0).to(at::kFloat).unsqueeze(1);
    return one_plus * logits[0] - gamma * logits[1];
  }
};

TEST_P(GoldenModelTest, ConditionsMatch) {
  const at::Tensor cond = conditions();
  ASSERT_EQ(cond.sizes(), g.expected.at("cond").sizes());
  EXPECT_LT(max_abs_diff(cond, g.expected.at("cond")), kTolerance);
}

TEST_P(GoldenModelTest, PrefillLogitsMatch) {
  const at::Tensor logits = g.gpt->forward(conditions(), bos_rows(2)).select(1, 0);
  ASSERT_EQ(logits.sizes(), g.expected.at("prefill_logits").sizes());
  EXPECT_LT(max_abs_diff(logits, g.expected.at("prefill_logits")), kTolerance);
}

TEST_P(GoldenModelTest, TeacherForcedStepLogitsMatchWithGuidance) {
  const at::Tensor ids = g.expected.at("ids_full_cfg3")[0];
  const at::Tensor logits = teacher_forced_logits(conditions(), ids, 3.0);
  ASSERT_EQ(logits.sizes(), g.expected.at("logits_full_cfg3")[0].sizes());
  EXPECT_LT(max_abs_diff(logits, g.expected.at("logits_full_cfg3")[0]), kTolerance);
  // The official greedy choice is the argmax of these logits.
  EXPECT_TRUE(at::equal(logits.argmax(-1), ids));
}

TEST_P(GoldenModelTest, TeacherForcedStepLogitsMatchWithoutGuidance) {
  const at::Tensor ids = g.expected.at("ids_full_cfg0")[0];
  const at::Tensor logits = teacher_forced_logits(conditions().narrow(0, 0, 1), ids, 0.0);
  EXPECT_LT(max_abs_diff(logits, g.expected.at("logits_full_cfg0")[0]), kTolerance);
  EXPECT_TRUE(at::equal(logits.argmax(-1), ids));
}

TEST_P(GoldenModelTest, LatentsMatch) {
  const at::Tensor latents = g.decoder->latents(g.expected.at("ids_full_cfg3"));
  ASSERT_EQ(latents.sizes(), g.expected.at("latents").sizes());
  EXPECT_LT(max_abs_diff(latents, g.expected.at("latents")), kTolerance);
}

TEST_P(GoldenModelTest, OccupancyGridMatchesAtResolution4) {
  const at::Tensor grid = g.decoder->occupancy_grid(g.expected.at("latents"), 4);
  ASSERT_EQ(grid.sizes(), g.expected.at("grid_logits_res4").sizes());
  EXPECT_LT(max_abs_diff(grid, g.expected.at("grid_logits_res4")), kTolerance);
}

TEST_P(GoldenModelTest, OccupancyGridDoesNotDependOnChunkSize) {
  // Chunking bounds memory; it must not change a single logit beyond float noise.
  const at::Tensor whole = g.decoder->occupancy_grid(g.expected.at("latents"), 4, 1 << 16);
  const at::Tensor chunked = g.decoder->occupancy_grid(g.expected.at("latents"), 4, 1000);
  EXPECT_LT(max_abs_diff(whole, chunked), 1e-5);
}

TEST_P(GoldenModelTest, FourierEmbeddingMatches) {
  const at::Tensor out = g.decoder->fourier_embed(g.expected.at("embedder_points"));
  ASSERT_EQ(out.sizes(), g.expected.at("embedder_out").sizes());
  EXPECT_LT(max_abs_diff(out, g.expected.at("embedder_out")), kTolerance);
}

INSTANTIATE_TEST_SUITE_P(Golden, GoldenModelTest, ::testing::Values("tiny_v01", "tiny_v05"));

TEST(GoldenGrid, AxisMatchesNumpyLinspace) {
  // numpy.linspace(-1.05, 1.05, 17, dtype=float32): the first, middle and last points.
  const at::Tensor axis = grid_axis(17);
  EXPECT_FLOAT_EQ(axis[0].item<float>(), -1.05f);
  EXPECT_FLOAT_EQ(axis[8].item<float>(), 0.0f);
  EXPECT_FLOAT_EQ(axis[16].item<float>(), 1.05f);
  EXPECT_EQ(occupancy_grid_size(8), 257);
}

}  // namespace test_golden
}  // namespace cube3d
