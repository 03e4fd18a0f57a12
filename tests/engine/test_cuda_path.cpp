// The CUDA path: graph runners per bucket, bf16 and float32 on the device. The device tests
// skip with a reason on machines without a GPU (CI); the bookkeeping around them runs anywhere.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <tuple>
#include <vector>

#include "continuous_driver.h"
#include "cube3d/core/error.h"
#include "cube3d/core/model_config.h"
#include "cube3d/engine/cuda_graph_runner.h"
#include "cube3d/engine/decode_kernels.h"
#include "cube3d/engine/engine.h"
#include "cube3d/engine/fused_decode.h"
#include "cube3d/engine/generator.h"
#include "cube3d/engine/graph_mode.h"
#include "cube3d/engine/kv_cache.h"
#include "cube3d/engine/triton_decode.h"
#include "cube3d/model/layers.h"
#include "golden_model.h"
#include "test_model_fixture.h"

namespace cube3d {
namespace test_cuda_path {

#define CUBE3D_REQUIRE_GPU()                             \
  if (!at::hasCUDA())                                    \
  GTEST_SKIP() << "no CUDA device on this machine: the " \
                  "CUDA path is checked by scripts/gpu_check.sh on a GPU"

ModelConfig demo_config() { return load_model_config(testing::source_dir() + "/models/demo.yaml"); }

GenerationRequest demo_request(const ModelConfig& config, uint64_t seed, bool sample) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  GenerationRequest r;
  r.text_hidden = at::randn({77, config.gpt.text_model_embed_dim}, gen, at::kFloat);
  r.uncond_hidden = at::randn({77, config.gpt.text_model_embed_dim}, gen, at::kFloat);
  r.guidance_scale = 3.0;
  if (sample) r.top_p = 0.9;
  r.seed = seed;
  return r;
}

TEST(CudaPath, GraphRunnerIsCompiledInWhereThereIsAGpu) {
  // A build without the CUDA toolkit would silently run graph-kv eagerly: on a GPU machine
  // that is a broken build, not a skip.
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device on this machine";
  EXPECT_TRUE(cuda_graph_runner_compiled());
  EXPECT_TRUE(cuda_graphs_available());
}

TEST(CudaPath, GraphRunnerRefusesWithoutADevice) {
  if (at::hasCUDA()) GTEST_SKIP() << "this machine has a CUDA device";
  EXPECT_FALSE(cuda_graphs_available());
  const testing::GoldenModel g = testing::load_golden("tiny_v01");
  KvCache cache(g.config.gpt, 2, g.config.cond_len(), g.tokens(), at::kFloat, at::kCPU);
  try {
    make_cuda_graph_runner(*g.gpt, cache.view(2), DecodeRunnerConfig{1, true, g.tokens(), false});
    FAIL() << "expected failed_precondition";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
  }
}

TEST(CudaPath, GeneratorRejectsGraphsForACpuModel) {
  const testing::GoldenModel g = testing::load_golden("tiny_v01");
  try {
    Generator generator(*g.gpt, 1, g.tokens(), g.config.cond_len(), GraphMode::kOn);
    FAIL() << "expected invalid_argument";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("cuda_graphs"), std::string::npos);
  }
}

TEST(CudaPath, CpuEngineIgnoresTheGraphSwitch) {
  // cuda_graphs defaults to on; on the CPU the engine must fall back to the eager runner.
  EngineOptions options;
  options.load_text_encoder = false;
  const auto engine = Engine::load(demo_config(), options);
  EXPECT_EQ(engine->graph_mode(), GraphMode::kOff);
}

