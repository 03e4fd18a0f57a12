// cube3d-generate: offline text-to-shape generation with the engine (docs/architecture.md
// contract). Prints the shape tokens and timings; optionally writes them, a safetensors dump of
// every intermediate the golden tests compare, and (with the mesh stage) a mesh, with the
// provenance metadata (pipeline/provenance.h) of the run in it, and a still image of it
// (mesh_preview.h). Batch mode (--prompts-file F --out-dir D [--shard I/N]): every prompt of F that
// the shard owns to one mesh file in D named by a digest of what changes it, with a manifest of
// JSON lines (tools/prompt_file.h, batch_shard.h, output_name.h, batch_output.h).
#include <ATen/ATen.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "cube3d/cli/cli_args.h"
#include "cube3d/cli/sampling_flags.h"
#include "cube3d/cli/version.h"
#include "cube3d/core/clock.h"
#include "cube3d/core/constants.h"
#include "cube3d/core/error.h"
#include "cube3d/core/files.h"
#include "cube3d/core/logging.h"
#include "cube3d/core/model_config.h"
#include "cube3d/engine/engine.h"
#include "cube3d/mesh/grid.h"
#include "cube3d/mesh/mesh_io.h"
#include "cube3d/mesh/mesh_preview.h"
#include "cube3d/mesh/mesh_profile.h"
#include "cube3d/pipeline/provenance.h"
#include "cube3d/pipeline/shape_pipeline.h"
#include "cube3d/tensor_io/safetensors.h"
#include "cube3d/tools/batch_output.h"
#include "cube3d/tools/batch_shard.h"
#include "cube3d/tools/output_name.h"
#include "cube3d/tools/prompt_file.h"

