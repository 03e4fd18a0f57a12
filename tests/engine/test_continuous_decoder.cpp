// Continuous decoding on the tiny random-weight model: requests that join a running batch at
// any step, in any bucket and next to any neighbours, get exactly the tokens they get alone;
// slots compact, buckets grow and shrink, guidance rows come and go; emulated graphs give the
// eager tokens; bad admissions change nothing.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "continuous_driver.h"
#include "cube3d/core/error.h"
#include "cube3d/engine/continuous_decoder.h"
#include "expect_error.h"
#include "test_model_fixture.h"

namespace cube3d {
namespace test_continuous_decoder {

using test::Arrival;
using test::make_request;
using test::max_abs_diff;
using test::run_schedule;
using test::Trace;

constexpr int64_t kTokens = 12;  // T of the tiny model

at::Tensor shared_uncond(const Engine& engine) {
  return test::seeded_randn({test::kTextTokens, engine.config().gpt.text_model_embed_dim},
                            test::kUncondSeed);
}

std::unique_ptr<Engine> engine_with(GraphMode graphs, int64_t max_batch = 4,
                                    std::vector<int64_t> buckets = {1, 2, 4},
                                    SingleStreamDecode mode = SingleStreamDecode::kCausal) {
  EngineOptions options;
  options.max_batch = max_batch;
  options.text_tokens = test::kTextTokens;
  options.cuda_graphs = graphs;
  options.capture.buckets = std::move(buckets);
  options.capture.guided = true;
  options.capture.unguided = true;
  options.capture.record_logits = true;
  options.capture.modes = {mode};
  return Engine::load(test::tiny_config(), options);
}

// Each request alone, as a static batch of one.
std::vector<test::Outcome> alone(Engine& engine, const std::vector<Arrival>& arrivals,
                                 SingleStreamDecode mode = SingleStreamDecode::kCausal) {
  std::vector<test::Outcome> out;
  for (const Arrival& a : arrivals) {
    out.push_back(
        test::run(engine, {a.request}, test::options_with(true, 1, /*use_kv_cache=*/true, mode)));
  }
  return out;
}

void expect_same_as_alone(const Trace& trace, const std::vector<test::Outcome>& reference) {
  ASSERT_EQ(trace.finished.size(), reference.size());
  for (size_t i = 0; i < reference.size(); ++i) {
    ASSERT_TRUE(trace.finished[i].ids.defined()) << "request " << i << " never finished";
    EXPECT_TRUE(at::equal(trace.finished[i].ids, reference[i].ids[0]))
        << "request " << i << " (admitted at step " << trace.finished[i].admitted_at
        << ")\ncontinuous " << trace.finished[i].ids << "\nalone " << reference[i].ids[0];
    EXPECT_LT(max_abs_diff(trace.finished[i].logits, reference[i].logits[0]), 1e-5)
        << "request " << i;
  }
}

// Seven requests of every kind (guided greedy, guided top-p, unguided greedy and top-p)
// arriving staggered into four slots: slots fill, the queue waits, and every bucket (1, 2, 4)
// and both guidance layouts are used on the way.
std::vector<Arrival> staggered(const Engine& engine) {
  return {
      {0, make_request(engine, 40, 0.0)},             // unguided alone first: bucket 1, no cfg
      {2, make_request(engine, 41, 3.0)},             // guided joins: cfg rows appear
      {3, make_request(engine, 42, 2.0, 0.9, 77)},    // sampled
      {3, make_request(engine, 43, 0.0, 0.8, 5)},     // unguided sampled
      {5, make_request(engine, 44, 3.0, 0.95, 123)},  // waits for a free slot
      {6, make_request(engine, 45, 1.5)},
      {20, make_request(engine, 46, 0.0)},  // after everyone left: a fresh, unguided batch
  };
}

TEST(ContinuousDecoder, StaggeredArrivalsGetTheTokensTheyGetAlone) {
  auto engine = engine_with(GraphMode::kOff);
  const auto arrivals = staggered(*engine);
  const auto reference = alone(*engine, arrivals);
  auto decoder = engine->continuous_decoder({{1, 2, 4}, SingleStreamDecode::kCausal, true},
                                            shared_uncond(*engine));
  const Trace trace = run_schedule(*decoder, arrivals);
  expect_same_as_alone(trace, reference);
  EXPECT_EQ(trace.max_active, 4);
  // Every bucket ran, growing and shrinking, with and without guidance rows.
  for (const int64_t b : {1, 2, 4}) {
    EXPECT_NE(std::find(trace.buckets.begin(), trace.buckets.end(), b), trace.buckets.end())
        << "bucket " << b << " never ran";
  }
  EXPECT_FALSE(trace.guided.front());
  EXPECT_NE(std::find(trace.guided.begin(), trace.guided.end(), true), trace.guided.end());
  EXPECT_FALSE(trace.guided.back());
  EXPECT_EQ(decoder->active(), 0);
  EXPECT_EQ(decoder->bucket(), 0);
  EXPECT_GT(test::distinct(trace.finished[1].ids), 1) << "degenerate model";
}

TEST(ContinuousDecoder, OneJoinPerStepAndOddBucketsKeepParity) {
  // Buckets 1, 3, 5: the unconditional rows shift by less than their count when the bucket
  // changes (3 -> 5 moves rows 3..5 to 5..7), the overlapping move.
  auto engine = engine_with(GraphMode::kOff, 5, {1, 3, 5});
  const auto arrivals = staggered(*engine);
  const auto reference = alone(*engine, arrivals);
  auto decoder = engine->continuous_decoder({{1, 3, 5}, SingleStreamDecode::kCausal, true},
                                            shared_uncond(*engine));
  const Trace trace = run_schedule(*decoder, arrivals, /*joins_per_step=*/1);
  expect_same_as_alone(trace, reference);
  EXPECT_NE(std::find(trace.buckets.begin(), trace.buckets.end(), 5), trace.buckets.end());
}

TEST(ContinuousDecoder, EmulatedGraphsGiveTheEagerTokens) {
  auto eager = engine_with(GraphMode::kOff);
  auto emulated = engine_with(GraphMode::kEmulate);
  const auto arrivals = staggered(*eager);
  auto eager_decoder = eager->continuous_decoder({{1, 2, 4}, SingleStreamDecode::kCausal, true},
                                                 shared_uncond(*eager));
  auto graph_decoder = emulated->continuous_decoder({{1, 2, 4}, SingleStreamDecode::kCausal, true},
                                                    shared_uncond(*emulated));
  const Trace a = run_schedule(*eager_decoder, arrivals);
  const Trace b = run_schedule(*graph_decoder, arrivals);
  ASSERT_EQ(a.finished.size(), b.finished.size());
  for (size_t i = 0; i < a.finished.size(); ++i) {
    EXPECT_TRUE(at::equal(a.finished[i].ids, b.finished[i].ids)) << "request " << i;
  }
  EXPECT_EQ(a.buckets, b.buckets);
  // And both equal the requests alone (static, eager).
  expect_same_as_alone(b, alone(*eager, arrivals));
}

TEST(ContinuousDecoder, ReferenceSingleStreamModeKeepsParity) {
  auto engine = engine_with(GraphMode::kOff, 4, {1, 2, 4}, SingleStreamDecode::kReference);
  const auto arrivals = staggered(*engine);
  const auto reference = alone(*engine, arrivals, SingleStreamDecode::kReference);
  auto decoder = engine->continuous_decoder({{1, 2, 4}, SingleStreamDecode::kReference, true},
                                            shared_uncond(*engine));
  expect_same_as_alone(run_schedule(*decoder, arrivals), reference);
}

TEST(ContinuousDecoder, ReleasingFromTheMiddleCompactsTheSlots) {
  auto engine = engine_with(GraphMode::kOff);
  auto decoder = engine->continuous_decoder({{1, 2, 4}, SingleStreamDecode::kCausal, true},
                                            shared_uncond(*engine));
  const std::vector<GenerationRequest> requests = {make_request(*engine, 60, 3.0),
                                                   make_request(*engine, 61, 3.0, 0.9, 3),
                                                   make_request(*engine, 62, 0.0)};
  const auto ids = decoder->admit(requests);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(decoder->bucket(), 4);
  EXPECT_TRUE(decoder->guided());
  for (int i = 0; i < 4; ++i) decoder->step();
  EXPECT_EQ(decoder->tokens_done(ids[0]), 5);
  // The first leaves (cancelled): the last moves into its slot and the batch shrinks to 2.
  decoder->release(ids[0]);
  EXPECT_EQ(decoder->slots(), (std::vector<ContinuousDecoder::SlotId>{ids[2], ids[1]}));
  EXPECT_EQ(decoder->bucket(), 2);
  while (!decoder->done(ids[1])) decoder->step();
  const auto reference = alone(*engine, {{0, requests[1]}, {0, requests[2]}});
  EXPECT_TRUE(at::equal(decoder->ids(ids[1]), reference[0].ids[0]));
  EXPECT_TRUE(at::equal(decoder->ids(ids[2]), reference[1].ids[0]));
  // The guided one leaves: the unguided one runs on without guidance rows, in bucket 1.
  decoder->release(ids[1]);
  EXPECT_EQ(decoder->bucket(), 1);
  EXPECT_FALSE(decoder->guided());
  decoder->step();  // a done slot steps as padding without harm
  EXPECT_TRUE(at::equal(decoder->ids(ids[2]), reference[1].ids[0]));
  EXPECT_EQ(decoder->tokens_done(ids[2]), kTokens);
}

TEST(ContinuousDecoder, BadAdmissionsChangeNothing) {
  auto engine = engine_with(GraphMode::kOff);
  auto decoder = engine->continuous_decoder({{1, 2, 4}, SingleStreamDecode::kCausal, true},
                                            shared_uncond(*engine));
  const GenerationRequest a = make_request(*engine, 70, 3.0);
  const auto running = decoder->admit({a});
  decoder->step();

  testing::expect_error([&] { decoder->admit({}); }, ErrorCode::kInvalidArgument, "no requests");
  GenerationRequest bad = make_request(*engine, 71, 3.0);
  bad.top_p = 1.5;
  testing::expect_error(
      [&] {
        decoder->admit({make_request(*engine, 72, 3.0), bad});
      },
      ErrorCode::kInvalidArgument, "request 1: top_p");
  GenerationRequest other_uncond = make_request(*engine, 73, 3.0);
  other_uncond.uncond_hidden = test::seeded_randn(other_uncond.uncond_hidden.sizes().vec(), 5);
  testing::expect_error([&] { decoder->admit({other_uncond}); }, ErrorCode::kInvalidArgument,
                        "uncond_hidden differs");
  const std::vector<GenerationRequest> four(4, make_request(*engine, 74, 3.0));
  testing::expect_error([&] { decoder->admit(four); }, ErrorCode::kResourceExhausted,
                        "3 free slots");
  testing::expect_error([&] { decoder->release(9999); }, ErrorCode::kNotFound, "no active slot");
  EXPECT_EQ(decoder->active(), 1);
  EXPECT_EQ(decoder->bucket(), 1);

  while (!decoder->done(running[0])) decoder->step();
  EXPECT_TRUE(at::equal(decoder->ids(running[0]), alone(*engine, {{0, a}})[0].ids[0]));
}

TEST(ContinuousDecoder, BucketsMustBePreparedInAGraphMode) {
  auto engine = engine_with(GraphMode::kEmulate, 4, {1, 4});
  auto decoder = engine->continuous_decoder({{1, 2, 4}, SingleStreamDecode::kCausal, true},
                                            shared_uncond(*engine));
  (void)decoder->admit({make_request(*engine, 80, 3.0)});
  testing::expect_error([&] { decoder->admit({make_request(*engine, 81, 3.0)}); },
                        ErrorCode::kFailedPrecondition, "no decode graph was captured for batch 2");
  EXPECT_EQ(decoder->active(), 1);  // the failed relayout moved nothing
  testing::expect_error(
      [&] {
        (void)engine->continuous_decoder({{2, 1}, SingleStreamDecode::kCausal, false},
                                         shared_uncond(*engine));
      },
      ErrorCode::kInvalidArgument, "strictly increasing");
}

TEST(ContinuousDecoder, NeedsTheEmptyPromptsCondition) {
  auto engine = engine_with(GraphMode::kOff);
  testing::expect_error(
      [&] {
        (void)engine->continuous_decoder({}, at::zeros({3, 3}));
      },
      ErrorCode::kInvalidArgument, "empty prompt's condition");
}

}  // namespace test_continuous_decoder
}  // namespace cube3d
