// The KV decode path below the generator: ShapeGpt::decode_step against the full causal
// forward, and the decode runner's static buffers, which must never move (a CUDA graph captured
// on them replays on the same addresses).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "cube3d/engine/decode_runner.h"
#include "cube3d/engine/kv_cache.h"
#include "one_request_pool.h"
#include "test_model_fixture.h"

namespace cube3d {
namespace test_decode_runner {

using test::kTextTokens;

// Random conditions [rows, S, D] and a random sequence [BOS, codes...] embedded [rows, L, D].
struct Inputs {
  at::Tensor cond, ids, embeds;
};

Inputs random_inputs(const ShapeGpt& gpt, int64_t rows, int64_t length, uint64_t seed) {
  const GptConfig& c = gpt.config();
  Inputs in;
  in.cond = gpt.encode_condition(
      test::seeded_randn({rows, kTextTokens, c.text_model_embed_dim}, seed), at::Tensor());
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed + 1);
  in.ids = at::randint(c.shape_model_vocab_size, {rows, length}, gen, at::kLong);
  in.ids.select(1, 0).fill_(c.bos_id());
  in.embeds = gpt.embed(in.ids);
  return in;
}

// A tiny engine's GPT, random inputs of `rows` x `length` tokens, their full causal forward
// [rows, L, V] and an empty KV cache sized for them (each test fills it its own way).
struct DecodeCase {
  DecodeCase(int64_t max_batch, int64_t rows_, int64_t length_, uint64_t seed)
      : engine(test::tiny_engine(max_batch)),
        gpt(engine->gpt()),
        rows(rows_),
        length(length_),
        in(random_inputs(gpt, rows, length, seed)),
        full(gpt.forward(in.cond, in.embeds)),
        pool(gpt.config(), rows, kTextTokens, length, at::kFloat, at::kCPU),
        cache(pool.view(rows)) {}

