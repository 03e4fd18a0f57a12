#include "cube3d/server/wire/answer_codec.h"

#include <iterator>
#include <utility>

#include "cube3d/core/enum_table.h"
#include "cube3d/server/service/api_numbers.h"
#include "cube3d/server/wire/proto_enums.h"

namespace cube3d {
namespace {

constexpr EnumTable<CacheStatus, v1::CacheStatus, 4> kCacheStatuses = {
    {{CacheStatus::kMiss, v1::CACHE_STATUS_MISS},
     {CacheStatus::kHit, v1::CACHE_STATUS_HIT},
     {CacheStatus::kCoalesced, v1::CACHE_STATUS_COALESCED},
     {CacheStatus::kBypass, v1::CACHE_STATUS_BYPASS}}};

void set_vector(const std::array<float, 3>& xyz, v1::Vector3* out) {
  out->set_x(xyz[0]);
  out->set_y(xyz[1]);
  out->set_z(xyz[2]);
}

std::array<float, 3> vector_of(const v1::Vector3& v) { return {v.x(), v.y(), v.z()}; }

void set_bounds(const WorkMeshBounds& b, v1::MeshBounds* out) {
  set_vector(b.min, out->mutable_min());
  set_vector(b.max, out->mutable_max());
  set_vector({b.max[0] - b.min[0], b.max[1] - b.min[1], b.max[2] - b.min[2]}, out->mutable_size());
}

WorkMeshBounds bounds_from_message(const v1::MeshBounds& b) {
  return {.min = vector_of(b.min()), .max = vector_of(b.max())};
}

void set_raw(const std::vector<float>& vertices, const std::vector<uint32_t>& indices,
             v1::RawMesh* raw) {
  raw->mutable_vertices()->Add(vertices.begin(), vertices.end());
  raw->mutable_indices()->Add(indices.begin(), indices.end());
}

void set_effective(const EffectiveParameters& e, v1::EffectiveParameters* out) {
  out->set_guidance_scale(e.guidance_scale);
  if (e.top_p) out->set_top_p(*e.top_p);
  out->set_seed(e.seed);
  if (e.bounding_box) {
    out->mutable_bounding_box()->set_x((*e.bounding_box)[0]);
    out->mutable_bounding_box()->set_y((*e.bounding_box)[1]);
    out->mutable_bounding_box()->set_z((*e.bounding_box)[2]);
  }
  out->set_resolution_base(e.resolution_base);
  out->set_format(to_proto(e.format));
  if (e.target_face_count) out->set_target_face_count(*e.target_face_count);
  out->mutable_lod_face_counts()->Add(e.lod_face_counts.begin(), e.lod_face_counts.end());
  out->set_mesh_profile(to_proto(e.mesh_profile));
  if (e.pivot) out->set_pivot(to_proto(*e.pivot));
  if (e.compact) {
    out->mutable_compact()->set_positions(to_proto(e.compact->positions));
    out->mutable_compact()->set_normals(e.compact->normals);
  }
  out->set_model(e.model);
  out->set_weights_digest(e.weights_digest);
  out->set_server_version(e.server_version);
  out->set_computed_by_request_id(e.computed_by_request_id);
}

// Reads back what set_effective wrote; false for values no answer of ours holds.
bool read_effective(const v1::EffectiveParameters& m, EffectiveParameters& e) {
  e.guidance_scale = m.guidance_scale();
  if (m.has_top_p()) e.top_p = m.top_p();
  e.seed = m.seed();
  if (m.has_bounding_box()) {
    e.bounding_box =
        std::array<float, 3>{m.bounding_box().x(), m.bounding_box().y(), m.bounding_box().z()};
  }
  e.resolution_base = m.resolution_base();
  const auto format = api_numbers::mesh_format(m.format());
  const auto profile = api_numbers::mesh_profile(m.mesh_profile());
  if (!format || !profile) return false;
  e.format = *format;
  e.mesh_profile = *profile;
  if (m.has_target_face_count()) e.target_face_count = m.target_face_count();
  e.lod_face_counts.assign(m.lod_face_counts().begin(), m.lod_face_counts().end());
  if (m.has_pivot()) {
    e.pivot = api_numbers::pivot(m.pivot());
    if (!e.pivot) return false;
  }
  if (m.has_compact()) {
    const auto positions = api_numbers::compact_positions(m.compact().positions());
    if (!positions) return false;
    e.compact = CompactMeshOptions{.positions = *positions, .normals = m.compact().normals()};
  }
  e.model = m.model();
  e.weights_digest = m.weights_digest();
  e.server_version = m.server_version();
  e.computed_by_request_id = m.computed_by_request_id();
  return true;
}

// The body's fields of the message (every field but the call's own).
void set_body(const MeshBody& body, v1::GenerateMeshResponse* out) {
  out->set_format(to_proto(body.format));
  if (body.has_raw) set_raw(body.vertices, body.indices, out->mutable_raw());
  if (body.format != MeshFormat::kRaw) out->set_encoded(body.encoded);
  out->set_vertex_count(static_cast<uint32_t>(body.vertex_count));
  out->set_face_count(static_cast<uint32_t>(body.face_count));
  if (body.bounds) {
    set_bounds(*body.bounds, out->mutable_bounds());
    out->set_up_axis(v1::UP_AXIS_Y);
  }
  for (const WorkLevel& level : body.lods) {
    v1::MeshLevel* m = out->add_lods();
    m->set_target_face_count(static_cast<uint32_t>(level.target_face_count));
    if (body.format == MeshFormat::kRaw) {
      set_raw(level.vertices, level.indices, m->mutable_raw());
    } else {
      m->set_encoded(level.encoded);
    }
    m->set_vertex_count(static_cast<uint32_t>(level.vertex_count));
    m->set_face_count(static_cast<uint32_t>(level.face_count));
    set_bounds(level.bounds, m->mutable_bounds());
  }
  out->set_occupancy_points(static_cast<uint64_t>(body.occupancy_points));
  out->mutable_shape_tokens()->Add(body.shape_tokens.begin(), body.shape_tokens.end());
  for (const std::string& w : body.warnings) out->add_warnings(w);
  set_effective(body.effective, out->mutable_effective());
}

// The call's own fields of the message.
void set_stamp(const MeshAnswer& answer, v1::GenerateMeshResponse* out) {
  out->set_request_id(answer.request_id);
  out->set_cache_status(
      lookup(kCacheStatuses, answer.cache_status).value_or(v1::CACHE_STATUS_UNSPECIFIED));
  out->set_batch_bucket(static_cast<uint32_t>(answer.batch_bucket));
  const WorkTimings& t = answer.timings;
  v1::Timings* m = out->mutable_timings();
  m->set_queue_ms(t.queue_ms);
  m->set_text_encoding_ms(t.text_encoding_ms);
  m->set_prefill_ms(t.prefill_ms);
  m->set_decode_ms(t.decode_ms);
  m->set_tpot_ms(t.tpot_ms);
  m->set_mesh_ms(t.mesh_ms);
  m->set_occupancy_ms(t.occupancy_ms);
  m->set_total_ms(t.total_ms);
}

}  // namespace

v1::GenerateMeshResponse response_message(const MeshAnswer& answer) {
  v1::GenerateMeshResponse response;
  if (answer.body) set_body(*answer.body, &response);
  set_stamp(answer, &response);
  return response;
}

ResponseOutcome response_outcome(CallOutcome outcome) {
  ResponseOutcome out;
  out.status = std::move(outcome.status);
  out.trailers = std::move(outcome.trailers);
  if (out.status.ok()) out.response = response_message(outcome.answer);
  return out;
}

std::optional<CacheStatus> cache_status_of(v1::CacheStatus status) {
  return reverse_lookup(kCacheStatuses, status);
}

std::string ProtoAnswerCodec::encode(const MeshBody& body) const {
  v1::GenerateMeshResponse message;
  set_body(body, &message);
  return message.SerializeAsString();
}

std::optional<MeshBody> ProtoAnswerCodec::decode(std::string_view bytes) const {
  v1::GenerateMeshResponse m;
  if (!m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return std::nullopt;
  MeshBody body;
  const auto format = api_numbers::mesh_format(m.format());
  if (!format) return std::nullopt;
  body.format = *format;
  body.has_raw = m.has_raw();
  body.vertices.assign(m.raw().vertices().begin(), m.raw().vertices().end());
  body.indices.assign(m.raw().indices().begin(), m.raw().indices().end());
  // The parsed message is ours alone: its bytes move into the body (a GLB is hundreds of KB).
  body.encoded = std::move(*m.mutable_encoded());
  body.vertex_count = m.vertex_count();
  body.face_count = m.face_count();
  if (m.has_bounds()) body.bounds = bounds_from_message(m.bounds());
  for (v1::MeshLevel& l : *m.mutable_lods()) {
    WorkLevel& level = body.lods.emplace_back();
    level.target_face_count = l.target_face_count();
    level.vertices.assign(l.raw().vertices().begin(), l.raw().vertices().end());
    level.indices.assign(l.raw().indices().begin(), l.raw().indices().end());
    level.encoded = std::move(*l.mutable_encoded());
    level.vertex_count = l.vertex_count();
    level.face_count = l.face_count();
    level.bounds = bounds_from_message(l.bounds());
  }
  body.occupancy_points = static_cast<int64_t>(m.occupancy_points());
  body.shape_tokens.assign(m.shape_tokens().begin(), m.shape_tokens().end());
  body.warnings.assign(std::make_move_iterator(m.mutable_warnings()->begin()),
                       std::make_move_iterator(m.mutable_warnings()->end()));
  if (!read_effective(m.effective(), body.effective)) return std::nullopt;
  return body;
}

int64_t ProtoAnswerCodec::body_bytes(const MeshBody& body) const {
  v1::GenerateMeshResponse message;
  set_body(body, &message);
  return static_cast<int64_t>(message.ByteSizeLong());
}

int64_t ProtoAnswerCodec::message_bytes(const MeshAnswer& answer, int64_t body_bytes) const {
  // A message's bytes are its fields' bytes, each field encoded on its own: the body's and the
  // call's own fields are disjoint, so their sizes add.
  v1::GenerateMeshResponse stamp;
  set_stamp(answer, &stamp);
  return body_bytes + static_cast<int64_t>(stamp.ByteSizeLong());
}

}  // namespace cube3d