TEST(CudaPath, GoldenTokensOnTheGpuInFloat32) {
  CUBE3D_REQUIRE_GPU();
  for (const std::string model : {"tiny_v01", "tiny_v05"}) {
    const testing::GoldenModel g = testing::load_golden(model);
    for (const bool graphs : {false, true}) {
      for (const auto mode : {SingleStreamDecode::kCausal, SingleStreamDecode::kReference}) {
        EngineOptions options;
        options.gpt_weights = g.dir + "/shape_gpt.safetensors";
        options.shape_weights = g.dir + "/shape_tokenizer.safetensors";
        options.device = "cuda";
        options.load_text_encoder = false;
        options.cuda_graphs = graphs ? GraphMode::kOn : GraphMode::kOff;
        options.capture.modes = {mode};
        const auto engine = Engine::load(g.config, options);
        GenerationRequest r;
        r.text_hidden = g.inputs.at("clip_hidden_cond")[0];
        r.uncond_hidden = g.inputs.at("clip_hidden_uncond")[0];
        if (g.config.gpt.use_bbox) r.bbox = g.inputs.at("bbox_xyz")[0];
        GenerationOptions gen;
        gen.single_stream_decode = mode;
        const GenerationResult result = engine->generate({r}, gen);
        const char* key =
            mode == SingleStreamDecode::kCausal ? "ids_full_cfg3" : "ids_kv_official_cfg3";
        EXPECT_TRUE(at::equal(result.ids, g.expected.at(key)))
            << model << " graphs " << graphs << " " << to_string(mode);
      }
    }
  }
}

// The demo model on the device in `dtype`, batches of up to four, with CUDA graphs or without:
// the two engines that the graphs-versus-eager comparisons load.
EngineOptions graphs_or_eager_options(const std::string& dtype, bool graphs) {
  EngineOptions options;
  options.device = "cuda";
  options.dtype = dtype;
  options.max_batch = 4;
  options.load_text_encoder = false;
  options.cuda_graphs = graphs ? GraphMode::kOn : GraphMode::kOff;
  return options;
}

TEST(CudaPath, GraphReplayEqualsEagerBitForBit) {
  CUBE3D_REQUIRE_GPU();
  const ModelConfig config = demo_config();
  for (const std::string dtype : {"bfloat16", "float32"}) {
    at::Tensor ids[2], logits[2];
    for (const bool graphs : {false, true}) {
      EngineOptions options = graphs_or_eager_options(dtype, graphs);
      options.capture.buckets = {4};
      options.capture.record_logits = true;
      const auto engine = Engine::load(config, options);
      GenerationOptions gen;
      gen.record_logits = true;
      gen.bucket = 4;
      const GenerationResult r =
          engine->generate({demo_request(config, 1, false), demo_request(config, 2, true),
                            demo_request(config, 3, true)},
                           gen);
      ids[graphs] = r.ids;
      logits[graphs] = r.step_logits;
    }
    EXPECT_TRUE(at::equal(ids[0], ids[1])) << dtype;
    EXPECT_TRUE(at::equal(logits[0], logits[1])) << dtype;
  }
}

// Continuous decoding on the device: requests joining and leaving captured graphs of every
// bucket give bit for bit the tokens of the same schedule run eagerly (the graphs hold no stale
// state across layout changes), and in float32 the tokens each request gets alone.
TEST(CudaPath, ContinuousDecodingWithGraphsEqualsEagerAndAlone) {
  CUBE3D_REQUIRE_GPU();
  const ModelConfig config = demo_config();
  const std::vector<int64_t> buckets = {1, 2, 4};
  std::vector<test::Arrival> arrivals;
  for (uint64_t i = 0; i < 7; ++i) {
    GenerationRequest r = demo_request(config, 100 + i, i % 2 == 1);
    r.uncond_hidden = demo_request(config, 99, false).uncond_hidden;  // one shared empty prompt
    if (i % 3 == 2) r.guidance_scale = 0;
    arrivals.push_back({static_cast<int64_t>(3 * i), r});
  }
  for (const std::string dtype : {"bfloat16", "float32"}) {
    std::vector<test::Trace> traces;
    std::vector<at::Tensor> alone;
    for (const bool graphs : {false, true}) {
      EngineOptions options = graphs_or_eager_options(dtype, graphs);
      options.capture.buckets = buckets;
      options.capture.unguided = true;
      const auto engine = Engine::load(config, options);
      auto decoder = engine->continuous_decoder({buckets, SingleStreamDecode::kCausal, false},
                                                arrivals.front().request.uncond_hidden);
      traces.push_back(test::run_schedule(*decoder, arrivals, 1));
      if (!graphs) {
        GenerationOptions gen;
        gen.bucket = 1;
        for (const auto& a : arrivals) alone.push_back(engine->generate({a.request}, gen).ids[0]);
      }
    }
    int64_t same_as_alone = 0;
    for (size_t i = 0; i < arrivals.size(); ++i) {
      EXPECT_TRUE(at::equal(traces[0].finished[i].ids, traces[1].finished[i].ids))
          << dtype << ": request " << i << " differs between graphs and eager";
      same_as_alone += at::equal(traces[1].finished[i].ids, alone[i]) ? 1 : 0;
    }
    EXPECT_EQ(traces[0].buckets, traces[1].buckets);
    std::cout << "[ info ] " << dtype << ": " << same_as_alone << " of " << arrivals.size()
              << " continuous requests have the tokens they get alone\n";
    if (dtype == "float32") {
      EXPECT_EQ(same_as_alone, static_cast<int64_t>(arrivals.size()));
    }
  }
}