  std::unique_ptr<Engine> engine;
  const ShapeGpt& gpt;
  const int64_t rows, length;
  const Inputs in;
  const at::Tensor full;
  const KvCache pool;
  KvState cache;
};

TEST(ShapeGptDecode, StepByStepDecodeMatchesFullForward) {
  DecodeCase c(/*max_batch=*/2, /*rows=*/3, /*length=*/12, /*seed=*/11);
  const ShapeGpt& gpt = c.gpt;
  const int64_t rows = c.rows, length = c.length;
  const Inputs& in = c.in;
  const at::Tensor& full = c.full;
  KvState& cache = c.cache;
  ASSERT_EQ(full.sizes().vec(), (std::vector<int64_t>{rows, length, gpt.config().vocab_size()}));

  // Prefill [cond ; BOS] writes the condition's keys and BOS; its logits are position 0's.
  const at::Tensor prefill = gpt.forward(in.cond, in.embeds.narrow(1, 0, 1), &cache);
  EXPECT_LT(test::max_abs_diff(prefill.select(1, 0), full.select(1, 0)), 1e-4);
  for (int64_t p = 1; p < length; ++p) {
    const at::Tensor positions = at::full({rows}, p, at::kLong);
    const at::Tensor step =
        gpt.decode_step(in.embeds.select(1, p), positions, cache, SingleStreamDecode::kCausal);
    ASSERT_EQ(step.sizes().vec(), (std::vector<int64_t>{rows, gpt.config().vocab_size()}));
    EXPECT_LT(test::max_abs_diff(step, full.select(1, p)), 1e-4) << "position " << p;
  }
  // Guard against a vacuous comparison: the logits do change along the sequence.
  EXPECT_GT(test::max_abs_diff(full.select(1, 1), full.select(1, 5)), 1e-2);
}

TEST(ShapeGptDecode, RowsAtDifferentPositionsMatchFullForward) {
  // decode_step takes a position per row: after a prefill of the whole sequence, each row
  // recomputing its own position must reproduce the full forward there.
  DecodeCase c(/*max_batch=*/2, /*rows=*/3, /*length=*/10, /*seed=*/21);
  (void)c.gpt.forward(c.in.cond, c.in.embeds, &c.cache);
  const std::vector<int64_t> pos = {2, 9, 5};
  at::Tensor embeds =
      at::stack({c.in.embeds[0][pos[0]], c.in.embeds[1][pos[1]], c.in.embeds[2][pos[2]]});
  const at::Tensor step =
      c.gpt.decode_step(embeds, at::tensor(pos, at::kLong), c.cache, SingleStreamDecode::kCausal);
  for (int64_t r = 0; r < c.rows; ++r) {
    EXPECT_LT(test::max_abs_diff(step[r], c.full[r][pos[static_cast<size_t>(r)]]), 1e-4)
        << "row " << r;
  }
}

TEST(ShapeGptDecode, ReferenceModeDiffersFromCausalAfterBos) {
  // Reference mode lets single-block queries see the BOS key only, so from position 1 on it
  // departs from the causal forward; the dual blocks alone cannot make that difference.
  DecodeCase c(/*max_batch=*/1, /*rows=*/2, /*length=*/4, /*seed=*/31);
  (void)c.gpt.forward(c.in.cond, c.in.embeds.narrow(1, 0, 1), &c.cache);
  const at::Tensor step =
      c.gpt.decode_step(c.in.embeds.select(1, 1), at::full({c.rows}, 1, at::kLong), c.cache,
                        SingleStreamDecode::kReference);
  EXPECT_GT(test::max_abs_diff(step, c.full.select(1, 1)), 1e-3);
}

// --- DecodeRunner ------------------------------------------------------------------------

// The addresses of every static buffer a runner owns or views.
std::vector<const void*> buffer_addresses(DecodeRunner& r) {
  std::vector<const void*> out = {
      r.token_ids().data_ptr(),         r.positions().data_ptr(),
      r.output_ids().data_ptr(),        r.output_logits().data_ptr(),
      r.sampling().guidance.data_ptr(), r.sampling().top_p.data_ptr(),
      r.sampling().greedy.data_ptr(),   r.sampling().uniforms.data_ptr()};
  for (const auto& k : r.cache().keys) out.push_back(k.data_ptr());
  for (const auto& v : r.cache().values) out.push_back(v.data_ptr());
  return out;
}

// Drives one guided, greedy batch of one request through the runner exactly as the generator's
// KV path does (prefill into the runner's cache, accept, T - 1 steps).
at::Tensor drive(DecodeRunner& runner, const ShapeGpt& gpt, const GenerationRequest& q) {
  test::prefill(runner, gpt, q);
  for (int64_t i = 1; i < runner.config().total_tokens; ++i)
    runner.step(SingleStreamDecode::kCausal);
  return runner.output_ids().clone();
}

TEST(DecodeRunner, StaticBuffersNeverMove) {
  const test::OneRequestPool c;
  const auto& [engine, gpt, t, pool] = c;
  DecodeRunner runner(gpt, pool.view(2), c.runner_config(/*record_logits=*/true));
  EXPECT_EQ(runner.rows(), 2);

  // The runner's cache is the pool itself.
  const KvState pool_view = pool.view(2);
  for (size_t i = 0; i < pool_view.keys.size(); ++i) {
    EXPECT_EQ(runner.cache().keys[i].data_ptr(), pool_view.keys[i].data_ptr());
    EXPECT_EQ(runner.cache().values[i].data_ptr(), pool_view.values[i].data_ptr());
  }

  const std::vector<const void*> before = buffer_addresses(runner);
  const at::Tensor first = drive(runner, gpt, test::make_request(*engine, 1));
  EXPECT_EQ(buffer_addresses(runner), before) << "after the first batch";
  const at::Tensor second = drive(runner, gpt, test::make_request(*engine, 2));
  EXPECT_EQ(buffer_addresses(runner), before) << "after the second batch";
  EXPECT_EQ(runner.output_ids().sizes().vec(), (std::vector<int64_t>{1, t}));
  EXPECT_EQ(runner.output_logits().sizes().vec(),
            (std::vector<int64_t>{1, t, gpt.config().shape_model_vocab_size}));
  // positions advanced once per token: T after a full batch.
  EXPECT_EQ(runner.positions().item<int64_t>(), t);
  // Two different prompts do produce different outputs through the same buffers.
  EXPECT_FALSE(at::equal(first, second));
}

TEST(DecodeRunner, ReusedRunnerReproducesTheGenerator) {
  // The same runner, reused for a second batch after a different one, gives exactly what the
  // generator gives for that request: no state leaks between batches through the buffers.
  const test::OneRequestPool c;
  const auto& [engine, gpt, t, pool] = c;
  DecodeRunner runner(gpt, pool.view(2), c.runner_config(/*record_logits=*/false));

  const GenerationRequest a = test::make_request(*engine, 5);
  const GenerationRequest b = test::make_request(*engine, 6);
  const at::Tensor expected_a = test::run(*engine, {a}, test::options_with(false)).ids;
  (void)drive(runner, gpt, b);
  EXPECT_TRUE(at::equal(drive(runner, gpt, a), expected_a));
  EXPECT_GT(test::distinct(expected_a), 1);
}

}  // namespace test_decode_runner
}  // namespace cube3d
