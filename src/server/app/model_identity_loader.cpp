#include "cube3d/server/app/model_identity_loader.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "cube3d/cli/version.h"
#include "cube3d/core/error.h"
#include "cube3d/core/files.h"
#include "cube3d/core/sha256.h"

namespace cube3d {
namespace {

// The weights digest's encoding: each piece "<tag>=<n>:<bytes>" into one stream (kept as it
// was first written: the digest is part of every cache key and mesh file's provenance).
class Sha256 {
 public:
  void add(std::string_view bytes) { stream_.add(bytes); }
  // A tagged, length-prefixed field: no two different inputs hash alike.
  void field(std::string_view tag, std::string_view bytes) {
    add(tag);
    length(bytes.size());
    add(bytes);
  }
  // "=<n>:" (appended piecewise: GCC 12 warns falsely, -Wstringop-overflow, on "=" + string).
  void length(uint64_t n) {
    add("=");
    add(std::to_string(n));
    add(":");
  }
  void file(const std::string& tag, const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw not_found(tag + ": cannot read " + path.string() + " to take its digest");
    const auto size = std::filesystem::file_size(path);
    add(tag);
    length(size);
    std::vector<char> buffer(size_t{1} << 20);
    while (in) {
      in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      add(std::string_view(buffer.data(), static_cast<size_t>(in.gcount())));
    }
  }
  std::string hex() { return hex_of(stream_.finish()); }

 private:
  Sha256Stream stream_;
};

// A file, or every regular file of a folder (a Hugging Face CLIP folder) in name order.
void add_path(Sha256& sha, const std::string& tag, const std::string& path) {
  if (path.empty()) return sha.field(tag, "none");
  if (!std::filesystem::is_directory(path)) return sha.file(tag, path);
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(path)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& file : files) sha.file(tag + "/" + file.filename().string(), file);
}

}  // namespace

ModelIdentity load_model_identity(const ServerConfig& config, const ModelConfig& model) {
  ModelIdentity identity;
  identity.name = std::filesystem::path(config.model.config).stem().string();
  identity.server_version = std::string(project_version()) + " (" + git_revision() + ")";

  Sha256 weights;
  if (model.random_weights_seed && config.model.gpt_weights.empty()) {
    weights.field("random_weights_seed", std::to_string(*model.random_weights_seed));
  } else {
    add_path(weights, "gpt_weights", config.model.gpt_weights);
    add_path(weights, "shape_weights", config.model.shape_weights);
  }
  add_path(weights, "clip_model", config.model.clip_model);
  add_path(weights, "clip_vocab", config.model.clip_vocab);
  identity.weights_digest = weights.hex();

  // What else changes the numbers: the model's shape (its config), the arithmetic (device
  // kind, dtype, decode mode) and the mesh stage. Not the addresses, limits or batching.
  Sha256 settings;
  settings.field("model_config", read_file(config.model.config, "model config"));
  settings.field("device", config.device.starts_with("cuda") ? "cuda" : config.device);
  settings.field("dtype", config.dtype);
  settings.field("single_stream_decode", config.single_stream_decode);
  // The text is that of the mesh section's keys (the word, then numbers and 0/1), unchanged
  // since the section held them one by one, so that a digest stays the same across versions.
  const OccupancySamplingOptions& o = config.mesh.occupancy;
  const MeshPipelineOptions& m = config.mesh.pipeline;
  settings.field("mesh", std::string(o.hierarchical ? "hierarchical" : "dense") + "," +
                             std::to_string(o.coarsest_resolution_base) + "," +
                             std::to_string(o.dilation) + "," +
                             std::to_string(static_cast<int>(m.postprocess)) + "," +
                             std::to_string(static_cast<int>(m.cleanup.remove_floaters)) + "," +
                             std::to_string(m.cleanup.floater_diagonal_ratio) + "," +
                             std::to_string(static_cast<int>(m.simplify)) + "," +
                             std::to_string(m.max_marching_cubes_faces));
  identity.config_digest = settings.hex();
  return identity;
}

}  // namespace cube3d