TEST(CudaPath, Bf16TeacherForcedLogitsStayCloseToCpuFloat32) {
  CUBE3D_REQUIRE_GPU();
  // bf16 keeps 8 bits of mantissa: logits of these random models (magnitude ~5) move by a few
  // hundredths. The stated tolerance: 5% of the largest logit magnitude.
  for (const std::string model : {"tiny_v01", "tiny_v05"}) {
    const testing::GoldenModel cpu = testing::load_golden(model);
    EngineOptions options;
    options.gpt_weights = cpu.dir + "/shape_gpt.safetensors";
    options.shape_weights = cpu.dir + "/shape_tokenizer.safetensors";
    options.device = "cuda";
    options.dtype = "bfloat16";
    options.load_text_encoder = false;
    const auto gpu = Engine::load(cpu.config, options);
    const at::Tensor bbox = cpu.config.gpt.use_bbox ? cpu.inputs.at("bbox_xyz") : at::Tensor();
    const at::Tensor ids = cpu.expected.at("ids_full_cfg3")[0];
    const at::Tensor prefix = at::cat(
        {at::full({1}, cpu.config.gpt.bos_id(), at::kLong), ids.narrow(0, 0, cpu.tokens() - 1)});
    const auto run = [&](const ShapeGpt& gpt, const at::Device& device) {
      const at::Tensor cond = gpt.encode_condition(cpu.inputs.at("clip_hidden_cond").to(device),
                                                   bbox.defined() ? bbox.to(device) : bbox);
      return gpt.forward(cond, gpt.embed(prefix.to(device)).unsqueeze(0)).to(at::kCPU, at::kFloat);
    };
    const at::Tensor reference = run(*cpu.gpt, at::kCPU);
    const at::Tensor bf16 = run(gpu->gpt(), gpu->device());
    const double scale = reference.abs().max().item<double>();
    EXPECT_LT(testing::max_abs_diff(reference, bf16), 0.05 * scale) << model;
  }
}

TEST(CudaPath, OccupancyOnTheGpuMatchesTheCpu) {
  CUBE3D_REQUIRE_GPU();
  const testing::GoldenModel g = testing::load_golden("tiny_v01");
  EngineOptions options;
  options.gpt_weights = g.dir + "/shape_gpt.safetensors";
  options.shape_weights = g.dir + "/shape_tokenizer.safetensors";
  options.device = "cuda";
  options.load_text_encoder = false;
  const auto gpu = Engine::load(g.config, options);
  const at::Tensor grid = gpu->occupancy_grid(g.expected.at("latents").to(gpu->device()), 4, 1000);
  EXPECT_LT(testing::max_abs_diff(grid, g.expected.at("grid_logits_res4")), 1e-3);
}

// A bf16 engine on the GPU whose shape GPT has head_dim 128, the real models' size, which the
// fused kernels take.
std::unique_ptr<Engine> head_dim_128_engine() {
  EngineOptions options;
  options.device = "cuda";
  options.dtype = "bfloat16";
  options.text_tokens = test::kTextTokens;
  options.load_text_encoder = false;
  return Engine::load(
      parse_model_config(test::tiny_yaml(1, 77, /*n_embd=*/256), "head_dim_128.yaml"), options);
}

