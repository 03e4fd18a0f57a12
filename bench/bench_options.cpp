// cube3d-bench's flags and the names of its decode modes (bench_options.h).
#include "bench_options.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <string>
#include <vector>

#include "cube3d/cli/cli_args.h"
#include "cube3d/core/error.h"

namespace cube3d::bench {
namespace {

struct ModeName {
  Mode mode;
  const char* name;
};
constexpr std::array<ModeName, 3> kModes = {{{Mode::kEagerNoCache, "eager-nocache"},
                                             {Mode::kEagerKv, "eager-kv"},
                                             {Mode::kGraphKv, "graph-kv"}}};

std::vector<std::string> split_list(const std::string& option, const std::string& text) {
  std::vector<std::string> items;
  size_t begin = 0;
  while (true) {
    const size_t comma = text.find(',', begin);
    const std::string item =
        text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    if (item.empty()) {
      throw invalid_argument(option + ": empty item in '" + text + "' (expected a,b,c)");
    }
    items.push_back(item);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return items;
}

}  // namespace

const char* mode_name(Mode mode) {
  for (const auto& m : kModes) {
    if (m.mode == mode) return m.name;
  }
  return "?";
}

CliArgs make_args() {
  CliArgs args("cube3d-bench",
               "Benchmark Cube 3D decoding (and the mesh stage) on random weights of a model "
               "YAML; prints a table and writes JSON (see bench/README.md).");
  args.option("--model-config", 1, "model YAML in the official layout (required)", "F")
      .option("--device", 1, "cpu (default) | cuda | cuda:N", "D")
      .option("--dtype", 1, "float32 (default on cpu) | bfloat16 (default on cuda)", "T")
      .option("--buckets", 1, "comma-separated batch buckets (requests per batch; default 1,4,16)",
              "B,B")
      .option("--tokens", 1,
              "shape tokens per request, 1..num_encoder_latents (default: all of them)", "N")
      .option("--modes", 1,
              "comma-separated: eager-nocache, eager-kv, graph-kv (default: all three)", "M,M")
      .option("--warmup", 1, "untimed runs per (mode, bucket) (default 1)", "W")
      .option("--repeat", 1, "timed runs per (mode, bucket) (default 3)", "R")
      .option("--guidance-scale", 1, "classifier-free guidance (default 3.0: 2 rows per request)",
              "G")
      .option("--seed", 1, "seed of the random text states (default 0)", "N")
      .option("--mesh-resolution", 1,
              "time the mesh stage on a (2^R + 1)^3 grid (default 8; 0 = skip)", "R")
      .option("--mesh-repeat", 1, "timed runs of the mesh stage (default 1)", "R")
      .option("--occupancy", 1,
              "hierarchical (default) | dense | both: how the shape stage evaluates the "
              "occupancy field",
              "M")
      .option("--weights-dir", 1,
              "read shape_gpt.safetensors and shape_tokenizer.safetensors from DIR (e.g. "
              "scripts/make_random_checkpoint.py's output) instead of random weights from the "
              "seed",
              "DIR")
      .option("--threads", 1, "CPU intra-op threads (default: libtorch's choice)", "N")
      .option("--cuda-graphs", 1,
              "how graph-kv runs: on (default: captured CUDA graphs, CUDA only) | emulate (the "
              "graph runner's capture lifecycle with eager replays, any device)",
              "M")
      .option("--fused-kernels", 1,
              "on (default: the fused CUDA kernels in decode steps, bf16 on CUDA) | off", "M")
      .option("--decode-kernels", 1,
              "torch (default: libtorch's ops) | triton (the Triton kernels of kernels/, bf16 on "
              "CUDA in the CUDA build)",
              "K")
      .option("--strict", 0, "fail instead of skipping a mode this device cannot run")
      .option("--build-info", 0,
              "print one JSON line about this build (CUDA graph runner, torch) and exit")
      .option("--commit", 1, "commit id to record in the JSON (default: unknown)", "S")
      .env("CUBE3D_COMMIT")
      .option("--json", 1, "write the results as JSON", "F")
      .option("--benchmark-json", 1,
              "also write them in Google Benchmark's JSON layout (compare.py reads it)", "F")
      .option("--log-level", 1, "trace | debug | info | warn (default) | error", "L");
  return args;
}

std::vector<int64_t> parse_buckets(const std::string& text) {
  std::vector<int64_t> buckets;
  for (const std::string& item : split_list("--buckets", text)) {
    int64_t value = 0;
    const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (error != std::errc() || end != item.data() + item.size() || value < 1) {
      throw invalid_argument("--buckets: each bucket must be an integer >= 1, got '" + item + "'");
    }
    if (std::find(buckets.begin(), buckets.end(), value) != buckets.end()) {
      throw invalid_argument("--buckets: bucket " + item + " given twice");
    }
    buckets.push_back(value);
  }
  return buckets;
}

std::vector<Mode> parse_modes(const std::string& text) {
  std::vector<Mode> modes;
  for (const std::string& item : split_list("--modes", text)) {
    const auto it = std::find_if(kModes.begin(), kModes.end(),
                                 [&](const ModeName& m) { return item == m.name; });
    if (it == kModes.end()) {
      throw invalid_argument("--modes: unknown mode '" + item +
                             "' (expected eager-nocache, eager-kv or graph-kv)");
    }
    if (std::find(modes.begin(), modes.end(), it->mode) != modes.end()) {
      throw invalid_argument("--modes: mode " + item + " given twice");
    }
    modes.push_back(it->mode);
  }
  return modes;
}

}  // namespace cube3d::bench
