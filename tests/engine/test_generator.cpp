// The generation loop end to end on a tiny random-weight model: the KV path against full
// recomputation, batch independence with padding, seeds, the single-stream decode modes, the
// KV pool's stability, request validation and the CFG row layout.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/engine/generator.h"
#include "test_model_fixture.h"

namespace cube3d {
namespace test_generator {

using test::make_request;
using test::max_abs_diff;
using test::options_with;
using test::Outcome;
using test::run;

constexpr int64_t kTokens = 12;  // T of the tiny model
constexpr int64_t kCodes = 32;   // C

// --- a. KV-cache decoding equals full recomputation --------------------------------------

void expect_kv_matches_recompute(const std::vector<GenerationRequest>& requests, Engine& engine) {
  const Outcome kv = run(engine, requests, options_with(true, 0, /*use_kv_cache=*/true));
  const Outcome full = run(engine, requests, options_with(true, 0, /*use_kv_cache=*/false));
  const int64_t n = static_cast<int64_t>(requests.size());
  ASSERT_EQ(kv.ids.sizes().vec(), (std::vector<int64_t>{n, kTokens}));
  ASSERT_EQ(kv.logits.sizes().vec(), (std::vector<int64_t>{n, kTokens, kCodes}));
  EXPECT_TRUE(at::equal(kv.ids, full.ids)) << "kv\n" << kv.ids << "\nno cache\n" << full.ids;
  EXPECT_LT(max_abs_diff(kv.logits, full.logits), 1e-4);
  EXPECT_GT(test::distinct(kv.ids), 1) << "degenerate model: one token everywhere";
}

TEST(Generator, KvCacheMatchesRecomputationGreedy) {
  auto engine = test::tiny_engine(2);
  expect_kv_matches_recompute({make_request(*engine, 1, 3.0), make_request(*engine, 2, 3.0)},
                              *engine);
}

TEST(Generator, KvCacheMatchesRecomputationTopP) {
  auto engine = test::tiny_engine(2);
  expect_kv_matches_recompute(
      {make_request(*engine, 1, 3.0, 0.9, 17), make_request(*engine, 2, 1.0, 0.9, 18)}, *engine);
}

TEST(Generator, KvCacheMatchesRecomputationWithoutGuidance) {
  auto engine = test::tiny_engine(2);
  expect_kv_matches_recompute(
      {make_request(*engine, 3, 0.0), make_request(*engine, 4, 0.0, 0.9, 5)}, *engine);
}

// --- c. batch independence -------------------------------------------------------------------

struct BatchComparison {
  bool ids_equal = true;
  double max_logit_diff = 0;
  double max_logit = 0;  // scale of the compared logits, for the report
  bool bitwise = true;
};

// Request `a` alone, then at index 0 of [a, b, c] and index 2 of [b, c, a], both padded to a
// bucket of 4; b and c are also checked to agree between the two batches.
BatchComparison compare_batches(Engine& engine, const GenerationRequest& a,
                                const GenerationRequest& b, const GenerationRequest& c) {
  const Outcome alone = run(engine, {a}, options_with(true, 1));
  const Outcome first = run(engine, {a, b, c}, options_with(true, 4));
  const Outcome last = run(engine, {b, c, a}, options_with(true, 4));
  // Padding rows never reach the result.
  EXPECT_EQ(first.ids.size(0), 3);
  EXPECT_EQ(first.logits.size(0), 3);
  EXPECT_EQ(last.ids.size(0), 3);

  BatchComparison out;
  for (const at::Tensor& ids : {first.ids[0], last.ids[2]}) {
    out.ids_equal = out.ids_equal && at::equal(ids, alone.ids[0]);
  }
  for (const at::Tensor& logits : {first.logits[0], last.logits[2]}) {
    out.max_logit_diff = std::max(out.max_logit_diff, max_abs_diff(logits, alone.logits[0]));
    out.bitwise = out.bitwise && at::equal(logits, alone.logits[0]);
  }
  out.max_logit = alone.logits[0].abs().max().item<double>();
  EXPECT_TRUE(at::equal(first.ids[1], last.ids[0])) << "b moved from index 1 to 0";
  EXPECT_TRUE(at::equal(first.ids[2], last.ids[1])) << "c moved from index 2 to 1";
  EXPECT_LT(max_abs_diff(first.logits[1], last.logits[0]), 1e-5);
  EXPECT_LT(max_abs_diff(first.logits[2], last.logits[1]), 1e-5);
  return out;
}

TEST(Generator, BatchingDoesNotChangeAGreedyRequest) {
  auto engine = test::tiny_engine(4);
  // b without guidance and c sampled: neighbours of every kind.
  const BatchComparison r =
      compare_batches(*engine, make_request(*engine, 10, 3.0), make_request(*engine, 11, 0.0),
                      make_request(*engine, 12, 2.0, 0.9, 7));
  EXPECT_TRUE(r.ids_equal);
  EXPECT_LT(r.max_logit_diff, 1e-5);
  std::cout << "[ info ] greedy batching: max |logit diff| " << r.max_logit_diff << " (max |logit| "
            << r.max_logit << "), bitwise identical: " << (r.bitwise ? "yes" : "no") << "\n";
  RecordProperty("bitwise_identical", r.bitwise ? "yes" : "no");
}

TEST(Generator, BatchingDoesNotChangeASampledRequest) {
  auto engine = test::tiny_engine(4);
  const BatchComparison r =
      compare_batches(*engine, make_request(*engine, 20, 3.0, 0.9, 123),
                      make_request(*engine, 21, 3.0, 0.5, 9), make_request(*engine, 22, 0.0));
  EXPECT_TRUE(r.ids_equal);
  EXPECT_LT(r.max_logit_diff, 1e-5);
  std::cout << "[ info ] sampled batching: max |logit diff| " << r.max_logit_diff
            << " (max |logit| " << r.max_logit
            << "), bitwise identical: " << (r.bitwise ? "yes" : "no") << "\n";
  RecordProperty("bitwise_identical", r.bitwise ? "yes" : "no");
}

TEST(Generator, UnguidedRequestIsTheSameInAGuidedBatch) {
  // Guidance 0 alone runs without uncond rows; next to a guided request it gets an uncond row
  // whose weight is exactly 0. Both must produce the same tokens.
  auto engine = test::tiny_engine(2);
  const GenerationRequest a = make_request(*engine, 30, 0.0);
  const Outcome alone = run(*engine, {a}, options_with(true));
  const Outcome mixed = run(*engine, {make_request(*engine, 31, 3.0), a}, options_with(true));
  EXPECT_TRUE(at::equal(alone.ids[0], mixed.ids[1]));
  EXPECT_LT(max_abs_diff(alone.logits[0], mixed.logits[1]), 1e-5);
}

// --- d. determinism and seeds --------------------------------------------------------------

TEST(Generator, SameSeedGivesSameTokens) {
  auto engine = test::tiny_engine(1);
  const GenerationRequest q = make_request(*engine, 40, 3.0, 0.9, 77);
  const Outcome first = run(*engine, {q}, options_with(false));
  const Outcome second = run(*engine, {q}, options_with(false));
  EXPECT_TRUE(at::equal(first.ids, second.ids));
}

TEST(Generator, DifferentSeedsGiveDifferentTokens) {
  auto engine = test::tiny_engine(1);
  const Outcome s1 = run(*engine, {make_request(*engine, 40, 3.0, 0.9, 1)}, options_with(false));
  const Outcome s2 = run(*engine, {make_request(*engine, 40, 3.0, 0.9, 2)}, options_with(false));
  EXPECT_FALSE(at::equal(s1.ids, s2.ids)) << s1.ids << "\n" << s2.ids;
  // Sampling with the full nucleus is still sampling.
  const Outcome f1 = run(*engine, {make_request(*engine, 40, 3.0, 1.0, 1)}, options_with(false));
  const Outcome f2 = run(*engine, {make_request(*engine, 40, 3.0, 1.0, 2)}, options_with(false));
  EXPECT_FALSE(at::equal(f1.ids, f2.ids)) << f1.ids << "\n" << f2.ids;
}

TEST(Generator, GreedyIgnoresTheSeed) {
  auto engine = test::tiny_engine(1);
  const Outcome s1 =
      run(*engine, {make_request(*engine, 40, 3.0, std::nullopt, 1)}, options_with(false));
  const Outcome s2 =
      run(*engine, {make_request(*engine, 40, 3.0, std::nullopt, 2)}, options_with(false));
  EXPECT_TRUE(at::equal(s1.ids, s2.ids));
  EXPECT_GT(test::distinct(s1.ids), 1);
}

TEST(Generator, ResultsAreNotOverwrittenByALaterCall) {
  // BUG (generator.cpp, generate(): result.ids / result.step_logits): disabled because it fails.
  // A result is the caller's: a later batch on the same runner must not change it. On CPU,
  // Tensor::cpu() returns the tensor itself, so ids/step_logits that are narrow()s of the
  // runner's static output buffers would be rewritten by the next generate call.
  auto engine = test::tiny_engine(1);
  const GenerationResult r1 =
      engine->generate({make_request(*engine, 40, 3.0, 0.9, 1)}, options_with(true));
  const at::Tensor ids1 = r1.ids.clone();
  const at::Tensor logits1 = r1.step_logits.clone();
  const GenerationResult r2 =
      engine->generate({make_request(*engine, 41, 3.0, 0.9, 2)}, options_with(true));
  ASSERT_FALSE(at::equal(r2.ids, ids1)) << "fixture: the two calls must differ";
  EXPECT_TRUE(at::equal(r1.ids, ids1)) << "first result's ids changed by the second call";
  EXPECT_TRUE(at::equal(r1.step_logits, logits1)) << "first result's logits changed";
}

// --- e. single-stream decode modes -----------------------------------------------------------

TEST(Generator, ReferenceModeSharesTheFirstTokenAndThenDiffers) {
  auto engine = test::tiny_engine(2, /*single_layers=*/1);
  const std::vector<GenerationRequest> q = {make_request(*engine, 50, 3.0),
                                            make_request(*engine, 51, 3.0, 0.9, 4)};
  const Outcome causal = run(*engine, q, options_with(true, 0, true, SingleStreamDecode::kCausal));
  const Outcome reference =
      run(*engine, q, options_with(true, 0, true, SingleStreamDecode::kReference));
  // The prefill is one full causal forward in both modes: token 0 and its logits agree exactly.
  EXPECT_TRUE(at::equal(causal.ids.select(1, 0), reference.ids.select(1, 0)));
  EXPECT_TRUE(at::equal(causal.logits.select(1, 0), reference.logits.select(1, 0)));
  // After it, the single block sees different keys: the logits move and (for these prompts)
  // the tokens too.
  EXPECT_GT(max_abs_diff(causal.logits.narrow(1, 1, kTokens - 1),
                         reference.logits.narrow(1, 1, kTokens - 1)),
            1e-3);
  EXPECT_FALSE(at::equal(causal.ids, reference.ids)) << causal.ids << "\n" << reference.ids;
}

TEST(Generator, ModesAgreeWithoutSingleBlocks) {
  // The mode only changes the single blocks' mask: a model without them decodes identically.
  auto engine = test::tiny_engine(1, /*single_layers=*/0);
  const std::vector<GenerationRequest> q = {make_request(*engine, 52, 3.0)};
  const Outcome causal = run(*engine, q, options_with(true, 0, true, SingleStreamDecode::kCausal));
  const Outcome reference =
      run(*engine, q, options_with(true, 0, true, SingleStreamDecode::kReference));
  EXPECT_TRUE(at::equal(causal.ids, reference.ids));
  EXPECT_TRUE(at::equal(causal.logits, reference.logits));
}

// --- f. the KV pool never moves ------------------------------------------------------------

std::vector<const void*> pool_addresses(const KvCache& cache) {
  const KvState state = cache.view(cache.max_rows());
  std::vector<const void*> out;
  for (const auto& k : state.keys) out.push_back(k.data_ptr());
  for (const auto& v : state.values) out.push_back(v.data_ptr());
  return out;
}

TEST(Generator, KvPoolIsAllocatedOnceAndReusedAcrossShapes) {
  auto engine = test::tiny_engine(2);
  const KvCache& g = engine->kv_cache();
  EXPECT_EQ(engine->options().max_batch, 2);
  EXPECT_EQ(engine->tokens_per_shape(), kTokens);
  // 2 rows per request with guidance.
  EXPECT_EQ(g.max_rows(), 4);
  EXPECT_EQ(g.cond_len(), test::kTextTokens);
  const std::vector<const void*> before = pool_addresses(g);

  const GenerationRequest a = make_request(*engine, 60, 3.0);
  const Outcome first = run(*engine, {a}, options_with(false, 1));
  EXPECT_EQ(pool_addresses(g), before);
  // Another batch shape (bucket 2, no guidance) in between shares the same pool...
  (void)run(*engine, {make_request(*engine, 61, 0.0), make_request(*engine, 62, 0.0)},
            options_with(false, 2));
  EXPECT_EQ(pool_addresses(g), before);
  // ...and leaves nothing behind that changes the first shape's next run.
  const Outcome again = run(*engine, {a}, options_with(false, 1));
  EXPECT_EQ(pool_addresses(g), before);
  EXPECT_TRUE(at::equal(first.ids, again.ids));
}

// --- g. validation ---------------------------------------------------------------------------

// Expects generate to throw invalid_argument whose message contains `needle`.
void expect_invalid(Engine& engine, const std::vector<GenerationRequest>& requests,
                    const std::string& needle, int64_t bucket = 0) {
  try {
    (void)engine.generate(requests, options_with(false, bucket));
    ADD_FAILURE() << "no error; expected one naming '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message lacks '" << needle << "': " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a cube3d::Error: " << e.what();
  }
}

class GeneratorValidation : public ::testing::Test {
 protected:
  void SetUp() override { engine_ = test::tiny_engine(2); }
  GenerationRequest good(double guidance = 3.0) { return make_request(*engine_, 70, guidance); }
  std::unique_ptr<Engine> engine_;
};

TEST_F(GeneratorValidation, EmptyRequestList) { expect_invalid(*engine_, {}, "no requests"); }

TEST_F(GeneratorValidation, MoreRequestsThanMaxBatch) {
  expect_invalid(*engine_, {good(), good(), good()}, "3 requests");
}

TEST_F(GeneratorValidation, BucketSmallerThanRequestCountOrAboveMaxBatch) {
  expect_invalid(*engine_, {good(), good()}, "batch of 1", /*bucket=*/1);
  expect_invalid(*engine_, {good()}, "batch of 3", /*bucket=*/3);
}

TEST_F(GeneratorValidation, NegativeOrNonFiniteGuidance) {
  for (double g :
       {-0.5, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    GenerationRequest q = good();
    q.guidance_scale = g;
    expect_invalid(*engine_, {q}, "guidance_scale");
  }
}

TEST_F(GeneratorValidation, TopPOutsideUnitInterval) {
  for (double p : {0.0, -0.1, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    GenerationRequest q = good();
    q.top_p = p;
    expect_invalid(*engine_, {q}, "top_p");
  }
}

TEST_F(GeneratorValidation, WrongTextHiddenShape) {
  const int64_t dt = engine_->config().gpt.text_model_embed_dim;
  for (const at::Tensor& hidden :
       {at::Tensor(), at::zeros({dt}), at::zeros({test::kTextTokens, dt + 1}),
        at::zeros({1, test::kTextTokens, dt})}) {
    GenerationRequest q = good(0.0);
    q.text_hidden = hidden;
    expect_invalid(*engine_, {q}, "text_hidden");
  }
}

TEST_F(GeneratorValidation, TextHiddenWithWrongTokenCount) {
  // BUG (generator.cpp validate()), disabled because it fails: the token count of text_hidden
  // is never checked against the generator's cond_len S. Prefill writes the S' given
  // condition keys and BOS at slot S', but decode_step reads the condition at 0..S-1 and writes
  // token p at S + p, so any S' != S decodes silently wrong (the KV and no-cache paths then
  // disagree by > 1e-3 in the logits); S' > S + T throws a c10::Error from narrow() instead of
  // a cube3d::Error.
  const int64_t dt = engine_->config().gpt.text_model_embed_dim;
  for (int64_t tokens : {test::kTextTokens - 1, test::kTextTokens + 1, int64_t{40}}) {
    GenerationRequest q = good(0.0);
    q.text_hidden = at::zeros({tokens, dt});
    expect_invalid(*engine_, {q}, "text_hidden");
  }
}

TEST_F(GeneratorValidation, GuidanceWithoutMatchingUncondHidden) {
  GenerationRequest missing = good(2.0);
  missing.uncond_hidden = at::Tensor();
  expect_invalid(*engine_, {missing}, "uncond_hidden");
  GenerationRequest misshapen = good(2.0);
  misshapen.uncond_hidden = at::zeros({test::kTextTokens - 1, 16});
  expect_invalid(*engine_, {misshapen}, "uncond_hidden");
  // Without guidance the uncond embedding is not needed.
  GenerationRequest unguided = good(0.0);
  unguided.uncond_hidden = at::Tensor();
  EXPECT_NO_THROW((void)engine_->generate({unguided}, options_with(false)));
}

TEST_F(GeneratorValidation, BboxWithWrongSize) {
  GenerationRequest q = good();
  q.bbox = at::zeros({2});
  expect_invalid(*engine_, {q}, "bbox");
}

TEST_F(GeneratorValidation, MessageNamesTheRequestAtFault) {
  GenerationRequest bad = good();
  bad.top_p = 2.0;
  expect_invalid(*engine_, {good(), bad}, "request 1");
}

// --- h. CFG row layout -----------------------------------------------------------------------

// The batch ran on `rows` rows: the condition and the prefill logits have one per row.
void expect_batch_rows(const Engine& engine, const GenerationResult& r, int64_t rows) {
  const int64_t d = engine.config().gpt.n_embd;
  EXPECT_EQ(r.cond.sizes().vec(), (std::vector<int64_t>{rows, test::kTextTokens, d}));
  EXPECT_EQ(r.prefill_logits.sizes().vec(), (std::vector<int64_t>{rows, kCodes + 3}));
}

TEST(Generator, UnguidedBatchUsesOneRowPerRequest) {
  auto engine = test::tiny_engine(4);
  const GenerationResult r = engine->generate(
      {make_request(*engine, 90, 0.0), make_request(*engine, 91, 0.0)}, options_with(false, 4));
  expect_batch_rows(*engine, r, 4);
  EXPECT_EQ(r.ids.sizes().vec(), (std::vector<int64_t>{2, kTokens}));
  EXPECT_EQ(r.tokens, kTokens);
  EXPECT_FALSE(r.step_logits.defined());
}

TEST(Generator, GuidedBatchUsesCondAndUncondRows) {
  auto engine = test::tiny_engine(4);
  // One guided request is enough to give every request an uncond row.
  const GenerationResult r = engine->generate(
      {make_request(*engine, 90, 0.0), make_request(*engine, 91, 2.0)}, options_with(true, 4));
  expect_batch_rows(*engine, r, 8);
  EXPECT_EQ(r.step_logits.sizes().vec(), (std::vector<int64_t>{2, kTokens, kCodes}));
  // Rows are [cond (b) ; uncond (b)]: every guided request shares the empty-prompt embedding,
  // so uncond rows 4 and 5 are equal, and differ from the cond rows.
  EXPECT_TRUE(at::allclose(r.cond[4], r.cond[5]));
  EXPECT_FALSE(at::allclose(r.cond[0], r.cond[4]));
  const at::Tensor ids = r.ids;
  EXPECT_TRUE(ids.ge(0).all().item<bool>() && ids.lt(kCodes).all().item<bool>());
}

}  // namespace test_generator
}  // namespace cube3d
