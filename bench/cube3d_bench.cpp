// cube3d-bench: decode benchmark of the engine on random weights of any model YAML
// (docs/architecture.md contract). For every requested mode and batch bucket it measures time per
// output token (median and p90 over every decode step of every timed run), time to first token,
// end-to-end time, throughput, peak memory and the memory bandwidth a decode step achieves; then
// optionally one whole object (tokens, then the shape pipeline: latents, occupancy field, marching
// cubes, post-processing, GLB) per occupancy mode.
// Prints a table and writes JSON. bench/README.md describes the modes, the JSON layout and the
// bandwidth estimate.
// This file holds main, the decode benchmark, the table and run(); beside it: bench_options
// (flags, modes, settings), traffic_model (bytes per decode step), device_probe (device sync,
// peak memory, names for the record) and shape_bench (the shape stage).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/headeronly/version.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "bench_options.h"
#include "cube3d/cli/cli_args.h"
#include "cube3d/core/clock.h"
#include "cube3d/core/constants.h"
#include "cube3d/core/enum_table.h"
#include "cube3d/core/error.h"
#include "cube3d/core/files.h"
#include "cube3d/core/logging.h"
#include "cube3d/core/model_config.h"
#include "cube3d/engine/cuda_graph_runner.h"
#include "cube3d/engine/engine.h"
#include "cube3d/engine/fused_decode.h"
#include "cube3d/engine/op_count.h"
#include "cube3d/engine/triton_decode.h"
#include "cube3d/mesh/grid.h"
#include "cube3d/pipeline/occupancy_field.h"
#include "device_probe.h"
#include "gbench_json.h"
#include "shape_bench.h"
#include "traffic_model.h"

namespace cube3d::bench {
namespace {

using Clock = SteadyClock;

// Weights seed for YAMLs that name none (the real model configs): any fixed value keeps runs
// comparable; the numbers do not depend on the weights' values, only on their shapes.
constexpr uint64_t kDefaultWeightsSeed = 20251130;
// A plausible normalised bounding box for use_bbox (v0.5) models, largest side 1.925.
constexpr std::array<float, 3> kBenchBbox = {1.925f, 1.2f, 0.8f};

// Linear interpolation between closest ranks (numpy's default), on sorted values.
double percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double index = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(index));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (index - static_cast<double>(lo));
}

