// The setup of the decode runner tests (test_decode_runner.cpp, test_graph_runner.cpp): a tiny
// engine and a KV pool of two rows, enough for one guided request of the engine's full length.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>

#include "cube3d/engine/decode_runner.h"
#include "cube3d/engine/engine.h"
#include "cube3d/engine/kv_cache.h"
#include "test_model_fixture.h"

namespace cube3d::test {

struct OneRequestPool {
  OneRequestPool()
      : engine(tiny_engine(1)),
        gpt(engine->gpt()),
        t(engine->tokens_per_shape()),
        pool(gpt.config(), 2, kTextTokens, t, at::kFloat, at::kCPU) {}

  // A runner's config for that one guided request over all T tokens.
  DecodeRunnerConfig runner_config(bool record_logits) const {
    return DecodeRunnerConfig{1, true, t, record_logits};
  }

  std::unique_ptr<Engine> engine;
  const ShapeGpt& gpt;
  const int64_t t;  // tokens per shape
  const KvCache pool;
};

}  // namespace cube3d::test
