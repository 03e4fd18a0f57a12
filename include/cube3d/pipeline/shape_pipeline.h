// Text to mesh file, the one way every front end makes a shape (the server, cube3d-generate,
// cube3d-bench): prompts -> CLIP conditions -> shape tokens (a batch, on the engine) and then, per
// object, tokens -> latents -> occupancy field -> marching cubes -> clean-up and simplification ->
// encoded file, with one report of per-stage timings and counts.
//
// The two halves are separate calls because they run on different threads in the server: token
// generation for a whole batch on the scheduler's worker, shapes on mesh threads while the next
// batch decodes.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cube3d/engine/engine.h"
#include "cube3d/mesh/compact_mesh.h"
#include "cube3d/mesh/mesh.h"
#include "cube3d/mesh/mesh_format.h"
#include "cube3d/mesh/mesh_frame.h"
#include "cube3d/mesh/mesh_metadata.h"
#include "cube3d/mesh/mesh_pipeline.h"
#include "cube3d/mesh/mesh_profile.h"
#include "cube3d/pipeline/occupancy_field.h"

namespace cube3d {

// --- prompts -> tokens ---------------------------------------------------------------------------

struct PromptRequest {
  std::string prompt;
  double guidance_scale = kDefaultGuidanceScale;
  std::optional<double> top_p;  // unset: greedy
  uint64_t seed = 0;
  std::optional<std::array<float, 3>> bounding_box;  // normalised (use_bbox models)
};

struct EncodedPrompts {
  std::vector<GenerationRequest> requests;         // CLIP conditions and sampling parameters
  double text_encoding_ms = 0;                     // the whole group's CLIP encoding
  std::vector<std::vector<std::string>> warnings;  // per request (e.g. the prompt was truncated)
};

struct TokenBatch {
  GenerationResult generation;                     // ids [n, T] on the CPU, timings
  double text_encoding_ms = 0;                     // the whole batch's CLIP encoding
  std::vector<std::vector<std::string>> warnings;  // per request (e.g. the prompt was truncated)
};

// --- tokens -> shape ----------------------------------------------------------------------------

struct ShapeOptions {
  OccupancyOptions occupancy;
  MeshPipelineOptions mesh;  // marching cubes, clean-up, simplification
};

struct ShapeRequest {
  int64_t resolution_base = kDefaultResolutionBase;
  MeshFormat format = MeshFormat::kGlb;  // kRaw: no file, the mesh only
  std::optional<size_t> target_faces;    // overrides options.mesh.simplification's
  // Hard limits (a mesh profile's, mesh_limits()); each set one must be at least 1. max_faces:
  // the decimation target is at most it, and a mesh over it is decimated even when the options
  // turn simplification off (MeshPipelineOptions::max_faces), with a warning when that changes
  // the mesh. max_vertices and max_file_bytes (the encoded file; nothing for kRaw) are checked
  // and refused with resource_exhausted naming the limit. None set: exactly as without limits.
  MeshLimits limits;
  MeshMetadata metadata;       // written into the file (provenance.h); empty: the file as without
  CompactMeshOptions compact;  // kCompact's positions and normals
  // Where the mesh's origin goes (mesh/mesh_frame.h), taken from level 0's box and applied to
  // every level, so that the levels line up.
  MeshPivot pivot = MeshPivot::kModelOrigin;
  // Levels of detail after the first: level i + 1 simplified from level i to lod_targets[i]
  // (mesh_pipeline.h levels_of_detail), each checked against the limits and encoded like level 0;
  // a level's file carries the metadata plus "lod_level": its place among the levels answered.
  // A level with no fewer faces than the one before it (clamped to the same target, or beyond
  // what the simplifier reaches) is dropped with a warning, and a target (target_faces too) not
  // met is said (mesh/level_review.h): Shape::lods may hold fewer levels than asked.
  std::vector<size_t> lod_targets;
};

// One further level of detail of a shape.
struct ShapeLevel {
  size_t target_faces = 0;
  Mesh mesh;            // world coordinates after the pivot
  std::string encoded;  // the file's bytes (empty for kRaw)
};

struct ShapeReport {
  double latents_ms = 0, occupancy_ms = 0, marching_cubes_ms = 0, postprocess_ms = 0, encode_ms = 0,
         total_ms = 0;
  double lod_ms = 0;                  // the further levels' simplification (lod_targets)
  OccupancySamplingReport occupancy;  // points evaluated (of the dense grid's), per level
  MeshPipelineReport mesh;
  bool has_surface = true;  // the field crosses the level (else the mesh is empty)
};

struct Shape {
  Mesh mesh;                     // world coordinates after the pivot
  std::string encoded;           // the file's bytes (empty for kRaw)
  std::vector<ShapeLevel> lods;  // ShapeRequest::lod_targets' levels
  ShapeReport report;
  std::vector<std::string> warnings;
  std::vector<float> field;  // the occupancy field [N^3], when asked for (dumps, tests)
};

class ShapePipeline {
 public:
  ShapePipeline(Engine& engine, ShapeOptions options);

  const Engine& engine() const { return engine_; }
  const ShapeOptions& options() const { return options_; }

  // CLIP-encodes the prompts: failed_precondition when the engine has no text encoder.
  // Thread-safe.
  EncodedPrompts encode_prompts(const std::vector<PromptRequest>& prompts) const;

  // encode_prompts, then their tokens as one static batch. Not thread-safe (the engine's KV
  // cache).
  TokenBatch generate_tokens(const std::vector<PromptRequest>& prompts,
                             const GenerationOptions& options);

  // One object's tokens ([T] or [1, T], any device) to its mesh and file. Thread-safe; one
  // object's numbers never depend on other objects (latents are computed per object).
  // `on_progress` and `should_stop` as for evaluate_occupancy; stopping between the stages too.
  Shape make_shape(const at::Tensor& ids, const ShapeRequest& request,
                   const std::function<void(const OccupancyProgress&)>& on_progress = {},
                   const std::function<bool()>& should_stop = {}, bool keep_field = false) const;

 private:
  Engine& engine_;
  ShapeOptions options_;
};

}  // namespace cube3d
