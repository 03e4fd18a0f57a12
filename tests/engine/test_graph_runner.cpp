// The graph runner's capture lifecycle (graph_runner.h), checked on the CPU through its
// emulation, which runs the very same warm-ups, scratch position, frozen host-side choices and
// buffer checks as the CUDA runner, with eager replays. The same lifecycle tests run with real
// CUDA graphs where there is a GPU (they skip here).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/engine/engine.h"
#include "cube3d/engine/graph_runner.h"
#include "cube3d/engine/kv_cache.h"
#include "golden_model.h"
#include "one_request_pool.h"
#include "test_model_fixture.h"

namespace cube3d {
namespace test_graph_runner {

struct Target {
  std::string device;
  GraphMode graphs;
};

void PrintTo(const Target& t, std::ostream* os) { *os << t.device << "/" << to_string(t.graphs); }

std::string target_name(const ::testing::TestParamInfo<Target>& info) {
  return (info.param.device == "cpu" ? "Cpu" : "Cuda") +
         std::string(info.param.graphs == GraphMode::kOn ? "Graphs" : "EmulatedGraphs");
}

class GraphRunnerLifecycle : public ::testing::TestWithParam<Target> {
 protected:
  void SetUp() override {
    if (GetParam().device != "cpu" && !at::hasCUDA()) {
      GTEST_SKIP() << "no CUDA device on this machine: scripts/gpu_check.sh runs this on a GPU";
    }
  }

  // A golden model (float32) on the target, with the runners of `plan` captured at load.
  std::unique_ptr<Engine> golden_engine(const testing::GoldenModel& g, const CapturePlan& plan) {
    EngineOptions options;
    options.gpt_weights = g.dir + "/shape_gpt.safetensors";
    options.shape_weights = g.dir + "/shape_tokenizer.safetensors";
    options.device = GetParam().device;
    options.load_text_encoder = false;
    options.cuda_graphs = GetParam().graphs;
    options.capture = plan;
    return Engine::load(g.config, options);
  }

