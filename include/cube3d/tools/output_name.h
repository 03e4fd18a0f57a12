// The file names of cube3d-generate's batch mode (--prompts-file): each output is named by a
// digest of everything that changes its geometry, so that the same prompt with the same
// settings always gets the same name (a rerun finds it and skips it) and any change gets
// another.
//
//   name = first kOutputNameDigits hex digits of SHA-256(output_key_material(key)) + "." + format
//
// The material is a self-delimiting list of "tag=<length>:<bytes>;" fields (like the server's
// result key): the model's identity (model_identity()), the normalised prompt (what the model
// reads: CLIP's clean-up and lower case), guidance scale, top-p (or greedy), seed, normalised
// bounding box, resolution base, format, decimation target, mesh profile, clean-up on or off,
// occupancy mode, single-stream decode mode, KV cache, device type and dtype. Numbers are hashed
// by their bit patterns. Not in it: the software's version and the provenance strings a file
// carries (the prompt as given, the version), which do not change the geometry.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cube3d/mesh/compact_mesh.h"
#include "cube3d/mesh/mesh_format.h"
#include "cube3d/mesh/mesh_frame.h"
#include "cube3d/mesh/mesh_profile.h"

namespace cube3d {

inline constexpr size_t kOutputNameDigits = 20;  // 80 bits

struct OutputKey {
  std::string model;   // model_identity()
  std::string prompt;  // normalised (text_the_model_reads)
  double guidance_scale = 0;
  std::optional<double> top_p;  // unset: greedy
  uint64_t seed = 0;
  std::optional<std::array<float, 3>> bounding_box;  // normalised, as the model gets it
  int64_t resolution_base = 0;
  MeshFormat format = MeshFormat::kGlb;
  std::optional<int64_t> target_face_count;
  MeshProfile mesh_profile = MeshProfile::kNone;
  // (cube3d-generate sets none of these three: its files are GLB, OBJ or PLY, one level, in the
  // model's frame; add_shape_fields reads them.)
  CompactMeshOptions compact;
  MeshPivot pivot = MeshPivot::kModelOrigin;
  std::vector<int64_t> lod_face_counts;
  bool postprocess = true;
  std::string occupancy;             // "hierarchical" | "dense"
  std::string single_stream_decode;  // "causal" | "reference"
  bool kv_cache = true;
  std::string device;  // "cpu" | "cuda" (not the device index)
  std::string dtype;   // "float32" | "bfloat16"
};

// The model's identity: the SHA-256 of the model config file's bytes, and for each weight file
// (and the CLIP folder and vocabulary) given, its last path component and, for a file, its size
// in bytes: not its path (another mount point keeps the names) and not its content (a read of
// gigabytes at every start). Empty strings are "not given". Throws not_found for a config that
// cannot be read.
std::string model_identity(const std::string& model_config, const std::string& gpt_weights,
                           const std::string& shape_weights, const std::string& clip_model,
                           const std::string& clip_vocab);

std::string output_key_material(const OutputKey& key);

// Lower-case hex of the SHA-256 of `bytes` (OpenSSL).
std::string sha256_hex(std::string_view bytes);

// "<digest>.<glb|obj|ply>".
std::string output_name(const OutputKey& key);

}  // namespace cube3d
