// Every model- and protocol-level constant, in one place, each with where it comes from. A layer
// that needs one of these includes this header; nothing restates a value as a literal, so the
// limits of the server, the scheduler, the shape decoder and the mesh stage cannot drift apart.
// Torch-free: every layer may include it.
#pragma once

#include <cstdint>

namespace cube3d {

// --- CLIP text encoder (openai/clip-vit-large-patch14; Hugging Face CLIPTokenizer) ----------
// The text model's max_position_embeddings: every prompt is padded (with EOS) to this many ids,
// and the shape GPT's condition has this many text positions.
inline constexpr int64_t kClipContextLength = 77;
// Room for the prompt's own tokens once BOS and EOS are in: longer prompts are truncated.
inline constexpr int64_t kClipMaxPromptTokens = kClipContextLength - 2;
inline constexpr int64_t kClipStartOfText = 49406;  // <|startoftext|>
inline constexpr int64_t kClipEndOfText = 49407;    // <|endoftext|>, also the padding id

// --- Occupancy grid (official cube3d/model/autoencoder/grid.py and engine.py) ---------------
// The query box [-1.05, 1.05]^3; 2^r + 1 points per axis for resolution base r. Double, as the
// official numpy.linspace computes the axis (the shape decoder rounds each point to float32; the
// mesh stage's float32 world coordinates round the bounds).
inline constexpr double kGridBoundMin = -1.05;
inline constexpr double kGridBoundMax = 1.05;
constexpr int64_t grid_points_per_axis_unchecked(int64_t resolution_base) {
  return (int64_t{1} << resolution_base) + 1;
}

// --- Bounding box (official cube3d/generate.py, v0.5 models) ---------------------------------
// A requested box is scaled so that its longest side is this long, in float32 as the official
// code's tensor arithmetic does.
inline constexpr float kBoundingBoxLongestSide = 1.925f;

// --- Coarse-to-fine occupancy (ours; FlashVDM-style, see mesh/hierarchical_occupancy.h) ---------
// The first level's resolution base and the margin, in cells, refined around the surface:
// measured on analytic fields, r0 5 / dilation 1 gives the dense meshes exactly with 8-118x fewer
// points at resolution base 8.
inline constexpr int64_t kDefaultOccupancyCoarsestResolutionBase = 5;
inline constexpr int64_t kDefaultOccupancyDilation = 1;

// --- The mesh stage's budget (ours; mesh/mesh_pipeline.h) -------------------------------------
// A surface of more marching-cubes faces is extracted from the grid one level coarser (or more):
// the shapes Cube 3D makes have 50k-200k at resolution_base 8, a random-weight model's noise
// millions. Measured (cube3d-mesh-bench, bench/results): with this budget no mesh's
// post-processing takes more than ~0.3 s on 16 cores, or ~0.45 s on 2 at resolution_base 9.
inline constexpr int64_t kDefaultMaxMarchingCubesFaces = 600'000;

// --- Our limits -------------------------------------------------------------------------------
// The hard cap on resolution_base for every layer (shape decoder, mesh stage, server config):
// 2^10 + 1 = 1025 points per side is about 1.1 G occupancy queries and a 4.3 GB float grid;
// memory and time grow eightfold per step.
inline constexpr int64_t kMaxResolutionBase = 10;
// The server's default limits.max_resolution_base / min_resolution_base (operators may widen
// them up to the hard cap), and the default range of the mesh stage's own check.
inline constexpr int64_t kDefaultMaxResolutionBase = 9;
inline constexpr int64_t kDefaultMinResolutionBase = 4;
// The largest batch bucket the server config and the scheduler accept (a bucket is also a KV
// cache size and a captured CUDA graph, so larger ones only waste memory).
inline constexpr int64_t kMaxBatchBucket = 256;
// The longest batching.max_queue_delay_ms: a batch window over a minute is a misconfiguration.
inline constexpr int64_t kMaxQueueDelayMs = 60'000;
// batching.batch_max_wait_ms at most: a day.
inline constexpr int64_t kMaxBatchWaitMs = 86'400'000;
// The largest classifier-free guidance scale a request may ask for.
inline constexpr double kMaxGuidanceScale = 100.0;

// --- Request defaults (official cube3d/inference/engine.py: Engine.run / generate_tokens) ----
// What a request gets for a field it leaves unset, unless the server config says otherwise.
inline constexpr double kDefaultGuidanceScale = 3.0;
inline constexpr int64_t kDefaultResolutionBase = 8;
// Ours: the prompt size limit (bytes of UTF-8) and the simplification cap of a request.
inline constexpr int64_t kDefaultMaxPromptBytes = 1024;
inline constexpr int64_t kDefaultMaxTargetFaceCount = 2'000'000;
// Ours: levels of detail a request may ask for (lod_face_counts), by default and at most: each
// level is one more simplification pass (a fraction of the first one's time) and one more mesh
// in the answer.
inline constexpr int64_t kDefaultMaxLodLevels = 4;
inline constexpr int64_t kMaxLodLevels = 8;
// Ours: requests without a deadline get this one (5 minutes); 0 in the config means none.
inline constexpr int64_t kDefaultDeadlineMs = 300'000;
// How long a gRPC call may take to send its request message after opening.
inline constexpr int64_t kDefaultRequestReadTimeoutMs = 30'000;
// Ours: the gRPC message size limit (and the largest response the service sends).
inline constexpr int64_t kDefaultMaxMessageBytes = int64_t{64} << 20;

}  // namespace cube3d