  // Step logits of the GPU's float32 kernels differ from the CPU's in the last bits.
  double logits_tolerance() const { return GetParam().device == "cpu" ? 1e-4 : 1e-3; }
};

GenerationRequest golden_request(const testing::GoldenModel& g) {
  GenerationRequest r;
  r.text_hidden = g.inputs.at("clip_hidden_cond")[0];
  r.uncond_hidden = g.inputs.at("clip_hidden_uncond")[0];
  if (g.config.gpt.use_bbox) r.bbox = g.inputs.at("bbox_xyz")[0];
  r.guidance_scale = 3.0;
  return r;
}

TEST_P(GraphRunnerLifecycle, CapturingInTheMiddleOfABatchChangesNoToken) {
  // The defect this lifecycle fixes: a capture that ran its steps at position 0 overwrote the
  // live BOS key/value slot and the first output column. Here a batch is interrupted after its
  // third token by captures of (a) another mode on its own runner and (b) a new runner sharing
  // the KV pool; its tokens and logits must still be the official ones.
  for (const std::string model : {"tiny_v01", "tiny_v05"}) {
    const testing::GoldenModel g = testing::load_golden(model);
    CapturePlan plan;
    plan.buckets = {1};
    plan.record_logits = true;
    const auto engine = golden_engine(g, plan);
    int captures = 0;
    GenerationOptions options;
    options.record_logits = true;
    options.progress_interval = 1;
    options.on_progress = [&](int64_t done) {
      if (done == 3) {
        CapturePlan more = plan;
        more.modes = {SingleStreamDecode::kCausal, SingleStreamDecode::kReference};
        engine->prepare(more);
        CapturePlan other = plan;
        other.record_logits = false;
        other.modes = {SingleStreamDecode::kReference};
        engine->prepare(other);
        ++captures;
      }
      return true;
    };
    const GenerationResult causal = engine->generate({golden_request(g)}, options);
    ASSERT_EQ(captures, 1) << model;
    EXPECT_TRUE(at::equal(causal.ids, g.expected.at("ids_full_cfg3")))
        << model << "\nours:     " << causal.ids
        << "\nofficial: " << g.expected.at("ids_full_cfg3");
    EXPECT_LT(testing::max_abs_diff(causal.step_logits, g.expected.at("logits_full_cfg3")),
              logits_tolerance())
        << model;

    // The modes captured mid-batch work too, on both runners.
    GenerationOptions reference;
    reference.single_stream_decode = SingleStreamDecode::kReference;
    reference.record_logits = true;
    const GenerationResult recorded = engine->generate({golden_request(g)}, reference);
    EXPECT_TRUE(at::equal(recorded.ids, g.expected.at("ids_kv_official_cfg3"))) << model;
    EXPECT_LT(testing::max_abs_diff(recorded.step_logits, g.expected.at("logits_kv_official_cfg3")),
              logits_tolerance())
        << model;
    reference.record_logits = false;
    EXPECT_TRUE(at::equal(engine->generate({golden_request(g)}, reference).ids,
                          g.expected.at("ids_kv_official_cfg3")))
        << model;
  }
}

TEST_P(GraphRunnerLifecycle, GraphsGiveTheEagerTokensAndLogitsBitForBit) {
  // Greedy and top-p requests mixed in one padded batch: the recorded step always holds the
  // top-p path, eager runs skip it when every request is greedy; the results must not differ.
  const ModelConfig config = test::tiny_config();
  at::Tensor ids[2], logits[2];
  for (const GraphMode graphs : {GraphMode::kOff, GetParam().graphs}) {
    EngineOptions options;
    options.device = GetParam().device;
    options.max_batch = 4;
    options.text_tokens = test::kTextTokens;
    options.load_text_encoder = false;
    options.cuda_graphs = graphs;
    options.capture.buckets = {4};
    options.capture.record_logits = true;
    const auto engine = Engine::load(config, options);
    const bool graphed = graphs != GraphMode::kOff;
    for (const bool sampled : {false, true}) {
      std::vector<GenerationRequest> requests = {test::make_request(*engine, 1),
                                                 test::make_request(*engine, 2, 3.0, 0.9, 7),
                                                 test::make_request(*engine, 3, 1.5)};
      if (!sampled) requests.resize(1);
      const test::Outcome out = test::run(*engine, requests, test::options_with(true, 4));
      const at::Tensor& prev_ids = ids[graphed];
      ids[graphed] = prev_ids.defined() ? at::cat({prev_ids, out.ids}) : out.ids;
      logits[graphed] =
          logits[graphed].defined() ? at::cat({logits[graphed], out.logits}) : out.logits;
    }
  }
  EXPECT_TRUE(at::equal(ids[0], ids[1])) << "eager:\n" << ids[0] << "\ngraphs:\n" << ids[1];
  EXPECT_TRUE(at::equal(logits[0], logits[1]));
  EXPECT_GT(test::distinct(ids[0]), 3);
}

INSTANTIATE_TEST_SUITE_P(Targets, GraphRunnerLifecycle,
                         ::testing::Values(Target{"cpu", GraphMode::kEmulate},
                                           Target{"cuda", GraphMode::kOn},
                                           Target{"cuda", GraphMode::kEmulate}),
                         target_name);

// --- the lifecycle's rules, on the CPU emulation ----------------------------------------------

std::unique_ptr<Engine> emulated_tiny_engine(const CapturePlan& plan, int64_t max_batch = 2) {
  EngineOptions options;
  options.max_batch = max_batch;
  options.text_tokens = test::kTextTokens;
  options.load_text_encoder = false;
  options.cuda_graphs = GraphMode::kEmulate;
  options.capture = plan;
  return Engine::load(test::tiny_config(), options);
}

void expect_refused(Engine& engine, const std::vector<GenerationRequest>& requests,
                    const GenerationOptions& options, const std::string& fragment) {
  try {
    (void)engine.generate(requests, options);
    FAIL() << "expected failed_precondition mentioning '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("captured at engine start"), std::string::npos)
        << e.what();
  }
}

TEST(GraphRunner, NeverCapturesLazily) {
  // Only the variants of the plan exist; everything else is refused, not captured on the spot.
  CapturePlan plan;
  plan.buckets = {2};
  const auto engine = emulated_tiny_engine(plan);
  const GenerationRequest guided = test::make_request(*engine, 1);
  const GenerationRequest unguided = test::make_request(*engine, 1, 0.0);
  EXPECT_NO_THROW((void)engine->generate({guided}, test::options_with(false, 2)));
  expect_refused(*engine, {guided},
                 test::options_with(false, 2, true, SingleStreamDecode::kReference),
                 "mode reference");
  expect_refused(*engine, {guided}, test::options_with(false, 1), "batch 1 with guidance");
  expect_refused(*engine, {unguided}, test::options_with(false, 2), "batch 2 without guidance");
  expect_refused(*engine, {guided}, test::options_with(true, 2), "recording logits");
}

TEST(GraphRunner, EagerEnginesStillMakeRunnersOnDemand) {
  EngineOptions options;
  options.max_batch = 2;
  options.text_tokens = test::kTextTokens;
  options.load_text_encoder = false;
  options.cuda_graphs = GraphMode::kOff;
  const auto engine = Engine::load(test::tiny_config(), options);
  EXPECT_NO_THROW(
      (void)engine->generate({test::make_request(*engine, 1, 0.0)},
                             test::options_with(true, 1, true, SingleStreamDecode::kReference)));
}

// Prefill of one guided greedy request into the runner's rows, then `steps` decode steps.
void start_batch(DecodeRunner& runner, const ShapeGpt& gpt, const GenerationRequest& q,
                 int64_t steps) {
  test::prefill(runner, gpt, q);
  for (int64_t i = 0; i < steps; ++i) runner.step(SingleStreamDecode::kCausal);
}

TEST(GraphRunner, CaptureTouchesNoLiveState) {
  // After a prefill and three steps, capturing another mode leaves the KV cache, the feed
  // buffers and the outputs exactly as they were: the capture steps used the scratch position,
  // whose slot is zeroed again afterwards.
  const test::OneRequestPool c;
  const auto& [engine, gpt, t, pool] = c;
  const auto runner = make_decode_runner(GraphMode::kEmulate, gpt, pool.view(2),
                                         c.runner_config(/*record_logits=*/true));
  runner->capture(SingleStreamDecode::kCausal);
  start_batch(*runner, gpt, test::make_request(*engine, 4), 3);

  std::vector<at::Tensor> cache_before;
  for (const auto& k : runner->cache().keys) cache_before.push_back(k.clone());
  for (const auto& v : runner->cache().values) cache_before.push_back(v.clone());
  const at::Tensor ids = runner->output_ids().clone();
  const at::Tensor logits = runner->output_logits().clone();
  const at::Tensor token = runner->token_ids().clone();
  const at::Tensor position = runner->positions().clone();
  ASSERT_EQ(position.item<int64_t>(), 4);

  runner->capture(SingleStreamDecode::kReference);
  std::vector<at::Tensor> cache_after;
  for (const auto& k : runner->cache().keys) cache_after.push_back(k);
  for (const auto& v : runner->cache().values) cache_after.push_back(v);
  for (size_t i = 0; i < cache_before.size(); ++i) {
    EXPECT_TRUE(at::equal(cache_before[i], cache_after[i])) << "cache tensor " << i;
  }
  EXPECT_TRUE(at::equal(ids, runner->output_ids()));
  EXPECT_TRUE(at::equal(logits, runner->output_logits()));
  EXPECT_TRUE(at::equal(token, runner->token_ids()));
  EXPECT_TRUE(at::equal(position, runner->positions()));
  // The cache did hold live state worth corrupting: the prefill wrote the BOS slot.
  EXPECT_GT(cache_before[0].abs().sum().item<double>(), 0.0);
}

TEST(GraphRunner, AStepNeedsItsModeCaptured) {
  const test::OneRequestPool c;
  const auto& [engine, gpt, t, pool] = c;
  const auto runner = make_decode_runner(GraphMode::kEmulate, gpt, pool.view(2),
                                         c.runner_config(/*record_logits=*/false));
  EXPECT_FALSE(runner->captured(SingleStreamDecode::kCausal));
  try {
    start_batch(*runner, gpt, test::make_request(*engine, 4), 1);
    FAIL() << "a step without a capture must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition) << e.what();
  }
}

TEST(GraphRunner, ReplayOnAReassignedBufferIsAnError) {
  // A real graph keeps reading the memory it was captured on: assigning a new tensor to a
  // static buffer (instead of copy_ into it) would silently feed stale values. The emulation
  // must fail as loudly as that would be wrong, for every static buffer.
  const test::OneRequestPool c;
  const auto& [engine, gpt, t, pool] = c;
  using Reassign = std::function<void(DecodeRunner&)>;
  const std::vector<std::pair<std::string, Reassign>> cases = {
      {"sampling.top_p", [](DecodeRunner& r) { r.sampling().top_p = r.sampling().top_p.clone(); }},
      {"sampling.uniforms",
       [](DecodeRunner& r) { r.sampling().uniforms = r.sampling().uniforms.clone(); }},
      {"positions", [](DecodeRunner& r) { r.positions() = r.positions().clone(); }},
      {"token_ids", [](DecodeRunner& r) { r.token_ids() = r.token_ids().clone(); }},
      {"cache.keys[0]", [](DecodeRunner& r) { r.cache().keys[0] = r.cache().keys[0].clone(); }},
  };
  for (const auto& [name, reassign] : cases) {
    const auto runner = make_decode_runner(GraphMode::kEmulate, gpt, pool.view(2),
                                           c.runner_config(/*record_logits=*/false));
    runner->capture(SingleStreamDecode::kCausal);
    start_batch(*runner, gpt, test::make_request(*engine, 4), 1);  // in place: fine
    reassign(*runner);
    try {
      runner->step(SingleStreamDecode::kCausal);
      FAIL() << name << ": a replay on a reassigned buffer must be refused";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInternal) << e.what();
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

TEST(GraphMode, ParsesAndPrints) {
  for (const GraphMode m : {GraphMode::kOn, GraphMode::kOff, GraphMode::kEmulate}) {
    EXPECT_EQ(parse_graph_mode(to_string(m)), m);
  }
  try {
    (void)parse_graph_mode("true", "--cuda-graphs");
    FAIL() << "expected invalid_argument";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("--cuda-graphs"), std::string::npos);
  }
}

}  // namespace test_graph_runner
}  // namespace cube3d
