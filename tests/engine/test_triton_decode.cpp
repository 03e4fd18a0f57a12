// The engine's side of the Triton decode path (engine/triton_decode.h, engine/decode_kernels.h):
// the decode_kernels switch, its refusals where the kernels cannot run, and the recording mode on
// the CPU: one step of the demo model bound to its real tensors counts the launches and bytes the
// kernels' own plan gives for these sizes (tests/kernels/test_decode_plan.cpp), leaves the cache
// alone, and leaves a handful of ATen operations around the kernels. The kernels' arithmetic is
// checked under the interpreter (tests/kernels) and on a GPU by CudaPath.Triton*.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/core/model_config.h"
#include "cube3d/engine/decode_kernels.h"
#include "cube3d/engine/engine.h"
#include "cube3d/engine/graph_runner.h"
#include "cube3d/engine/op_count.h"
#include "cube3d/engine/triton_decode.h"
#include "golden_model.h"

namespace cube3d::test_triton_decode {

std::unique_ptr<Engine> demo_engine(int64_t max_batch = 1) {
  EngineOptions options;
  options.max_batch = max_batch;
  options.load_text_encoder = false;
  return Engine::load(load_model_config(testing::source_dir() + "/models/demo.yaml"), options);
}

TEST(DecodeKernels, ParsesItsTwoNamesAndRefusesOthers) {
  EXPECT_EQ(parse_decode_kernels("torch"), DecodeKernels::kTorch);
  EXPECT_EQ(parse_decode_kernels("triton"), DecodeKernels::kTriton);
  EXPECT_EQ(to_string(DecodeKernels::kTriton), "triton");
  try {
    parse_decode_kernels("cuda", "--decode-kernels");
    FAIL() << "'cuda' was taken";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(e.what(), "--decode-kernels: 'cuda' is not one of torch, triton");
  }
}

TEST(TritonDecode, AnEngineOnTheCpuRefusesTriton) {
  EngineOptions options;
  options.load_text_encoder = false;
  options.decode_kernels = DecodeKernels::kTriton;
  try {
    Engine::load(load_model_config(testing::source_dir() + "/models/demo.yaml"), options);
    FAIL() << "the CPU took decode_kernels: triton";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    const std::string what = e.what();
    EXPECT_NE(what.find("decode_kernels: triton"), std::string::npos) << what;
    EXPECT_NE(what.find(triton_kernels_compiled() ? "CUDA device" : "no Triton kernels"),
              std::string::npos)
        << what;
  }
}

TEST(TritonDecode, UnsupportedShapesAreNamed) {
  const ModelConfig demo = load_model_config(testing::source_dir() + "/models/demo.yaml");
  if (!triton_kernels_compiled()) GTEST_SKIP() << "this build has no Triton kernels";
  const at::Device cuda(at::kCUDA, 0);
  EXPECT_EQ(triton_decode_unavailable(demo.gpt, at::kBFloat16, cuda, 16), std::nullopt);
  EXPECT_NE(triton_decode_unavailable(demo.gpt, at::kFloat, cuda, 16), std::nullopt);
  const std::optional<std::string> rows =
      triton_decode_unavailable(demo.gpt, at::kBFloat16, cuda, 33);
  ASSERT_TRUE(rows);
  EXPECT_NE(rows->find("66 rows"), std::string::npos) << *rows;
  GptConfig odd = demo.gpt;
  odd.n_head = 8;  // head dim 16
  const std::optional<std::string> head = triton_decode_unavailable(odd, at::kBFloat16, cuda, 1);
  ASSERT_TRUE(head);
  EXPECT_NE(head->find("head dim 16"), std::string::npos) << *head;
}

TEST(TritonDecode, RecordingCountsTheDemoStepBoundToItsTensors) {
  const auto engine = demo_engine();
  const DecodeStepLaunches step =
      count_decode_step_launches(engine->gpt(), engine->kv_cache(), 1, true,
                                 engine->tokens_per_shape(), SingleStreamDecode::kCausal);
  // kernels/decode_plan.h for the demo's sizes at bucket 1 with guidance in float32 (the CPU
  // model's dtype): 5 blocks x 6 launches and the logits, as its virtual buffers give.
  EXPECT_EQ(step.kernels.launches, 31);
  EXPECT_EQ(step.kernels.bytes_read, 6783936);
  EXPECT_EQ(step.kernels.bytes_written, 78720);
  EXPECT_EQ(step.kernels.by_kernel.at("attention_kernel").launches, 5);
  // Around the kernels only the token choice and the bookkeeping stay libtorch's (argmax,
  // writing the token and its position): no linear, no attention, no norm.
  std::string names;
  for (const auto& [name, n] : step.aten.top_level_by_name) names += name + " ";
  SCOPED_TRACE(names);
  EXPECT_LE(step.aten.top_level_compute(), 8);
  EXPECT_EQ(step.aten.top_level_by_name.count("aten::linear"), 0u);
  EXPECT_EQ(step.aten.top_level_by_name.count("aten::layer_norm"), 0u);
  // The reference single-stream decode launches the same kernels.
  const DecodeStepLaunches reference =
      count_decode_step_launches(engine->gpt(), engine->kv_cache(), 1, true,
                                 engine->tokens_per_shape(), SingleStreamDecode::kReference);
  EXPECT_EQ(reference.kernels.launches, step.kernels.launches);
  EXPECT_EQ(reference.kernels.bytes_read, step.kernels.bytes_read);
}

TEST(TritonDecode, RecordingRunsNothingThroughTheGraphLifecycle) {
  // The emulated graph runner's capture (warm-ups, the recorded step) and replays, in recording
  // mode: every step is counted, none touches the KV cache.
  const auto engine = demo_engine(2);
  const KvCache& pool = engine->kv_cache();
  std::vector<at::Tensor> before;
  for (const at::Tensor& k : pool.pool().keys) before.push_back(k.clone());
  DecodeRunnerConfig config;
  config.batch = 2;
  config.total_tokens = engine->tokens_per_shape();
  config.decode_kernels = DecodeKernels::kTriton;
  config.record_launches = true;
  const auto runner = make_decode_runner(GraphMode::kEmulate, engine->gpt(), pool.view(4), config);
  runner->capture(SingleStreamDecode::kCausal);
  runner->step(SingleStreamDecode::kCausal);
  runner->step(SingleStreamDecode::kCausal);
  ASSERT_NE(runner->triton(), nullptr);
  EXPECT_EQ(runner->triton()->recorded_runs(), GraphDecodeRunner::kWarmupSteps + 2);
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_TRUE(at::equal(pool.pool().keys[i], before[i])) << "block " << i;
  }
}

}  // namespace cube3d::test_triton_decode
