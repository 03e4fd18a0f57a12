// A call's answer in the service's own words: the mesh and how it was made (the work's, shared by
// every call that joined it and kept by the result cache), stamped with the call's own request
// id, cache status and timings. The doors render it (wire/answer_codec.h for the API's message,
// GenerateMeshResponse, whose fields these mirror); the service reads no message of the API.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cube3d/mesh/compact_mesh.h"
#include "cube3d/mesh/mesh_format.h"
#include "cube3d/mesh/mesh_frame.h"
#include "cube3d/mesh/mesh_profile.h"
#include "cube3d/server/work/work_result.h"

namespace cube3d {

// Where a call's answer came from.
enum class CacheStatus {
  kMiss,       // computed for this call (and stored)
  kHit,        // served from the cache, computed for an earlier call
  kCoalesced,  // shared the computation of an identical call in flight
  kBypass,     // computed without the cache (asked for, or the cache is off)
};

// A cache status as one word: "hit", "miss", "coalesced", "bypass" (X-Cache, the metrics'
// label, the Open Inference Protocol's cache_status).
const char* cache_status_name(CacheStatus status);

// What the mesh was made with, every default filled in (a client can reproduce it).
struct EffectiveParameters {
  float guidance_scale = 0;
  std::optional<float> top_p;  // unset: greedy
  uint64_t seed = 0;
  std::optional<std::array<float, 3>> bounding_box;  // as used (longest side 1.925)
  int32_t resolution_base = 0;
  MeshFormat format = MeshFormat::kGlb;
  std::optional<uint32_t> target_face_count;  // after the profile's cap; unset: the default
  std::vector<uint32_t> lod_face_counts;      // every level's, after the cap; empty: one level
  MeshProfile mesh_profile = MeshProfile::kNone;
  std::optional<MeshPivot> pivot;             // with the bounds
  std::optional<CompactMeshOptions> compact;  // with MeshFormat::kCompact
  std::string model, weights_digest, server_version;
  std::string computed_by_request_id;  // the call whose computation made the mesh
  bool operator==(const EffectiveParameters&) const = default;
};

// The work's part of an answer: what every caller of it gets alike and the cache keeps.
struct MeshBody {
  MeshFormat format = MeshFormat::kGlb;
  // The arrays (kRaw, or the request's return_raw_mesh): `has_raw` even when they are empty.
  bool has_raw = false;
  std::vector<float> vertices;
  std::vector<uint32_t> indices;
  std::string encoded;  // the other formats
  int64_t vertex_count = 0;
  int64_t face_count = 0;
  std::vector<int64_t> shape_tokens;
  std::vector<std::string> warnings;
  int64_t occupancy_points = 0;
  EffectiveParameters effective;
  // Of level 0, after the pivot: set (with the up axis, y) when the request asked for a pivot,
  // levels of detail or the compact encoding.
  std::optional<WorkMeshBounds> bounds;
  std::vector<WorkLevel> lods;  // levels 1, 2, ...: their arrays for kRaw, else encoded
  bool operator==(const MeshBody&) const = default;
};

// The mesh bytes an answer returns: the file, or the raw arrays; every level of detail's too.
int64_t mesh_bytes(const MeshBody& body);

struct MeshAnswer {
  std::shared_ptr<const MeshBody> body;  // never null in an answer
  // The call's own.
  std::string request_id;
  CacheStatus cache_status = CacheStatus::kBypass;
  WorkTimings timings;       // a cache hit's: total_ms alone
  int64_t batch_bucket = 0;  // 0 for a cache hit
};

// How answers are written for the cache and measured against the message limit: the API's
// message (wire/answer_codec.h, ProtoAnswerCodec), given to the service by whoever builds it.
class AnswerCodec {
 public:
  virtual ~AnswerCodec() = default;
  // The body as the cache keeps it (no call's own fields), and back; nullopt for bytes that do
  // not read as one.
  virtual std::string encode(const MeshBody& body) const = 0;
  virtual std::optional<MeshBody> decode(std::string_view bytes) const = 0;
  // encode(body).size(), without the bytes (an answer the cache does not keep).
  virtual int64_t body_bytes(const MeshBody& body) const = 0;
  // The bytes of `answer`'s message: encode(*answer.body).size() plus its own fields'.
  virtual int64_t message_bytes(const MeshAnswer& answer, int64_t body_bytes) const = 0;
};

}  // namespace cube3d