double mean(const std::vector<double>& values) {
  if (values.empty()) return 0;
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

// A timed sample as kept: milliseconds to the nanosecond (the clock's own resolution), so that
// the JSON's samples print short and every figure computed from them is the one recorded.
double whole_ns(double ms) { return std::round(ms * 1e6) / 1e6; }

// --- the decode benchmark --------------------------------------------------------------------

// `bucket` requests with random CLIP-like states (unit normal, like a LayerNorm output) and a
// shared unconditional state, as the empty prompt is the same for every request.
std::vector<GenerationRequest> make_requests(const ModelConfig& config, int64_t bucket,
                                             double guidance, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const int64_t dim = config.gpt.text_model_embed_dim;
  const at::Tensor uncond = at::randn({kClipContextLength, dim}, gen, at::kFloat);
  std::vector<GenerationRequest> requests(static_cast<size_t>(bucket));
  for (GenerationRequest& r : requests) {
    r.text_hidden = at::randn({kClipContextLength, dim}, gen, at::kFloat);
    r.uncond_hidden = uncond;
    if (config.gpt.use_bbox) {
      r.bbox = at::tensor({kBenchBbox[0], kBenchBbox[1], kBenchBbox[2]}, at::kFloat);
    }
    r.guidance_scale = guidance;  // greedy: top_p stays unset
  }
  return requests;
}

// FNV-1a over the generated ids (int64, row-major): equal checksums mean equal tokens, so two
// modes (graph-kv against eager-kv) can be compared on a full-size model from the JSON alone.
std::string ids_checksum(const at::Tensor& ids) {
  const at::Tensor flat = ids.to(at::kCPU, at::kLong).contiguous();
  uint64_t hash = 1469598103934665603ull;
  const auto* bytes = static_cast<const unsigned char*>(flat.data_ptr());
  for (size_t i = 0; i < static_cast<size_t>(flat.nbytes()); ++i) {
    hash = (hash ^ bytes[i]) * 1099511628211ull;
  }
  std::array<char, 17> text{};
  std::snprintf(text.data(), text.size(), "%016llx", static_cast<unsigned long long>(hash));
  return text.data();
}

const char* runner_kind(Engine& engine) {
  constexpr EnumTable<GraphMode, const char*, 3> kKinds = {
      {{GraphMode::kOff, "eager"},
       {GraphMode::kOn, "CUDA graph"},
       {GraphMode::kEmulate, "emulated graph"}}};
  return lookup(kKinds, engine.graph_mode()).value_or("?");
}

struct Run {
  // Per-step mode: one entry per decode step (tokens - 1). Otherwise one entry, the run's mean.
  std::vector<double> step_ms;
  double ttft_ms = 0;
  double e2e_ms = 0;
  at::Tensor ids;  // [bucket, T] on the CPU
};

// Eager modes time every step: a timestamp after every token. On CUDA each stamp first waits for
// the device, so every step pays one host sync: fine for the eager modes, which launch kernels
// one by one anyway, and the only way to see single steps from outside the engine.
// graph-kv would lose what it is for if the host waited between replays, so it stamps only the
// first and the last token and records the run's mean step.
bool times_each_step(Mode mode) { return mode != Mode::kGraphKv; }

Run timed_generate(Engine& engine, const std::vector<GenerationRequest>& requests, Mode mode,
                   int64_t bucket) {
  const at::Device device = engine.device();
  std::vector<Clock::time_point> stamps;
  stamps.reserve(static_cast<size_t>(engine.tokens_per_shape()));
  GenerationOptions options;
  options.use_kv_cache = mode != Mode::kEagerNoCache;
  options.bucket = bucket;
  options.progress_interval = times_each_step(mode) ? 1 : 0;  // 0: first and last token only
  options.on_progress = [&](int64_t) {
    synchronize(device);
    stamps.push_back(Clock::now());
    return true;
  };
  synchronize(device);
  const auto start = Clock::now();
  const GenerationResult result = engine.generate(requests, options);
  const auto end = Clock::now();
  Run run;
  if (times_each_step(mode)) {
    for (size_t i = 1; i < stamps.size(); ++i) {
      run.step_ms.push_back(whole_ns(ms_between(stamps[i - 1], stamps[i])));
    }
  } else if (result.tokens > 1 && stamps.size() >= 2) {
    run.step_ms.push_back(whole_ns(ms_between(stamps.front(), stamps.back()) /
                                   static_cast<double>(result.tokens - 1)));
  }
  run.ttft_ms = whole_ns(result.prefill_ms);
  run.e2e_ms = whole_ns(ms_between(start, end));
  run.ids = result.ids;
  return run;
}

struct BenchResult {
  Mode mode = Mode::kEagerKv;
  int64_t bucket = 0;
  int64_t tokens = 0;
  int64_t steps = 0;
  double tpot_median = 0, tpot_p90 = 0, tpot_mean = 0;
  double ttft = 0, e2e = 0, tokens_per_s = 0;
  int64_t peak_memory = 0;
  int64_t bytes_per_step = 0;
  double gb_per_s = 0;
  std::string ids_checksum;  // of the last timed run's ids
  bool ids_stable = true;    // every timed run gave the same ids
  std::string runner;        // the decode runner's kind: eager, CUDA graph, emulated graph
  // Every timed sample, run by run: each run's decode steps (or its one mean step), TTFT and
  // end to end; the figures above are computed from them.
  std::vector<std::vector<double>> step_runs;
  std::vector<double> ttft_runs, e2e_runs;

  nlohmann::json to_json() const {
    return {{"mode", mode_name(mode)},
            {"bucket", bucket},
            {"tokens", tokens},
            {"steps", steps},
            {"tpot_kind", times_each_step(mode) ? "per_step" : "per_run_mean"},
            {"tpot_ms_median", tpot_median},
            {"tpot_ms_p90", tpot_p90},
            {"tpot_ms_mean", tpot_mean},
            {"ttft_ms", ttft},
            {"e2e_ms", e2e},
            {"tokens_per_s", tokens_per_s},
            {"peak_memory_bytes", peak_memory},
            {"bytes_per_step", bytes_per_step},
            {"achieved_gb_per_s", gb_per_s},
            {"ids_checksum", ids_checksum},
            {"ids_stable", ids_stable},
            {"runner", runner},
            {"samples", {{"tpot_ms", step_runs}, {"ttft_ms", ttft_runs}, {"e2e_ms", e2e_runs}}}};
  }
};

BenchResult bench_one(Engine& engine, const TrafficModel& traffic, const Settings& s, Mode mode,
                      int64_t bucket, at::Tensor& last_ids) {
  const std::vector<GenerationRequest> requests =
      make_requests(engine.config(), bucket, s.guidance, s.seed);
  reset_peak_memory(engine.device());
  // The engine made every bucket's runner (and captured its graphs) at load, as the server
  // does, so nothing timed pays for it.
  for (int64_t i = 0; i < s.warmup; ++i) timed_generate(engine, requests, mode, bucket);
  std::vector<double> steps, ttft, e2e;
  std::vector<std::vector<double>> step_runs;
  bool ids_stable = true;
  for (int64_t i = 0; i < s.repeat; ++i) {
    const Run run = timed_generate(engine, requests, mode, bucket);
    steps.insert(steps.end(), run.step_ms.begin(), run.step_ms.end());
    step_runs.push_back(run.step_ms);
    ttft.push_back(run.ttft_ms);
    e2e.push_back(run.e2e_ms);
    if (last_ids.defined() && i > 0 && !at::equal(last_ids, run.ids)) ids_stable = false;
    last_ids = run.ids;
  }
  std::sort(steps.begin(), steps.end());
  BenchResult r;
  r.mode = mode;
  r.bucket = bucket;
  r.ids_checksum = ids_checksum(last_ids);
  r.ids_stable = ids_stable;
  r.runner = mode == Mode::kEagerNoCache ? "none (no cache)" : runner_kind(engine);
  r.tokens = s.tokens;
  r.steps = static_cast<int64_t>(steps.size());
  r.tpot_median = percentile(steps, 0.5);
  r.tpot_p90 = percentile(steps, 0.9);
  r.tpot_mean = mean(steps);
  r.ttft = mean(ttft);
  r.e2e = mean(e2e);
  r.step_runs = std::move(step_runs);
  r.ttft_runs = ttft;
  r.e2e_runs = e2e;
  r.tokens_per_s = r.e2e > 0 ? static_cast<double>(bucket * s.tokens) / (r.e2e / 1000.0) : 0;
  r.peak_memory = peak_memory_bytes(engine.device());
  const int64_t rows = s.guidance > 0 ? 2 * bucket : bucket;
  r.bytes_per_step = traffic.bytes_per_step(mode, bucket, rows);
  r.gb_per_s = r.tpot_median > 0
                   ? static_cast<double>(r.bytes_per_step) / (r.tpot_median / 1000.0) / 1e9
                   : 0;
  return r;
}

// Why a mode cannot run here, or nothing when it can.
std::optional<Error> unavailable_reason(Mode mode, const at::Device& device, GraphMode graphs) {
  if (mode != Mode::kGraphKv || graphs == GraphMode::kEmulate) return std::nullopt;
  if (!device.is_cuda()) {
    return failed_precondition("graph-kv replays captured CUDA graphs and never runs on " +
                               device.str() + "; use --device cuda");
  }
  if (!cuda_graphs_available()) {
    return failed_precondition(
        "graph-kv: this build has no CUDA graph support (the CUDA "
        "toolkit was missing at build time)");
  }
  return std::nullopt;
}

// --- output ----------------------------------------------------------------------------------

void print_header() {
  std::printf("\n%-13s %6s %6s %9s %9s %9s %9s %9s %8s %9s %16s\n", "mode", "bucket", "tokens",
              "TPOT med", "TPOT p90", "TTFT", "e2e", "tok/s", "GB/s", "peak MiB", "ids checksum");
  std::fflush(stdout);
}

// One line per (mode, bucket), flushed as soon as it is measured: a run stopped by a timeout
// keeps every line before it.
void print_row(const BenchResult& r) {
  std::printf("%-13s %6lld %6lld %9.3f %9.3f %9.2f %9.1f %9.1f %8.2f %9.1f %16s%s\n",
              mode_name(r.mode), static_cast<long long>(r.bucket), static_cast<long long>(r.tokens),
              r.tpot_median, r.tpot_p90, r.ttft, r.e2e, r.tokens_per_s, r.gb_per_s,
              static_cast<double>(r.peak_memory) / (1 << 20), r.ids_checksum.c_str(),
              r.ids_stable ? "" : " (ids differ between runs)");
  std::fflush(stdout);
}

void print_footer() {
  std::printf(
      "(times in ms; TPOT over every decode step of every timed run; GB/s = estimated "
      "bytes per step / median step)\n");
  std::fflush(stdout);
}

// What this binary can do, for scripts that must not spend device time on a build without
// the graph runner (scripts/gpu_check.sh).
nlohmann::json build_info() {
  return {{"cuda_graph_runner", cuda_graph_runner_compiled()},
          {"fused_kernels", fused_kernels_compiled()},
          {"triton_kernels", triton_kernels_compiled()},
          {"cuda_available", at::hasCUDA()},
          {"torch", TORCH_VERSION},
          {"attention_backends_on_cuda", "flash, memory-efficient, math (cuDNN off)"}};
}

// The ATen operations of one eager decode step at bucket 1 (the server's most common batch), as
// the engine runs it on this device: a number that shows a change adding operations (kernels on
// a GPU) without timing anything. The runner feeds its scratch position, so the KV slots it
// writes are never read by a real step.
nlohmann::json decode_step_ops(const Engine& engine, bool cfg, bool fused_kernels) {
  constexpr int64_t kBucket = 1;
  const AtenOpCount count =
      count_decode_step_ops(engine.gpt(), engine.kv_cache(), kBucket, cfg,
                            engine.tokens_per_shape(), SingleStreamDecode::kCausal, fused_kernels);
  return {{"bucket", kBucket},
          {"rows", cfg ? 2 * kBucket : kBucket},
          {"single_stream_decode", to_string(SingleStreamDecode::kCausal)},
          {"top_level", count.top_level},
          {"top_level_compute", count.top_level_compute()},
          {"all", count.all},
          {"top_level_by_name", count.top_level_by_name}};
}

// What one decode step at bucket 1 launches on the Triton path (decode_kernels: triton), counted
// by its recording mode on any device (laid out for 132 multiprocessors): the kernels' launches
// and bytes, and the ATen operations around them. Null where the kernels do not take the model.
nlohmann::json decode_step_launches(const Engine& engine, bool cfg) {
  constexpr int64_t kBucket = 1;
  try {
    const DecodeStepLaunches step =
        count_decode_step_launches(engine.gpt(), engine.kv_cache(), kBucket, cfg,
                                   engine.tokens_per_shape(), SingleStreamDecode::kCausal);
    nlohmann::json by_kernel = nlohmann::json::object();
    for (const auto& [name, k] : step.kernels.by_kernel) {
      by_kernel[name] = {{"launches", k.launches}, {"bytes_read", k.bytes_read}};
    }
    return {{"bucket", kBucket},
            {"kernel_launches", step.kernels.launches},
            {"aten_compute", step.aten.top_level_compute()},
            {"launches", step.kernels.launches + step.aten.top_level_compute()},
            {"bytes_read", step.kernels.bytes_read},
            {"bytes_written", step.kernels.bytes_written},
            {"by_kernel", by_kernel}};
  } catch (const Error&) {
    return nullptr;
  }
}

// The "official" section of a JSON file that bench/official_engine.py wrote before this run
// (bench/README.md): kept when the file is rewritten, so the two benches' figures end up in one
// file whichever ran first. Nothing when there is no such file or section.
std::optional<nlohmann::json> official_section(const std::string& path) {
  if (!std::filesystem::is_regular_file(path)) return std::nullopt;
  const nlohmann::json old =
      nlohmann::json::parse(read_file(path, "--json file"), nullptr, /*allow_exceptions=*/false);
  if (!old.is_object() || !old.contains("official")) return std::nullopt;
  return old["official"];
}

int run(int argc, char** argv) {
  CliArgs args = make_args();
  args.parse_answering_help(argc, argv);
  setup_logging(args.get("--log-level", "warn"));
  if (args.has("--build-info")) {
    std::printf("%s\n", build_info().dump().c_str());
    return 0;
  }
  if (!args.has("--model-config")) throw invalid_argument("--model-config is required");

  // Every option is checked before the (possibly long) model load.
  const std::string device_text = args.get("--device", "cpu");
  const at::Device device = parse_device(device_text);
  const std::string dtype = args.get("--dtype", device.is_cuda() ? "bfloat16" : "float32");
  parse_dtype(dtype);
  const std::vector<int64_t> buckets = parse_buckets(args.get("--buckets", "1,4,16"));
  const std::vector<Mode> requested_modes =
      parse_modes(args.get("--modes", "eager-nocache,eager-kv,graph-kv"));
  Settings s;
  s.warmup = args.get_int("--warmup", 1);
  if (s.warmup < 0) throw invalid_argument("--warmup must be >= 0");
  s.repeat = args.get_int("--repeat", 3);
  if (s.repeat < 1) throw invalid_argument("--repeat must be >= 1");
  s.guidance = args.get_double("--guidance-scale", 3.0);
  if (s.guidance < 0) throw invalid_argument("--guidance-scale must be >= 0");
  s.seed = args.get_uint("--seed", 0);
  s.mesh_repeat = args.get_int("--mesh-repeat", 1);
  if (s.mesh_repeat < 1) throw invalid_argument("--mesh-repeat must be >= 1");
  const std::string occupancy = args.get("--occupancy", "hierarchical");
  if (occupancy == "both") {
    s.occupancy_modes = {true, false};
  } else {
    s.occupancy_modes = {parse_occupancy_mode(occupancy, "--occupancy")};
  }
  const int64_t mesh_resolution = args.get_int("--mesh-resolution", 8);
  if (mesh_resolution < 0 || mesh_resolution > kMaxResolutionBase) {
    throw invalid_argument("--mesh-resolution " + std::to_string(mesh_resolution) +
                           ": must be 0 (skip) or in 1.." + std::to_string(kMaxResolutionBase) +
                           " (time and memory grow eightfold per step)");
  }
  if (args.has("--threads")) {
    const int64_t threads = args.get_int("--threads", 0);
    if (threads < 1) throw invalid_argument("--threads must be >= 1");
    at::set_num_threads(static_cast<int>(threads));
  }
  const bool strict = args.has("--strict");
  const GraphMode graph_kv_runner =
      parse_graph_mode(args.get("--cuda-graphs", "on"), "--cuda-graphs");
  if (graph_kv_runner == GraphMode::kOff) {
    throw invalid_argument(
        "--cuda-graphs off: graph-kv needs on or emulate; eager-kv is the "
        "mode without graphs");
  }

  ModelConfig config = load_model_config(args.get("--model-config"));
  const int64_t all_tokens = config.shape.num_encoder_latents;
  s.tokens = args.get_int("--tokens", all_tokens);
  if (s.tokens < 1 || s.tokens > all_tokens) {
    throw invalid_argument("--tokens " + std::to_string(s.tokens) + ": must be in 1.." +
                           std::to_string(all_tokens) + " (shape_model.num_encoder_latents of " +
                           config.source + ")");
  }
  // The generator always produces num_encoder_latents tokens; the RoPE table, the KV cache and
  // the decoder's positional encodings follow this value, so fewer tokens is a smaller config.
  config.shape.num_encoder_latents = s.tokens;
  if (!config.random_weights_seed) config.random_weights_seed = kDefaultWeightsSeed;

  std::vector<Mode> modes;
  std::vector<nlohmann::json> skipped;
  std::vector<std::string> notes;
  std::vector<std::string> skip_notes;  // printed, while the JSON lists them under "skipped"
  for (const Mode mode : requested_modes) {
    if (const std::optional<Error> why = unavailable_reason(mode, device, graph_kv_runner)) {
      if (strict) throw *why;
      skip_notes.push_back(std::string("skipping ") + mode_name(mode) + ": " + why->what() +
                           " (nothing is recorded for it; --strict fails instead)");
      skipped.push_back({{"mode", mode_name(mode)}, {"reason", why->what()}});
      continue;
    }
    modes.push_back(mode);
  }

  // The machine before the engine loads: the load average says whether others were busy on it.
  const nlohmann::json machine = machine_facts();

  EngineOptions engine_options;  // no weight paths: random weights from the seed
  const std::string weights_dir = args.get("--weights-dir", "");
  if (!weights_dir.empty()) {
    // The same values another bench loads (bench/official_engine.py --weights-dir D: D/ours).
    engine_options.gpt_weights = weights_dir + "/shape_gpt.safetensors";
    engine_options.shape_weights = weights_dir + "/shape_tokenizer.safetensors";
  }
  const std::string weights_text =
      weights_dir.empty()
          ? "random weights (seed " + std::to_string(*config.random_weights_seed) + ")"
          : "weights from " + weights_dir;
  engine_options.device = device_text;
  engine_options.dtype = dtype;
  engine_options.max_batch = *std::max_element(buckets.begin(), buckets.end());
  engine_options.text_tokens = kClipContextLength;
  engine_options.load_text_encoder = false;  // requests carry random text states
  const std::string fused = args.get("--fused-kernels", "on");
  if (fused != "on" && fused != "off") {
    throw invalid_argument("--fused-kernels: '" + fused + "' is not on or off");
  }
  engine_options.fused_kernels = fused == "on";
  engine_options.decode_kernels =
      parse_decode_kernels(args.get("--decode-kernels", "torch"), "--decode-kernels");
  // Every bucket's runner is made (and its graph captured) at load, as the server does.
  engine_options.capture.buckets = buckets;
  std::sort(engine_options.capture.buckets.begin(), engine_options.capture.buckets.end());
  engine_options.capture.guided = s.guidance > 0;
  engine_options.capture.unguided = s.guidance == 0;
  // The engine decides at load how its generator decodes, so graph-kv gets an engine of its
  // own; the same seed gives it the same weights. The old one goes first so that two copies of
  // a large model never share the device.
  std::unique_ptr<Engine> engine;
  const auto engine_for = [&](Mode mode) -> Engine& {
    const GraphMode graphs = mode == Mode::kGraphKv ? graph_kv_runner : GraphMode::kOff;
    if (!engine || engine->options().cuda_graphs != graphs) {
      engine.reset();
      engine_options.cuda_graphs = graphs;
      engine = Engine::load(config, engine_options);
    }
    return *engine;
  };
  const TrafficModel traffic =
      TrafficModel::from(engine_for(modes.empty() ? Mode::kEagerKv : modes.front()));

  const GptConfig& gpt = config.gpt;
  std::printf("cube3d-bench: %s on %s (%s, %d CPU threads), %s, load %.0f ms\n",
              config.source.c_str(), device.str().c_str(), dtype.c_str(), at::get_num_threads(),
              weights_text.c_str(), engine->load_ms());
  std::printf(
      "shape GPT: %lld dual + %lld single blocks, D %lld, %.1f M params (%.1f MiB); "
      "%lld of %lld tokens; guidance %.1f (%s); warmup %lld, repeat %lld\n",
      static_cast<long long>(gpt.n_layer), static_cast<long long>(gpt.n_single_layer),
      static_cast<long long>(gpt.n_embd), static_cast<double>(traffic.gpt_params) / 1e6,
      static_cast<double>(traffic.gpt_bytes) / (1 << 20), static_cast<long long>(s.tokens),
      static_cast<long long>(all_tokens), s.guidance,
      s.guidance > 0 ? "2 rows per request" : "1 row per request", static_cast<long long>(s.warmup),
      static_cast<long long>(s.repeat));
  if (device.is_cuda()) {
    notes.push_back(
        "eager modes wait for the device after every token to time single steps (one host "
        "sync per step, which eager launches can afford); graph-kv syncs only at its first "
        "and last token, so its TPOT median and p90 are over the runs' mean steps");
    notes.push_back(
        "peak_memory_bytes is the CUDA caching allocator's peak of allocated bytes during "
        "each (mode, bucket), weights included");
  } else {
    notes.push_back(
        "peak_memory_bytes is the process's peak resident set size (getrusage ru_maxrss), "
        "which only grows: later rows include earlier ones");
  }
  const nlohmann::json step_ops =
      decode_step_ops(*engine, s.guidance > 0, engine_options.fused_kernels);
  std::printf(
      "decode step at bucket 1: %lld ATen ops (top-level; %lld of them not views, %lld with the "
      "nested ones), counted on %s\n",
      static_cast<long long>(step_ops["top_level"].get<int64_t>()),
      static_cast<long long>(step_ops["top_level_compute"].get<int64_t>()),
      static_cast<long long>(step_ops["all"].get<int64_t>()), device.str().c_str());
  const nlohmann::json step_launches = decode_step_launches(*engine, s.guidance > 0);
  if (!step_launches.is_null()) {
    std::printf(
        "decode step at bucket 1 with decode_kernels triton: %lld launches (%lld Triton "
        "kernels, %lld ATen ops), %.1f MB read\n",
        static_cast<long long>(step_launches["launches"].get<int64_t>()),
        static_cast<long long>(step_launches["kernel_launches"].get<int64_t>()),
        static_cast<long long>(step_launches["aten_compute"].get<int64_t>()),
        static_cast<double>(step_launches["bytes_read"].get<int64_t>()) / 1e6);
  }
  for (const std::string& note : skip_notes) std::printf("note: %s\n", note.c_str());
  for (const std::string& note : notes) std::printf("note: %s\n", note.c_str());

  // The JSON is rewritten after every result, so a run stopped by a timeout keeps what it
  // measured; "complete" says whether it got to the end.
  const std::optional<std::string> json_path =
      args.has("--json") ? std::optional(args.get("--json")) : std::nullopt;
  const std::optional<std::string> gbench_path =
      args.has("--benchmark-json") ? std::optional(args.get("--benchmark-json")) : std::nullopt;
  const char* env_commit = std::getenv("CUBE3D_COMMIT");
  const std::string commit = args.get("--commit", env_commit != nullptr ? env_commit : "unknown");
  const std::string gpu_driver = driver_version(device);
  // What a comparison of two runs checks (bench/tpot.py compare): the build, the device, the
  // software and the machine, in one place.
  nlohmann::json provenance = {
      {"commit", commit},
      {"build_type", CUBE3D_BUILD_TYPE},
#ifdef NDEBUG
      {"assertions", false},
#else
      {"assertions", true},
#endif
      {"compiler", __VERSION__},
      {"torch", TORCH_VERSION},
      {"device", device.str()},
      {"device_name", device_name(device)},
      {"driver", gpu_driver.empty() ? nlohmann::json(nullptr) : nlohmann::json(gpu_driver)},
      {"threads", at::get_num_threads()}};
  provenance.update(machine);
  nlohmann::json out = {
      {"device", device.str()},
      {"device_name", provenance["device_name"]},
      {"dtype", dtype},
      {"model", config.source},
      {"weights", weights_text},
      {"commit", commit},
      {"date", utc_now()},
      {"threads", at::get_num_threads()},
      {"tokens", s.tokens},
      {"model_tokens", all_tokens},
      {"warmup", s.warmup},
      {"repeat", s.repeat},
      {"guidance_scale", s.guidance},
      {"cuda_graphs", to_string(graph_kv_runner)},
      // Whether decode steps ran the fused kernels (asked for, compiled, and bf16 on CUDA).
      {"fused_kernels", engine_options.fused_kernels && fused_kernels_compiled() &&
                            device.is_cuda() && dtype == "bfloat16"},
      {"build", build_info()},
      {"load_ms", engine->load_ms()},
      {"gpt_params", traffic.gpt_params},
      {"gpt_bytes", traffic.gpt_bytes},
      {"kv_cache_bytes", engine->kv_cache().bytes()},
      {"decode_step_ops", step_ops},
      {"decode_kernels", to_string(engine_options.decode_kernels)},
      {"decode_step_launches", step_launches},
      {"peak_memory_kind", device.is_cuda() ? "cuda_allocated" : "rss"},
      {"notes", notes},
      {"skipped", skipped},
      {"provenance", provenance},
      {"results", nlohmann::json::array()},
      {"complete", false}};
  if (json_path) {
    if (std::optional<nlohmann::json> official = official_section(*json_path)) {
      out["official"] = std::move(*official);
    }
  }
  const auto save = [&] {
    if (json_path) write_file(*json_path, out.dump(2) + "\n");
    if (gbench_path) {
      write_file(*gbench_path, google_benchmark_json(out, argv[0]).dump(2) + "\n");
    }
  };
  save();

  at::Tensor last_ids;
  if (!modes.empty()) print_header();
  for (const Mode mode : modes) {
    Engine& e = engine_for(mode);
    for (const int64_t bucket : buckets) {
      const BenchResult r = bench_one(e, traffic, s, mode, bucket, last_ids);
      print_row(r);
      out["results"].push_back(r.to_json());
      save();
    }
  }
  if (!modes.empty()) print_footer();

  if (mesh_resolution > 0) {
    // One whole object: its tokens (one request, bucket 1 padded as the server would), then its
    // shape per occupancy mode.
    GenerationOptions options;
    options.bucket = engine_options.capture.buckets.front();
    Engine& e = engine_for(modes.empty() ? Mode::kEagerKv : modes.back());
    synchronize(e.device());
    const auto tokens_start = Clock::now();
    const GenerationResult one = e.generate(make_requests(config, 1, s.guidance, s.seed), options);
    const double tokens_ms = ms_since(tokens_start);
    out["mesh"] = bench_shape(e, one.ids.narrow(0, 0, 1), mesh_resolution, s, tokens_ms);
  }
  out["complete"] = true;
  save();
  if (json_path) std::printf("\nwrote %s\n", json_path->c_str());
  if (gbench_path) std::printf("wrote %s (Google Benchmark's layout)\n", gbench_path->c_str());
  return 0;
}

}  // namespace
}  // namespace cube3d::bench

int main(int argc, char** argv) {
  return cube3d::run_tool("cube3d-bench", cube3d::bench::run, argc, argv);
}
