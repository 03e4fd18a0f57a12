#include "cube3d/tools/output_name.h"

#include <sys/stat.h>

#include <bit>

#include "cube3d/core/error.h"
#include "cube3d/core/files.h"
#include "cube3d/core/sha256.h"
#include "cube3d/mesh/shape_fields.h"

namespace cube3d {
namespace {

// "<last path component>[:<size>]", or "-" when not given.
std::string file_identity(const std::string& path) {
  if (path.empty()) return "-";
  std::string_view p = path;
  while (p.size() > 1 && p.back() == '/') p.remove_suffix(1);
  const size_t slash = p.rfind('/');
  std::string out(slash == std::string_view::npos ? p : p.substr(slash + 1));
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    out += ':' + std::to_string(static_cast<uint64_t>(st.st_size));
  }
  return out;
}

}  // namespace

std::string model_identity(const std::string& model_config, const std::string& gpt_weights,
                           const std::string& shape_weights, const std::string& clip_model,
                           const std::string& clip_vocab) {
  CanonicalFields c;
  c.field("config", sha256_hex(read_file(model_config, "model config")));
  c.field("gpt_weights", file_identity(gpt_weights));
  c.field("shape_weights", file_identity(shape_weights));
  c.field("clip_model", file_identity(clip_model));
  c.field("clip_vocab", file_identity(clip_vocab));
  return c.take();
}

std::string output_key_material(const OutputKey& k) {
  CanonicalFields c;
  c.field("cube3d-batch-output", "v1");
  c.field("model", k.model);
  // "target_faces": the tag these names were published with (a rerun skips what it made).
  add_shape_fields(c, k, "target_faces");
  c.number("postprocess", k.postprocess ? 1 : 0);
  c.field("occupancy", k.occupancy);
  c.field("single_stream_decode", k.single_stream_decode);
  c.number("kv_cache", k.kv_cache ? 1 : 0);
  c.field("device", k.device);
  c.field("dtype", k.dtype);
  return c.take();
}

std::string sha256_hex(std::string_view bytes) { return hex_of(sha256(bytes)); }

std::string output_name(const OutputKey& key) {
  return sha256_hex(output_key_material(key)).substr(0, kOutputNameDigits) + "." +
         std::string(to_string(key.format));
}

}  // namespace cube3d
