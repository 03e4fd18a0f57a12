// The model as the Open Inference Protocol describes it (model metadata, Triton's model
// configuration): its name and version, its input and output tensors, and how it batches.
// docs/open-inference-protocol.md is the user's side of this table.
//
//   inputs   PROMPT          BYTES [1]  required: the text, UTF-8
//            SEED            INT64 [1]  top-p sampling seed (>= 0)
//            GUIDANCE_SCALE  FP32  [1]
//            TOP_P           FP32  [1]  (0, 1]; left out: greedy
//            RESOLUTION_BASE INT32 [1]  the grid's 2^r + 1 points per side
//            BBOX            FP32  [3]  v0.5 models only: the box's x, y, z
//            FORMAT          BYTES [1]  glb, obj, ply or compact
//   outputs  MESH            BYTES [1]     the mesh file (default output)
//            VERTICES        FP32  [-1, 3] the mesh's vertices
//            FACES           INT32 [-1, 3] its triangles, three vertex indices each
//
// Dimensions are given without the batch dimension (max_batch_size > 0: a request's first
// dimension is its batch, as Triton's clients send it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cube3d/mesh/mesh_format.h"
#include "cube3d/server/inference/tensor.h"
#include "cube3d/server/service/model_identity.h"
#include "cube3d/server/service/request_policy.h"

namespace cube3d::inference {

inline constexpr const char* kPrompt = "PROMPT";
inline constexpr const char* kSeed = "SEED";
inline constexpr const char* kGuidanceScale = "GUIDANCE_SCALE";
inline constexpr const char* kTopP = "TOP_P";
inline constexpr const char* kResolutionBase = "RESOLUTION_BASE";
inline constexpr const char* kBoundingBox = "BBOX";
inline constexpr const char* kFormat = "FORMAT";
inline constexpr const char* kMesh = "MESH";
inline constexpr const char* kVertices = "VERTICES";
inline constexpr const char* kFaces = "FACES";

// The version every model of this server has: one model, loaded at start.
inline constexpr const char* kModelVersion = "1";
inline constexpr const char* kPlatform = "cube3d";
// The server's name in its metadata.
inline constexpr const char* kServerName = "cube3d-server";

// What the server config says about how requests are batched and queued (batching:), for the
// model configuration; also the largest batch a request may carry.
struct InferenceOptions {
  std::vector<int64_t> batch_buckets = {1, 2, 4, 8};
  int64_t max_queue_delay_ms = 5;
  int64_t max_queue_size = 64;
  bool gpu = false;  // device: cuda
  bool cache_enabled = false;
};

struct TensorSpec {
  std::string name;
  DataType datatype = DataType::kBytes;
  std::vector<int64_t> dims;  // without the batch dimension
  bool optional = false;      // inputs: may be left out
};

struct ModelDescription {
  std::string name;
  std::string version = kModelVersion;
  std::string platform = kPlatform;
  // The largest batch one request may carry: the largest batch bucket.
  int64_t max_batch_size = 1;
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  InferenceOptions options;
  ModelIdentity identity;
  int64_t tokens_per_shape = 0;
  // MESH's format when a request names none: the server's defaults.format, or GLB when that is
  // raw (MESH is a file; the arrays are VERTICES and FACES).
  MeshFormat default_format = MeshFormat::kGlb;
};

ModelDescription describe_model(const ModelIdentity& model, const RequestPolicy& policy,
                                int64_t tokens_per_shape, const InferenceOptions& options);

// The spec of an input or output by name; null when the model has none of that name.
const TensorSpec* find_input(const ModelDescription& model, const std::string& name);
const TensorSpec* find_output(const ModelDescription& model, const std::string& name);

// Throws not_found naming what the server has when `name` is not this model or `version` not
// one of its versions (empty: the server's choice).
void check_model(const ModelDescription& model, const std::string& name,
                 const std::string& version);

// "PROMPT, SEED, ..." (for messages).
std::string tensor_names(const std::vector<TensorSpec>& tensors);

}  // namespace cube3d::inference
