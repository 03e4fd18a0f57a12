#include "cube3d/server/service/mesh_answer.h"

#include "cube3d/core/enum_table.h"

namespace cube3d {

const char* cache_status_name(CacheStatus status) {
  constexpr EnumTable<CacheStatus, const char*, 4> kWords = {
      {{CacheStatus::kHit, "hit"},
       {CacheStatus::kMiss, "miss"},
       {CacheStatus::kCoalesced, "coalesced"},
       {CacheStatus::kBypass, "bypass"}}};
  return lookup(kWords, status).value_or("bypass");
}

int64_t mesh_bytes(const MeshBody& body) {
  const bool raw = body.format == MeshFormat::kRaw;
  const auto bytes_of = [raw](const std::vector<float>& vertices,
                              const std::vector<uint32_t>& indices, const std::string& encoded) {
    return raw ? static_cast<int64_t>(sizeof(float) * vertices.size() +
                                      sizeof(uint32_t) * indices.size())
               : static_cast<int64_t>(encoded.size());
  };
  int64_t bytes = bytes_of(body.vertices, body.indices, body.encoded);
  for (const WorkLevel& level : body.lods) {
    bytes += bytes_of(level.vertices, level.indices, level.encoded);
  }
  return bytes;
}

}  // namespace cube3d
