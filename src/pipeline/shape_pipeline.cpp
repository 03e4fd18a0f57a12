#include "cube3d/pipeline/shape_pipeline.h"

#include <ATen/ATen.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <array>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cube3d/core/clock.h"
#include "cube3d/core/error.h"
#include "cube3d/mesh/grid.h"
#include "cube3d/mesh/level_review.h"
#include "cube3d/mesh/marching_cubes.h"
#include "cube3d/mesh/mesh_io.h"

namespace cube3d {
namespace {

// Who set the limits, for messages: the profile whose limits they are, else plain "the mesh
// limits" (a caller's own).
std::string limits_allow(const MeshLimits& limits) {
  if (limits == mesh_limits(MeshProfile::kRoblox)) {
    return "mesh_profile " + std::string(to_string(MeshProfile::kRoblox)) + " allows";
  }
  return "the mesh limits allow";
}

void check_limits(const MeshLimits& limits) {
  const auto check = [](const char* name, const std::optional<int64_t>& value) {
    if (value && *value < 1) {
      throw invalid_argument(std::string("mesh limits: ") + name + " is " + std::to_string(*value) +
                             ", it must be at least 1");
    }
  };
  check("max_faces", limits.max_faces);
  check("max_vertices", limits.max_vertices);
  check("max_file_bytes", limits.max_file_bytes);
}

// What a face limit did to the mesh, for Shape.warnings: what it changed, and a requested target
// over it (which it would change on a larger shape).
void warn_face_limit(const MeshPipelineReport& mesh, const ShapeRequest& request,
                     const MeshPipelineOptions& configured, std::vector<std::string>& warnings) {
  // Level 0's target is lod_face_counts[0] when levels were asked for (the request's field).
  const std::string target_name =
      request.lod_targets.empty() ? "target_face_count " : "lod_face_counts[0] ";
  // Appended, not `"(" + string`: GCC 12 reports a false -Wstringop-overflow for that.
  std::string limit(1, '(');
  limit += limits_allow(request.limits);
  limit += " at most ";
  limit += std::to_string(*request.limits.max_faces);
  limit += " triangles)";
  const std::string used = std::to_string(mesh.simplification.target_faces);
  const auto most = static_cast<size_t>(*request.limits.max_faces);
  if (request.target_faces && *request.target_faces > most && !mesh.capped) {
    // The caller asked for more than the profile allows: said even when this mesh came out
    // smaller anyway, since the same request on a larger shape would be clamped.
    warnings.push_back(target_name + std::to_string(*request.target_faces) + " clamped to " +
                       std::to_string(most) + " " + limit);
  }
  if (mesh.capped) {
    if (!(configured.postprocess && configured.simplify)) {
      warnings.push_back("decimated to " + used + " faces " + limit +
                         " although simplification is off");
    } else if (request.target_faces) {
      warnings.push_back(target_name + std::to_string(mesh.uncapped_target_faces) + " clamped to " +
                         used + " " + limit);
    } else if (configured.simplification.target_faces > 0) {
      warnings.push_back("the configured target of " + std::to_string(mesh.uncapped_target_faces) +
                         " faces clamped to " + used + " " + limit);
    } else {
      warnings.push_back("decimated to " + used + " faces " + limit +
                         " instead of the default target " +
                         std::to_string(mesh.uncapped_target_faces));
    }
  }
  if (mesh.faces_before_sloppy_pass > 0) {
    warnings.push_back("the simplifier stopped at " +
                       std::to_string(mesh.faces_before_sloppy_pass) + " faces, over the limit " +
                       limit + ": the sloppy simplifier finished, so the mesh may not be closed");
  }
}

}  // namespace

ShapePipeline::ShapePipeline(Engine& engine, ShapeOptions options)
    : engine_(engine), options_(std::move(options)) {}

EncodedPrompts ShapePipeline::encode_prompts(const std::vector<PromptRequest>& prompts) const {
  const TextEncoder* text = engine_.text_encoder();
  if (!text) {
    throw failed_precondition(
        "this model has no CLIP text encoder configured (model.clip_model / --clip-model), so "
        "it cannot take text prompts");
  }
  const auto start = SteadyClock::now();
  std::vector<std::string> texts;
  texts.reserve(prompts.size());
  for (const PromptRequest& p : prompts) texts.push_back(p.prompt);
  const std::vector<EncodedPrompt> encoded = text->encode(texts);
  EncodedPrompts out;
  out.text_encoding_ms = ms_since(start);
  out.requests.reserve(prompts.size());
  out.warnings.resize(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const PromptRequest& p = prompts[i];
    GenerationRequest g;
    g.text_hidden = encoded[i].hidden;
    g.uncond_hidden = text->empty_prompt();
    if (p.bounding_box) {
      g.bbox = at::tensor({(*p.bounding_box)[0], (*p.bounding_box)[1], (*p.bounding_box)[2]},
                          at::kFloat);
    }
    g.guidance_scale = p.guidance_scale;
    g.top_p = p.top_p;
    g.seed = p.seed;
    out.requests.push_back(std::move(g));
    if (encoded[i].truncated) {
      out.warnings[i].push_back("prompt truncated: " + std::to_string(encoded[i].token_count) +
                                " CLIP tokens, only the first " +
                                std::to_string(kClipMaxPromptTokens) + " are used");
    }
  }
  return out;
}

TokenBatch ShapePipeline::generate_tokens(const std::vector<PromptRequest>& prompts,
                                          const GenerationOptions& options) {
  EncodedPrompts encoded = encode_prompts(prompts);
  TokenBatch batch;
  batch.text_encoding_ms = encoded.text_encoding_ms;
  batch.warnings = std::move(encoded.warnings);
  batch.generation = engine_.generate(encoded.requests, options);
  return batch;
}

Shape ShapePipeline::make_shape(const at::Tensor& ids, const ShapeRequest& request,
                                const std::function<void(const OccupancyProgress&)>& on_progress,
                                const std::function<bool()>& should_stop, bool keep_field) const {
  const auto start = SteadyClock::now();
  const auto check_stop = [&](const char* where) {
    if (should_stop && should_stop()) throw cancelled(std::string("stopped ") + where);
  };
  const at::Tensor row = ids.dim() == 1 ? ids.unsqueeze(0) : ids;
  if (row.dim() != 2 || row.size(0) != 1) {
    throw invalid_argument("make_shape expects one object's token ids [T] or [1, T]");
  }
  const MeshLimits& limits = request.limits;
  check_limits(limits);  // before the expensive part
  // On a CUDA device this shape's device work (latents, occupancy query) goes to a stream of
  // libtorch's pool, not the default stream the decode steps run on, so that the two overlap on
  // the GPU instead of queueing behind each other. Everything it touches is made here (or is a
  // weight, made before serving started), and its results come back to the CPU through copies
  // on the same stream. On the CPU: nothing.
  c10::OptionalStreamGuard side_stream;
  if (engine_.device().is_cuda()) {
    const c10::impl::VirtualGuardImpl cuda(c10::DeviceType::CUDA);
    side_stream.reset_stream(cuda.getStreamFromGlobalPool(engine_.device()));
  }
  Shape shape;
  ShapeReport& report = shape.report;
  const at::Tensor latents = engine_.decode_latents(row);
  report.latents_ms = ms_since(start);

  OccupancyField field = evaluate_occupancy(engine_, latents, request.resolution_base,
                                            options_.occupancy, on_progress, should_stop);
  report.occupancy_ms = field.ms;
  report.occupancy = field.report;
  check_stop("after the occupancy field");

  const int64_t n = field.points_per_axis;
  const GridView view{std::span<const float>(field.values), {n, n, n}};
  MeshPipelineOptions mesh_options = options_.mesh;
  if (request.target_faces) mesh_options.simplification.target_faces = *request.target_faces;
  if (limits.max_faces) mesh_options.max_faces = static_cast<size_t>(*limits.max_faces);
  report.has_surface = has_level_crossing(view, mesh_options.marching_cubes.level);
  if (!report.has_surface) {
    // A named string: GCC 12 reports a false -Warray-bounds for the literal pushed directly.
    static const std::string kNoSurface =
        "the occupancy field has no surface at level 0: empty mesh";
    shape.warnings.push_back(kNoSurface);
  }
  shape.mesh = grid_to_mesh(view, mesh_options, &report.mesh);
  report.marching_cubes_ms = report.mesh.marching_cubes_ms;
  report.postprocess_ms = report.mesh.postprocess_ms;
  if (report.mesh.over_budget) shape.warnings.push_back(budget_warning(report.mesh, view.dims));
  if (limits.max_faces) {
    warn_face_limit(report.mesh, request, options_.mesh, shape.warnings);
    if (static_cast<int64_t>(shape.mesh.face_count()) > *limits.max_faces) {
      // The sloppy pass always reaches its budget: this is a bug of ours, not the request's.
      throw internal_error("mesh has " + std::to_string(shape.mesh.face_count()) +
                           " faces after decimation, over the " +
                           std::to_string(*limits.max_faces) + " that " + limits_allow(limits) +
                           " (max_faces)");
    }
  }
  if (limits.max_vertices &&
      static_cast<int64_t>(shape.mesh.vertex_count()) > *limits.max_vertices) {
    throw resource_exhausted("mesh has " + std::to_string(shape.mesh.vertex_count()) +
                             " vertices, over the " + std::to_string(*limits.max_vertices) +
                             " that " + limits_allow(limits) + " (max_vertices)");
  }
  check_stop("after meshing");

  // What the targets came to: levels of detail the face limit or the simplifier made identical
  // are dropped (never sent as copies), and a target not met is said (mesh/level_review.h).
  LevelTargets review;
  review.finest_target = request.target_faces;
  review.finest_faces = shape.mesh.face_count();
  review.asked = request.lod_targets;
  if (limits.max_faces) {
    review.max_faces = static_cast<size_t>(*limits.max_faces);
    review.limit_owner = limits_allow(limits);
  }
  review.simplified = mesh_options.postprocess && mesh_options.simplify;
  review.tolerance = mesh_options.simplification.tolerance;
  if (!request.lod_targets.empty()) {
    const auto lod_start = SteadyClock::now();
    // A profile's face limit caps every level's target, as it caps level 0's.
    std::vector<size_t> targets = request.lod_targets;
    if (limits.max_faces) {
      for (size_t& t : targets) t = std::min(t, static_cast<size_t>(*limits.max_faces));
    }
    std::vector<Mesh> levels =
        levels_of_detail(shape.mesh, targets, mesh_options.simplification, mesh_options.threads);
    for (const Mesh& level : levels) review.faces.push_back(level.face_count());
    const LevelReview reviewed = review_levels(review);
    shape.warnings.insert(shape.warnings.end(), reviewed.warnings.begin(), reviewed.warnings.end());
    for (const size_t i : reviewed.kept) {
      // A split of a spot the simplifier glued adds a vertex or two: checked like level 0.
      if (limits.max_vertices &&
          static_cast<int64_t>(levels[i].vertex_count()) > *limits.max_vertices) {
        throw resource_exhausted("level of detail " + std::to_string(i + 1) + " has " +
                                 std::to_string(levels[i].vertex_count()) + " vertices, over the " +
                                 std::to_string(*limits.max_vertices) + " that " +
                                 limits_allow(limits) + " (max_vertices)");
      }
      shape.lods.push_back({targets[i], std::move(levels[i]), {}});
    }
    report.lod_ms = ms_since(lod_start);
    check_stop("after the levels of detail");
  } else if (request.target_faces) {
    const LevelReview reviewed = review_levels(review);
    shape.warnings.insert(shape.warnings.end(), reviewed.warnings.begin(), reviewed.warnings.end());
  }
  if (request.pivot != MeshPivot::kModelOrigin) {
    const BoundingBox box = bounding_box(shape.mesh);
    const std::array<float, 3> offset = pivot_offset(
        request.pivot, {box.min[0], box.min[1], box.min[2]}, {box.max[0], box.max[1], box.max[2]});
    translate_mesh(shape.mesh, offset);
    for (ShapeLevel& level : shape.lods) translate_mesh(level.mesh, offset);
  }

  if (request.format != MeshFormat::kRaw) {
    const auto encode_start = SteadyClock::now();
    const auto encode = [&](const Mesh& mesh, const MeshMetadata& metadata) {
      std::string bytes = encode_mesh(mesh, request.format, metadata, request.compact);
      if (limits.max_file_bytes && static_cast<int64_t>(bytes.size()) > *limits.max_file_bytes) {
        throw resource_exhausted(std::string(to_string(request.format)) + " file of " +
                                 std::to_string(bytes.size()) + " bytes is over the " +
                                 std::to_string(*limits.max_file_bytes) + " bytes that " +
                                 limits_allow(limits) + " (max_file_bytes)");
      }
      return bytes;
    };
    shape.encoded = encode(shape.mesh, request.metadata);
    for (size_t i = 0; i < shape.lods.size(); ++i) {
      MeshMetadata metadata = request.metadata;
      if (!metadata.empty()) metadata.add("lod_level", static_cast<int64_t>(i + 1));
      shape.lods[i].encoded = encode(shape.lods[i].mesh, metadata);
    }
    report.encode_ms = ms_since(encode_start);
  }
  if (keep_field) shape.field = std::move(field.values);
  report.total_ms = ms_since(start);
  return shape;
}

}  // namespace cube3d