TEST(CudaPath, FusedQkNormRopeMatchesTheUnfusedOps) {
  // The kernel against the libtorch ops it replaces, on fresh random inputs: q returned, k in
  // the cache at each row's slot, every other slot untouched.
  CUBE3D_REQUIRE_GPU();
  const auto engine = head_dim_128_engine();
  const DecodeStepFusions fusions = decode_step_fusions(engine->gpt());
  ASSERT_TRUE(fusions.qk_norm_rope_store) << "the kernels do not apply to bf16 on CUDA";
  const at::Device cuda = engine->device();
  const int64_t rows = 5, heads = 2, hd = 128, slots_len = 20;
  const auto bf16 = at::TensorOptions().dtype(at::kBFloat16).device(cuda);
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(cuda);
  for (int trial = 0; trial < 3; ++trial) {
    const at::Tensor qk =
        (at::randn({rows, 1, 2 * heads * hd}, f32) * (1 + trial)).to(at::kBFloat16);
    const at::Tensor q_norm = 1 + 0.1 * at::randn({hd}, f32);
    const at::Tensor k_norm = 1 + 0.1 * at::randn({hd}, f32);
    const at::Tensor positions = at::randint(0, 16, {rows, 1}, f32.dtype(at::kLong));
    const RopeTables tables = make_rope_tables(hd, 16, 10000.0);
    const at::Tensor cos = tables.cos.to(cuda).index({positions}).unsqueeze(1);
    const at::Tensor sin = tables.sin.to(cuda).index({positions}).unsqueeze(1);
    const at::Tensor slots = at::randint(0, slots_len, {rows}, f32.dtype(at::kLong));
    at::Tensor keys = at::full({rows, heads, slots_len, hd}, std::nan(""), bf16);

    const at::Tensor q = fusions.qk_norm_rope_store(qk, q_norm, k_norm, cos, sin, keys, slots);

    const auto halves = qk.chunk(2, -1);
    const at::Tensor cis = rope_cis(cos, sin);
    const at::Tensor q_ref =
        apply_rope_complex(rms_norm(split_heads(halves[0], heads), q_norm, kQkNormEps), cis);
    const at::Tensor k_ref =
        apply_rope_complex(rms_norm(split_heads(halves[1], heads), k_norm, kQkNormEps), cis);
    ASSERT_EQ(q.sizes(), q_ref.sizes());
    const at::Tensor k_got = keys.gather(2, slots.view({-1, 1, 1, 1}).expand({rows, heads, 1, hd}));
    for (const auto& [got, ref, name] :
         {std::tuple{q, q_ref, "q"}, std::tuple{k_got, k_ref, "k"}}) {
      const at::Tensor g = got.to(at::kFloat), r = ref.to(at::kFloat);
      ASSERT_FALSE(g.isnan().any().item<bool>()) << name << ": not every element was written";
      // bf16 keeps 8 bits: at most a rounding step apart, and most elements identical.
      const double scale = r.abs().max().item<double>();
      EXPECT_LT((g - r).abs().max().item<double>(), scale / 64) << name;
      EXPECT_GT(g.eq(r).to(at::kFloat).mean().item<double>(), 0.9) << name;
    }
    // Slots other than each row's own stay as they were (NaN poison).
    const at::Tensor written = at::zeros({rows, 1, slots_len, 1}, f32.dtype(at::kBool))
                                   .scatter_(2, slots.view({-1, 1, 1, 1}), true)
                                   .expand({rows, heads, slots_len, hd});
    EXPECT_TRUE(keys.isnan().logical_not().eq(written).all().item<bool>()) << "trial " << trial;
  }
}