namespace cube3d {
namespace {

// --max-marching-cubes-faces, the library's default when absent.
std::size_t mesh_budget(const CliArgs& args) {
  return static_cast<std::size_t>(args.get_uint(
      "--max-marching-cubes-faces", static_cast<uint64_t>(kDefaultMaxMarchingCubesFaces)));
}

CliArgs make_args() {
  CliArgs args("cube3d-generate",
               "Generate Cube 3D shape tokens (and their occupancy grid and mesh), for one prompt "
               "or, with --prompts-file, for a file of them (batch mode).");
  args.option("--model-config", 1, "model YAML in the official layout (required)", "F")
      .option("--gpt-weights", 1, "shape_gpt.safetensors (omit for random-weight configs)", "F")
      .option("--shape-weights", 1, "shape_tokenizer.safetensors", "F")
      .option("--prompt", 1, "text prompt, encoded with CLIP", "S")
      .option("--clip-model", 1,
              "Hugging Face CLIP folder (config.json + model.safetensors); random-weight "
              "configs get a small random CLIP without it",
              "DIR")
      .option("--clip-vocab", 1,
              "bpe_simple_vocab_16e6.txt.gz or a vocab.json + merges.txt folder (default: the "
              "CLIP folder's, then the one scripts/setup.sh fetches)",
              "F")
      .option("--text-embeddings", 1,
              "safetensors with clip_hidden_cond, clip_hidden_uncond [1, 77, Dt], optional "
              "bbox_xyz [1, 3]",
              "F");
  add_sampling_flags(args,
                     {.guidance_scale = "classifier-free guidance scale (default 3.0; 0 = off)",
                      .seed = "random seed of top-p sampling (default 0)"});
  args.option("--bbox", 3, "bounding box size, normalised so its largest side is 1.925 (v0.5)", "X")
      .option("--single-stream-decode", 1, "causal (default) | reference (official KV path)", "M")
      .option("--no-kv-cache", 0, "recompute the whole sequence every step (training semantics)")
      .option("--resolution-base", 1, "occupancy grid of 2^R + 1 points per axis (default 8)", "R")
      .option("--device", 1, "cpu (default) | cuda | cuda:N", "D")
      .option("--dtype", 1, "float32 (default) | bfloat16 (CUDA)", "T")
      .option("--cuda-graphs", 1,
              "on (default: CUDA graphs on CUDA, eager on the CPU) | off | emulate (the graph "
              "runner's capture lifecycle with eager replays, on any device)",
              "M")
      .option("--tokens-out", 1, "write the token ids, whitespace separated", "F")
      .option("--dump", 1,
              "write ids, step_logits, latents, grid_logits, cond, prefill_logits (safetensors)",
              "F")
      .option("--timings-json", 1,
              "write {tokens, prefill_ms, decode_ms, tpot_ms, shape_decode_ms, occupancy_points, "
              "...}",
              "F")
      .option("--mesh-out", 1, "write the mesh (.obj | .ply | .glb | .c3dm: docs/mesh-encoding.md)",
              "F")
      .option("--occupancy", 1,
              "hierarchical (default: coarse-to-fine near the surface) | dense (every grid "
              "point, as the official code)",
              "M")
      .option("--preview", 1,
              "write a still image of the mesh (PNG, a 3/4 view for thumbnails; with or "
              "without --mesh-out)",
              "F.png")
      .option("--preview-size", 1, "with --preview: its width and height, 16..4096 (default 512)",
              "N")
      .option("--no-postprocess", 0, "with --mesh-out or --preview: the raw marching-cubes mesh")
      .option("--target-faces", 1,
              "with --mesh-out or --preview: decimation target (default max(10000, 10%))", "N")
      .option("--max-marching-cubes-faces", 1,
              "the mesh stage's budget: a surface of more marching-cubes faces is extracted one "
              "level coarser (or more), with a warning (default 600000; 0: none)",
              "N")
      .option("--mesh-profile", 1,
              "with --mesh-out or --preview: none (default) | roblox (at most 20,000 triangles "
              "and 60,000 vertices, a file of at most 20 MB: decimated to fit, refused if it "
              "cannot)",
              "P")
      .option("--prompts-file", 1,
              "batch mode: one prompt a line (UTF-8; blank lines and #-comments skipped; a line "
              "starting with '{' is JSON: prompt plus optional seed, topP, guidanceScale, "
              "resolutionBase, targetFaceCount, boundingBox {x,y,z}); each to a mesh file in "
              "--out-dir. Exit status 0: every line ok or skipped; 3: some line failed "
              "(reported on stderr and in the manifest); 2: bad options, an unreadable input or "
              "an unwritable --out-dir",
              "F")
      .option("--out-dir", 1,
              "batch mode: the folder of the outputs, <digest>.<format> (the first 20 hex digits "
              "of a SHA-256 of the model, the normalised prompt and every setting that changes "
              "the mesh; an output already there is skipped, so a rerun resumes), and of the "
              "manifest manifest-<I>-of-<N>.jsonl (one JSON line per prompt line handled)",
              "D")
      .option("--shard", 1,
              "batch mode: handle the lines L with (L - 1) % N == I only (L counts every line "
              "from 1). Default: JOB_COMPLETION_INDEX (a Kubernetes Indexed Job) as I with "
              "--shard-count or CUBE3D_SHARD_COUNT as N, else 0/1",
              "I/N")
      .option("--shard-count", 1,
              "batch mode: N, with I from JOB_COMPLETION_INDEX (default: CUBE3D_SHARD_COUNT)", "N")
      .option("--format", 1, "batch mode: glb (default) | obj | ply", "F")
      .option("--log-level", 1, "trace | debug | info | warn (default) | error", "L");
  return args;
}

at::Tensor require_tensor(const SafetensorsFile& file, const std::string& name,
                          const std::vector<int64_t>& shape) {
  if (!file.contains(name)) {
    throw invalid_argument(file.path() + ": missing tensor " + name);
  }
  const at::Tensor stored = file.tensor(name);
  if (!stored.is_floating_point()) {
    throw invalid_argument(file.path() + ": tensor " + name + " is stored as " +
                           std::string(c10::toString(stored.scalar_type())) +
                           ", expected a floating-point dtype");
  }
  if (stored.sizes() != at::IntArrayRef(shape)) {
    throw invalid_argument(file.path() + ": tensor " + name + " has shape " +
                           c10::str(stored.sizes()) + ", expected " +
                           c10::str(at::IntArrayRef(shape)));
  }
  at::Tensor t = stored.to(at::kFloat);
  if (!at::isfinite(t).all().item<bool>()) {
    throw invalid_argument(file.path() + ": tensor " + name + " holds NaN or infinite values");
  }
  return t;
}

// --preview's options, checked before the model loads; none without --preview.
std::optional<PreviewOptions> preview_options(const CliArgs& args) {
  const int64_t size = args.get_int("--preview-size", PreviewOptions{}.width);
  require_in_range("--preview-size", size, 16, 4096);
  if (!args.has("--preview")) return std::nullopt;
  if (args.get("--preview").empty()) throw invalid_argument("--preview: the path is empty");
  PreviewOptions options;
  options.width = options.height = static_cast<int>(size);
  options.description = args.get("--prompt");  // as the mesh file's provenance records it
  options.validate();
  return options;
}

// Writes `bytes` to a temporary file beside `path` and renames it over `path`, so that a reader
// (a thumbnail watcher) never sees half a file and a failed run leaves no partial one. Something
// that is not a regular file (/dev/stdout) is written in place.
void write_file_atomically(const std::string& path, std::string_view bytes) {
  const PathKind kind = path_kind(path);
  if (kind != PathKind::kFile && kind != PathKind::kMissing) return write_file(path, bytes);
  const std::string temporary = path + ".tmp-" + std::to_string(::getpid());
  try {
    write_file(temporary, bytes);
  } catch (...) {
    std::remove(temporary.c_str());
    throw;
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(temporary.c_str());
    throw invalid_argument("cannot write " + path + ": " + std::generic_category().message(error));
  }
}

// --- batch mode (--prompts-file) ----------------------------------------------------------------

// Manifest lines keep their keys in the order written (line, prompt, file, status first).
using Json = nlohmann::ordered_json;

// Exit status of a batch run in which some line failed (bad line or failed generation); 0 when
// every line was made or skipped, 2 (run_tool) when the run could not start or go on.
constexpr int kSomeLinesFailed = 3;

// The single-prompt mode's inputs and outputs, which a batch run does not take.
constexpr const char* kSinglePromptFlags[] = {"--prompt",  "--text-embeddings", "--tokens-out",
                                              "--dump",    "--timings-json",    "--mesh-out",
                                              "--preview", "--preview-size"};
constexpr const char* kBatchFlags[] = {"--out-dir", "--shard", "--shard-count", "--format"};

std::optional<std::string> flag_value(const CliArgs& args, const std::string& name) {
  if (!args.has(name)) return std::nullopt;
  return args.get(name);
}

std::optional<std::string> env_value(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

std::array<float, 3> normalised_box(const std::array<float, 3>& sides) {
  const float longest = std::max({sides[0], sides[1], sides[2]});
  return {sides[0] / longest * static_cast<float>(kBoundingBoxLongestSide),
          sides[1] / longest * static_cast<float>(kBoundingBoxLongestSide),
          sides[2] / longest * static_cast<float>(kBoundingBoxLongestSide)};
}

// What one prompt line is made with: the run's settings with the line's overrides applied.
struct BatchItem {
  const PromptLine* line = nullptr;
  PromptRequest prompt;  // as the pipeline takes it (bounding box normalised)
  ShapeRequest shape;    // without the provenance (added when it is made)
  OutputKey key;
  std::string name;   // the output's file name; empty when the line is refused
  std::string error;  // why the line is refused (kError lines, or an override the model lacks)
};

Json or_null(const std::optional<double>& v) { return v ? Json(*v) : Json(nullptr); }

Json item_params(const BatchItem& item, const std::string& model) {
  const OutputKey& k = item.key;
  Json box = nullptr;
  if (k.bounding_box) box = {(*k.bounding_box)[0], (*k.bounding_box)[1], (*k.bounding_box)[2]};
  return {{"guidance_scale", k.guidance_scale},
          {"top_p", or_null(k.top_p)},
          {"seed", k.seed},
          {"bounding_box", box},
          {"resolution_base", k.resolution_base},
          {"format", to_string(k.format)},
          {"target_faces", k.target_face_count ? Json(*k.target_face_count) : Json(nullptr)},
          {"mesh_profile", to_string(k.mesh_profile)},
          {"postprocess", k.postprocess},
          {"occupancy", k.occupancy},
          {"single_stream_decode", k.single_stream_decode},
          {"kv_cache", k.kv_cache},
          {"device", k.device},
          {"dtype", k.dtype},
          {"model", model}};
}

std::string dump_line(const Json& j) {
  // Invalid UTF-8 (a refused line's text) is written with U+FFFD in its place.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// The model files, device, dtype and graph mode, as both modes read them.
EngineOptions engine_options_from(const CliArgs& args, bool load_text_encoder) {
  EngineOptions options;
  options.gpt_weights = args.get("--gpt-weights");
  options.shape_weights = args.get("--shape-weights");
  options.device = args.get("--device", "cpu");
  options.dtype = args.get("--dtype", "float32");
  options.clip_model = args.get("--clip-model");
  options.clip_vocab = args.get("--clip-vocab");
  options.load_text_encoder = load_text_encoder;
  options.cuda_graphs = parse_graph_mode(args.get("--cuda-graphs", "on"), "--cuda-graphs");
  return options;
}

// --guidance-scale, --top-p and --seed, checked, as both modes read them (in batch mode they are
// the run's defaults, which a prompt line may override).
struct Sampling {
  double guidance_scale = kDefaultGuidanceScale;
  std::optional<double> top_p;  // none: greedy
  uint64_t seed = 0;
};

Sampling sampling_from(const CliArgs& args) {
  Sampling sampling;
  sampling.guidance_scale = args.get_double("--guidance-scale", kDefaultGuidanceScale);
  // (get_double has refused NaN and infinities already.)
  if (sampling.guidance_scale < 0) throw invalid_argument("--guidance-scale must be >= 0");
  if (args.has("--top-p")) {
    const double p = args.get_double("--top-p", 1.0);
    if (!(p > 0 && p <= 1)) throw invalid_argument("--top-p must be in (0, 1]");
    sampling.top_p = p;
  }
  sampling.seed = args.get_uint("--seed", 0);
  return sampling;
}

// --bbox, checked against the model and normalised (normalised_box); none without --bbox.
std::optional<std::array<float, 3>> bounding_box_from(const CliArgs& args,
                                                      const ModelConfig& config) {
  if (!args.has("--bbox")) return std::nullopt;
  if (!config.gpt.use_bbox) {
    throw invalid_argument("--bbox: the model " + config.source +
                           " has no bounding-box input (gpt_model.use_bbox is false)");
  }
  std::array<float, 3> sides{};
  const std::vector<std::string> values = args.get_all("--bbox");  // three: the parser checks
  for (size_t i = 0; i < sides.size(); ++i) {
    char* end = nullptr;
    const double x = std::strtod(values[i].c_str(), &end);
    if (values[i].empty() || *end != '\0' || !std::isfinite(x) || x <= 0) {
      throw invalid_argument("--bbox: each side must be a positive number, got '" + values[i] +
                             "'");
    }
    sides[i] = static_cast<float>(x);
  }
  return normalised_box(sides);
}

int run_batch(const CliArgs& args) {
  for (const char* flag : kSinglePromptFlags) {
    if (args.has(flag)) {
      throw invalid_argument(std::string(flag) +
                             ": not with --prompts-file (batch mode writes <digest>.<format> "
                             "files and a manifest in --out-dir)");
    }
  }
  if (!args.has("--model-config")) throw invalid_argument("--model-config is required");
  if (!args.has("--out-dir")) throw invalid_argument("--prompts-file needs --out-dir D");
  const BatchShard shard =
      resolve_batch_shard(flag_value(args, "--shard"), flag_value(args, "--shard-count"),
                          env_value("JOB_COMPLETION_INDEX"), env_value("CUBE3D_SHARD_COUNT"));
  const std::string format_name = args.get("--format", "glb");
  const std::optional<MeshFormat> format = mesh_format_from_name(format_name);
  if (!format || *format == MeshFormat::kRaw || *format == MeshFormat::kCompact) {
    throw invalid_argument("--format: '" + format_name + "' is not glb, obj or ply");
  }
  const std::string profile_name = args.get("--mesh-profile", "none");
  const std::optional<MeshProfile> mesh_profile = mesh_profile_from_name(profile_name);
  if (!mesh_profile) {
    throw invalid_argument("--mesh-profile: '" + profile_name + "' is not none or roblox");
  }
  const Sampling sampling = sampling_from(args);
  GenerationOptions gen_options;
  gen_options.single_stream_decode =
      parse_single_stream_decode(args.get("--single-stream-decode", "causal"));
  gen_options.use_kv_cache = !args.has("--no-kv-cache");
  const int64_t resolution_base = args.get_int("--resolution-base", 8);
  validate_resolution_base(resolution_base);
  std::optional<int64_t> target_faces;
  if (args.has("--target-faces")) {
    target_faces = static_cast<int64_t>(args.get_uint("--target-faces", 0));
  }
  ShapeOptions shape_options;
  shape_options.occupancy.sampling.hierarchical =
      parse_occupancy_mode(args.get("--occupancy", "hierarchical"), "--occupancy");
  shape_options.mesh.postprocess = !args.has("--no-postprocess");
  shape_options.mesh.max_marching_cubes_faces = mesh_budget(args);

  EngineOptions engine_options = engine_options_from(args, true);

  const std::string config_path = args.get("--model-config");
  const ModelConfig config = load_model_config(config_path);
  const std::optional<std::array<float, 3>> default_box = bounding_box_from(args, config);

  const std::string prompts_path = args.get("--prompts-file");
  const std::string content = read_file(prompts_path, "prompts file", int64_t{1} << 30);
  const std::vector<PromptLine> lines = read_prompt_lines(content, shard);
  const BatchOutputDir out(args.get("--out-dir"));
  const std::string model_name = std::filesystem::path(config_path).stem().string();
  const std::string identity =
      model_identity(config_path, engine_options.gpt_weights, engine_options.shape_weights,
                     engine_options.clip_model, engine_options.clip_vocab);
  const std::string device_kind =
      engine_options.device.rfind("cuda", 0) == 0 ? "cuda" : engine_options.device;

  // Every owned prompt line's effective request and output name, before anything is made.
  std::vector<BatchItem> items;
  std::set<std::string> names;
  for (const PromptLine& line : lines) {
    if (line.kind == PromptLine::Kind::kBlank || line.kind == PromptLine::Kind::kComment) continue;
    BatchItem item;
    item.line = &line;
    if (line.kind == PromptLine::Kind::kError) {
      item.error = line.error;
      items.push_back(std::move(item));
      continue;
    }
    const PromptOverrides& o = line.overrides;
    item.prompt.prompt = line.prompt;
    item.prompt.guidance_scale = o.guidance_scale.value_or(sampling.guidance_scale);
    item.prompt.top_p = o.top_p ? o.top_p : sampling.top_p;
    item.prompt.seed = o.seed.value_or(sampling.seed);
    item.prompt.bounding_box = default_box;
    if (o.bounding_box) {
      if (!config.gpt.use_bbox) {
        item.error = "boundingBox: the model " + config.source +
                     " has no bounding-box input (gpt_model.use_bbox is false)";
        items.push_back(std::move(item));
        continue;
      }
      item.prompt.bounding_box = normalised_box(*o.bounding_box);
    }
    item.shape.resolution_base = o.resolution_base.value_or(resolution_base);
    item.shape.format = *format;
    const std::optional<int64_t> faces = o.target_face_count ? o.target_face_count : target_faces;
    if (faces) item.shape.target_faces = static_cast<size_t>(*faces);
    item.shape.limits = mesh_limits(*mesh_profile);

    OutputKey& k = item.key;
    k.model = identity;
    k.prompt = line.normalised;
    k.guidance_scale = item.prompt.guidance_scale;
    k.top_p = item.prompt.top_p;
    k.seed = item.prompt.seed;
    k.bounding_box = item.prompt.bounding_box;
    k.resolution_base = item.shape.resolution_base;
    k.format = *format;
    k.target_face_count = faces;
    k.mesh_profile = *mesh_profile;
    k.postprocess = shape_options.mesh.postprocess;
    k.occupancy = occupancy_mode_name(shape_options.occupancy.sampling);
    k.single_stream_decode = to_string(gen_options.single_stream_decode);
    k.kv_cache = gen_options.use_kv_cache;
    k.device = device_kind;
    k.dtype = engine_options.dtype;
    item.name = output_name(k);
    names.insert(item.name);
    items.push_back(std::move(item));
  }
  // A killed run of this shard may have left temporary files of its outputs: gone before any
  // new one is written. (Other shards' files, finished or not, are theirs.)
  if (const size_t removed = out.remove_leftovers(names)) {
    std::printf("removed %zu temporary file(s) of an earlier run\n", removed);
  }

  // The engine loads only when something is left to make, with the decode variants it needs.
  bool guided = false, unguided = false;
  for (const BatchItem& item : items) {
    if (item.error.empty() && !out.has(item.name)) {
      (item.prompt.guidance_scale > 0 ? guided : unguided) = true;
    }
  }
  std::unique_ptr<Engine> engine;
  std::optional<ShapePipeline> pipeline;
  if (guided || unguided) {
    engine_options.capture.buckets = {1};
    engine_options.capture.guided = guided;
    engine_options.capture.unguided = unguided;
    engine_options.capture.modes = {gen_options.single_stream_decode};
    engine = Engine::load(config, engine_options);
    if (!engine->text_encoder()) {
      throw invalid_argument("--prompts-file: " + config.source +
                             " has real weights, so give its CLIP text model with --clip-model");
    }
    pipeline.emplace(*engine, shape_options);
  }

  const std::string manifest_name =
      "manifest-" + std::to_string(shard.index) + "-of-" + std::to_string(shard.count) + ".jsonl";
  ManifestWriter manifest(out.path_of(manifest_name));
  const std::string run_id =
      std::to_string(static_cast<long long>(std::time(nullptr))) + "-" + std::to_string(::getpid());
  const std::string version =
      std::string(project_version()) + " (" + std::string(git_revision()) + ")";
  int64_t made = 0, skipped = 0, failed = 0;
  for (const BatchItem& item : items) {
    const auto start = SteadyClock::now();
    const PromptLine& line = *item.line;
    Json record = {{"line", line.number},
                   {"prompt", item.error.empty() ? line.prompt : line.text},
                   {"file", item.name.empty() ? Json(nullptr) : Json(item.name)},
                   {"status", "ok"},
                   {"error", nullptr},
                   {"error_code", nullptr},
                   {"shard", shard.name()},
                   {"run", run_id},
                   {"params", nullptr},
                   {"timings", nullptr},
                   {"tokens", nullptr},
                   {"vertices", nullptr},
                   {"faces", nullptr},
                   {"warnings", Json::array()}};
    if (!item.name.empty()) record["params"] = item_params(item, model_name);
    std::string error = item.error, error_code = "INVALID_ARGUMENT";
    if (error.empty() && out.has(item.name)) {
      record["status"] = "skipped";
      ++skipped;
      std::printf("line %lld: skipped %s (already made)\n", static_cast<long long>(line.number),
                  item.name.c_str());
    } else if (error.empty()) {
      try {
        const TokenBatch batch = pipeline->generate_tokens({item.prompt}, gen_options);
        ShapeRequest request = item.shape;
        Provenance provenance;
        provenance.prompt = line.prompt;
        provenance.seed = item.prompt.seed;
        provenance.top_p = item.prompt.top_p;
        provenance.guidance_scale = item.prompt.guidance_scale;
        provenance.resolution_base = request.resolution_base;
        provenance.bounding_box = item.prompt.bounding_box;
        provenance.mesh_profile = *mesh_profile;
        if (request.target_faces) {
          provenance.target_face_count = static_cast<int64_t>(*request.target_faces);
        }
        provenance.model = model_name;
        provenance.server_version = version;
        request.metadata = provenance_metadata(provenance);
        const Shape shape = pipeline->make_shape(batch.generation.ids, request);
        const auto write_start = SteadyClock::now();
        out.write_atomically(item.name, shape.encoded);
        const double write_ms = ms_since(write_start);
        const GenerationResult& g = batch.generation;
        const ShapeReport& r = shape.report;
        record["timings"] = {{"text_ms", batch.text_encoding_ms},
                             {"prefill_ms", g.prefill_ms},
                             {"decode_ms", g.decode_ms},
                             {"tpot_ms", g.tpot_ms()},
                             {"latents_ms", r.latents_ms},
                             {"occupancy_ms", r.occupancy_ms},
                             {"marching_cubes_ms", r.marching_cubes_ms},
                             {"postprocess_ms", r.postprocess_ms},
                             {"encode_ms", r.encode_ms},
                             {"mesh_ms", r.total_ms},
                             {"write_ms", write_ms},
                             {"total_ms", ms_since(start)}};
        record["tokens"] = g.tokens;
        record["vertices"] = shape.mesh.vertex_count();
        record["faces"] = shape.mesh.face_count();
        record["occupancy_points"] = r.occupancy.points_evaluated;
        Json& warnings = record["warnings"];
        for (const std::string& w : batch.warnings.front()) warnings.push_back(w);
        for (const std::string& w : shape.warnings) warnings.push_back(w);
        ++made;
        std::printf("line %lld: ok %s (%zu faces, %.0f ms)\n", static_cast<long long>(line.number),
                    item.name.c_str(), shape.mesh.face_count(), ms_since(start));
      } catch (const Error& e) {
        error = e.what();
        error_code = std::string(to_string(e.code()));
      } catch (const std::exception& e) {
        error = e.what();
        error_code = "INTERNAL";
      }
    }
    if (!error.empty()) {
      record["status"] = "error";
      record["error"] = error;
      record["error_code"] = error_code;
      ++failed;
      std::fprintf(stderr, "cube3d-generate: %s:%lld: %s: %s\n", prompts_path.c_str(),
                   static_cast<long long>(line.number), error_code.c_str(), error.c_str());
    }
    manifest.append(dump_line(record));
    std::fflush(stdout);
  }
  std::printf("shard %s: %lld ok, %lld skipped, %lld failed (manifest %s)\n", shard.name().c_str(),
              static_cast<long long>(made), static_cast<long long>(skipped),
              static_cast<long long>(failed), manifest.path().c_str());
  return failed > 0 ? kSomeLinesFailed : 0;
}

int run(int argc, char** argv) {
  CliArgs args = make_args();
  args.parse_answering_help(argc, argv);
  setup_logging(args.get("--log-level", "warn"));
  if (args.has("--prompts-file")) return run_batch(args);
  for (const char* flag : kBatchFlags) {
    if (args.has(flag)) throw invalid_argument(std::string(flag) + ": only with --prompts-file");
  }
  if (!args.has("--model-config")) throw invalid_argument("--model-config is required");
  if (args.has("--prompt") && args.has("--text-embeddings")) {
    throw invalid_argument("give --prompt or --text-embeddings, not both");
  }
  if (args.has("--mesh-out")) mesh_format_from_path(args.get("--mesh-out"));  // fail early
  const std::optional<PreviewOptions> preview = preview_options(args);
  const std::string profile_name = args.get("--mesh-profile", "none");
  const std::optional<MeshProfile> mesh_profile = mesh_profile_from_name(profile_name);
  if (!mesh_profile) {
    throw invalid_argument("--mesh-profile: '" + profile_name + "' is not none or roblox");
  }

  const ModelConfig config = load_model_config(args.get("--model-config"));
  EngineOptions engine_options = engine_options_from(args, args.has("--prompt"));

  GenerationRequest request;
  const Sampling sampling = sampling_from(args);
  request.guidance_scale = sampling.guidance_scale;
  request.top_p = sampling.top_p;
  request.seed = sampling.seed;
  GenerationOptions gen_options;
  gen_options.single_stream_decode =
      parse_single_stream_decode(args.get("--single-stream-decode", "causal"));
  gen_options.use_kv_cache = !args.has("--no-kv-cache");
  gen_options.record_logits = args.has("--dump");
  // The one decode variant this run uses, captured at load (graph modes capture nothing later).
  engine_options.capture.buckets = {1};
  engine_options.capture.guided = request.guidance_scale > 0;
  engine_options.capture.unguided = request.guidance_scale == 0;
  engine_options.capture.modes = {gen_options.single_stream_decode};
  engine_options.capture.record_logits = gen_options.record_logits;
  const int64_t resolution_base = args.get_int("--resolution-base", 8);
  validate_resolution_base(resolution_base);  // before the expensive part

  const int64_t text_dim = config.gpt.text_model_embed_dim;
  if (args.has("--prompt")) {
    // Encoded below, once the engine (and its CLIP) is loaded.
  } else if (args.has("--text-embeddings")) {
    const SafetensorsFile file = SafetensorsFile::open(args.get("--text-embeddings"));
    request.text_hidden =
        require_tensor(file, "clip_hidden_cond", {1, kClipContextLength, text_dim}).squeeze(0);
    request.uncond_hidden =
        require_tensor(file, "clip_hidden_uncond", {1, kClipContextLength, text_dim}).squeeze(0);
    if (file.contains("bbox_xyz"))
      request.bbox = require_tensor(file, "bbox_xyz", {1, 3}).view({3});
  } else if (config.random_weights_seed && engine_options.gpt_weights.empty()) {
    // A random-weight model has no real text encoder to match: random stand-ins for the CLIP
    // states of the prompt and of the empty prompt, fixed by the model's seed.
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(*config.random_weights_seed + 7);
    request.text_hidden = at::randn({kClipContextLength, text_dim}, gen, at::kFloat);
    request.uncond_hidden = at::randn({kClipContextLength, text_dim}, gen, at::kFloat);
    spdlog::warn(
        "no --prompt or --text-embeddings: using random text embeddings (random-weight "
        "model {})",
        config.source);
  } else {
    throw invalid_argument(
        "give --prompt (with --clip-model for real weights) or "
        "--text-embeddings F.safetensors");
  }
  const std::optional<std::array<float, 3>> bounding_box = bounding_box_from(args, config);
  if (bounding_box) {
    request.bbox =
        at::tensor({(*bounding_box)[0], (*bounding_box)[1], (*bounding_box)[2]}, at::kFloat);
  }

  const std::unique_ptr<Engine> engine = Engine::load(config, engine_options);
  ShapeOptions shape_options;
  shape_options.occupancy.sampling.hierarchical =
      parse_occupancy_mode(args.get("--occupancy", "hierarchical"), "--occupancy");
  // Clean-up and decimation only for a mesh that is written or shown: without --mesh-out or
  // --preview the field and its raw surface are all the run reports. (The preview shows the mesh
  // --mesh-out writes.)
  const bool meshing = args.has("--mesh-out") || preview.has_value();
  shape_options.mesh.postprocess = meshing && !args.has("--no-postprocess");
  shape_options.mesh.max_marching_cubes_faces = mesh_budget(args);
  ShapePipeline pipeline(*engine, shape_options);
  GenerationResult result;
  if (args.has("--prompt")) {
    if (!engine->text_encoder()) {
      throw invalid_argument("--prompt: " + config.source +
                             " has real weights, so give its CLIP text model with --clip-model");
    }
    const TokenBatch batch = pipeline.generate_tokens(
        {{args.get("--prompt"), request.guidance_scale, request.top_p, request.seed, bounding_box}},
        gen_options);
    for (const std::string& warning : batch.warnings.front()) spdlog::warn("{}", warning);
    result = batch.generation;
  } else {
    result = engine->generate({request}, gen_options);
  }

  ShapeRequest shape_request;
  shape_request.resolution_base = resolution_base;
  shape_request.format =
      args.has("--mesh-out") ? mesh_format_from_path(args.get("--mesh-out")) : MeshFormat::kRaw;
  if (args.has("--target-faces")) {
    shape_request.target_faces = static_cast<size_t>(args.get_uint("--target-faces", 0));
  }
  // The profile is for the mesh written or shown; without one, the raw surface is reported as it
  // is.
  if (meshing) shape_request.limits = mesh_limits(*mesh_profile);
  if (args.has("--mesh-out")) {
    Provenance provenance;
    provenance.prompt = args.get("--prompt");  // empty for --text-embeddings
    provenance.seed = request.seed;
    provenance.top_p = request.top_p;
    provenance.guidance_scale = request.guidance_scale;
    provenance.resolution_base = resolution_base;
    if (request.bbox.defined()) {
      const at::Tensor box = request.bbox.to(at::kCPU, at::kFloat).contiguous();
      provenance.bounding_box =
          std::array<float, 3>{box[0].item<float>(), box[1].item<float>(), box[2].item<float>()};
    }
    provenance.mesh_profile = *mesh_profile;
    if (shape_request.target_faces) {
      provenance.target_face_count = static_cast<int64_t>(*shape_request.target_faces);
    }
    // The server's name for a model: its config file's stem.
    provenance.model = std::filesystem::path(args.get("--model-config")).stem().string();
    provenance.server_version =
        std::string(project_version()) + " (" + std::string(git_revision()) + ")";
    shape_request.metadata = provenance_metadata(provenance);
  }
  const Shape shape = pipeline.make_shape(result.ids, shape_request, {}, {}, /*keep_field=*/true);
  const ShapeReport& report = shape.report;
  for (const std::string& warning : shape.warnings) spdlog::warn("{}", warning);

  const at::Tensor ids = result.ids[0].contiguous();
  std::string token_text;
  const int64_t* id_data = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < ids.numel(); ++i) {
    if (i > 0) token_text += ' ';
    token_text += std::to_string(id_data[i]);
  }
  const int64_t n = grid_points_per_axis(resolution_base);
  const auto inside_points =
      std::count_if(shape.field.begin(), shape.field.end(), [](float v) { return v > 0.0f; });
  const double inside =
      static_cast<double>(inside_points) / static_cast<double>(shape.field.size()) * 100.0;
  std::printf("tokens (%lld): %s\n", static_cast<long long>(ids.numel()), token_text.c_str());
  std::printf(
      "prefill %.2f ms | decode %lld tokens %.2f ms | TPOT %.3f ms | shape decode %.1f ms "
      "(%lld^3 grid, %s: %lld points evaluated, %.1f%% inside)\n",
      result.prefill_ms, static_cast<long long>(result.tokens - 1), result.decode_ms,
      result.tpot_ms(), report.latents_ms + report.occupancy_ms, static_cast<long long>(n),
      occupancy_mode_name(shape_options.occupancy.sampling).c_str(),
      static_cast<long long>(report.occupancy.points_evaluated), inside);
  if (args.has("--mesh-out")) {
    write_file(args.get("--mesh-out"), shape.encoded);
    std::printf("mesh: %zu vertices, %zu faces -> %s (%.1f ms)\n", shape.mesh.vertex_count(),
                shape.mesh.face_count(), args.get("--mesh-out").c_str(),
                report.marching_cubes_ms + report.postprocess_ms + report.encode_ms);
  }
  if (preview) {
    const auto start = SteadyClock::now();
    const std::string png = preview_png(shape.mesh, *preview);
    const double preview_ms = ms_since(start);
    write_file_atomically(args.get("--preview"), png);
    std::printf("preview: %d x %d -> %s (%.1f ms)\n", preview->width, preview->height,
                args.get("--preview").c_str(), preview_ms);
  }
  if (args.has("--tokens-out")) write_file(args.get("--tokens-out"), token_text + "\n");
  if (args.has("--timings-json")) {
    const nlohmann::json timings = {
        {"tokens", result.tokens},
        {"prefill_ms", result.prefill_ms},
        {"decode_ms", result.decode_ms},
        {"tpot_ms", result.tpot_ms()},
        {"shape_decode_ms", report.latents_ms + report.occupancy_ms},
        {"latents_ms", report.latents_ms},
        {"occupancy_ms", report.occupancy_ms},
        {"occupancy", occupancy_mode_name(shape_options.occupancy.sampling)},
        {"occupancy_points", report.occupancy.points_evaluated},
        {"dense_points", report.occupancy.dense_points},
        {"marching_cubes_ms", report.marching_cubes_ms},
        {"postprocess_ms", report.postprocess_ms},
        {"vertices", shape.mesh.vertex_count()},
        {"faces", shape.mesh.face_count()}};
    write_file(args.get("--timings-json"), timings.dump(2) + "\n");
  }
  if (args.has("--dump")) {
    write_safetensors(args.get("--dump"),
                      {{"ids", ids},
                       {"step_logits", result.step_logits[0]},
                       {"latents", engine->decode_latents(result.ids).to(at::kCPU, at::kFloat)},
                       {"grid_logits", at::from_blob(const_cast<float*>(shape.field.data()),
                                                     {n, n, n}, at::kFloat)},
                       {"cond", result.cond.to(at::kCPU, at::kFloat)},
                       {"prefill_logits", result.prefill_logits.to(at::kCPU, at::kFloat)}},
                      {{"model_config", config.source},
                       {"single_stream_decode", to_string(gen_options.single_stream_decode)},
                       {"kv_cache", gen_options.use_kv_cache ? "true" : "false"},
                       {"cuda_graphs", to_string(engine->graph_mode())},
                       {"occupancy", occupancy_mode_name(shape_options.occupancy.sampling)}});
  }
  return 0;
}

}  // namespace
}  // namespace cube3d

int main(int argc, char** argv) {
  return cube3d::run_tool("cube3d-generate", cube3d::run, argc, argv);
}