TEST(CudaPath, FusedDecodeStepMatchesTheUnfusedStep) {
  // One decode step of the whole model, fused and unfused, from the same cache: logits close
  // (bf16 rounding through three blocks), and the same argmax on nearly every row.
  CUBE3D_REQUIRE_GPU();
  const auto engine = head_dim_128_engine();
  const ShapeGpt& gpt = engine->gpt();
  const DecodeStepFusions fusions = decode_step_fusions(gpt);
  ASSERT_TRUE(fusions.qk_norm_rope_store);
  const int64_t rows = 8, t = engine->tokens_per_shape();
  const KvCache pool(gpt.config(), rows, 6, t, at::kBFloat16, engine->device());
  KvState cache = pool.view(rows);
  const at::Tensor cond =
      gpt.encode_condition(at::randn({rows, 6, 16}).to(engine->device()), at::Tensor());
  const at::Tensor ids = at::randint(0, 32, {rows, 5}, at::kLong).to(engine->device());
  (void)gpt.forward(cond, gpt.embed(ids), &cache);
  KvState copy = pool.view(rows);
  std::vector<at::Tensor> saved;
  for (size_t i = 0; i < cache.keys.size(); ++i) saved.push_back(cache.keys[i].clone());
  const at::Tensor positions = at::full({rows}, 5, at::kLong).to(engine->device());
  const at::Tensor next = gpt.embed(at::randint(0, 32, {rows}, at::kLong).to(engine->device()));
  const at::Tensor fused =
      gpt.decode_step(next, positions, cache, SingleStreamDecode::kCausal, fusions).to(at::kFloat);
  for (size_t i = 0; i < saved.size(); ++i) copy.keys[i].copy_(saved[i]);
  const at::Tensor plain =
      gpt.decode_step(next, positions, copy, SingleStreamDecode::kCausal).to(at::kFloat);
  const double scale = plain.abs().max().item<double>();
  EXPECT_LT((fused - plain).abs().max().item<double>(), 0.05 * scale);
  EXPECT_GE(fused.argmax(-1).eq(plain.argmax(-1)).sum().item<int64_t>(), rows - 1);
}

TEST(CudaPath, TritonKernelsAreCompiledWhereThereIsAGpu) {
  // A CUDA build without the cubins would refuse decode_kernels: triton: on a GPU machine that
  // is a broken build (no triton in the build's Python), not a skip.
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device on this machine";
  EXPECT_TRUE(triton_kernels_compiled());
}

// decode_kernels: triton against torch on the device in bf16, eager and graph-captured, for the
// demo model (head dim 32) and a head-dim-128 one: the guided logits of every step close (bf16
// rounding through every block), and the same greedy tokens for nearly every request.
TEST(CudaPath, TritonDecodeMatchesTheTorchPath) {
  CUBE3D_REQUIRE_GPU();
  for (const bool head_dim_128 : {false, true}) {
    const ModelConfig config =
        head_dim_128 ? parse_model_config(test::tiny_yaml(1, 77, /*n_embd=*/256), "hd128.yaml")
                     : demo_config();
    const int64_t text_tokens = head_dim_128 ? test::kTextTokens : 77;
    std::vector<GenerationRequest> requests;
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
      GenerationRequest r;
      r.text_hidden = at::randn({text_tokens, config.gpt.text_model_embed_dim}, gen, at::kFloat);
      r.uncond_hidden = at::randn({text_tokens, config.gpt.text_model_embed_dim}, gen, at::kFloat);
      requests.push_back(r);
    }
    for (const bool graphs : {false, true}) {
      GenerationResult result[2];
      for (const DecodeKernels kernels : {DecodeKernels::kTorch, DecodeKernels::kTriton}) {
        EngineOptions options = graphs_or_eager_options("bfloat16", graphs);
        options.text_tokens = text_tokens;
        options.capture.buckets = {4};
        options.capture.record_logits = true;
        options.decode_kernels = kernels;
        const auto engine = Engine::load(config, options);
        GenerationOptions gen;
        gen.record_logits = true;
        gen.bucket = 4;
        result[kernels == DecodeKernels::kTriton] = engine->generate(requests, gen);
      }
      const std::string what =
          std::string(head_dim_128 ? "head dim 128" : "demo") + (graphs ? ", graphs" : "");
      // Step 1's logits follow the same token in both; later steps only while the tokens agree.
      const at::Tensor torch_first = result[0].step_logits.select(1, 1);
      const at::Tensor triton_first = result[1].step_logits.select(1, 1);
      const double scale = torch_first.abs().max().item<double>();
      EXPECT_LT((triton_first - torch_first).abs().max().item<double>(), 0.05 * scale) << what;
      int64_t same = 0;
      for (int64_t i = 0; i < 3; ++i) same += at::equal(result[0].ids[i], result[1].ids[i]);
      EXPECT_GE(same, 2) << what << ": greedy tokens of " << same << " of 3 requests agree";
    }
  }
}

}  // namespace test_cuda_path
}  // namespace cube3d
