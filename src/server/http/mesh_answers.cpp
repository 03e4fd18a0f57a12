#include "cube3d/server/http/mesh_answers.h"

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "cube3d/core/clock.h"
#include "cube3d/core/error.h"
#include "cube3d/mesh/mesh_preview.h"
#include "cube3d/server/http/content_negotiation.h"
#include "cube3d/server/http/http_status.h"
#include "cube3d/server/http/json_codec.h"

namespace cube3d::http {
namespace {

// The headers of a file answer that describe the mesh (not the file).
void set_mesh_headers(const v1::GenerateMeshResponse& response, Response& out) {
  out.headers.set("X-Vertex-Count", std::to_string(response.vertex_count()));
  out.headers.set("X-Face-Count", std::to_string(response.face_count()));
  out.headers.set("X-Batch-Bucket", std::to_string(response.batch_bucket()));
  out.headers.set("X-Occupancy-Points", std::to_string(response.occupancy_points()));
  // The size contract (docs/mesh-encoding.md): the box in model units after the pivot, y up.
  // (Only in answers that state it: service.cpp states_frame.)
  if (response.has_bounds()) {
    const v1::MeshBounds& b = response.bounds();
    out.headers.set("X-Mesh-Bounds",
                    fmt::format("{},{},{},{},{},{}", b.min().x(), b.min().y(), b.min().z(),
                                b.max().x(), b.max().y(), b.max().z()));
    out.headers.set("X-Up-Axis", "y");
  }
  for (const auto& warning : response.warnings()) out.headers.add("X-Warning", warning);
  if (response.lods_size() > 0) {
    out.headers.add("X-Warning", "this file is level of detail 0; the other " +
                                     std::to_string(response.lods_size()) +
                                     " levels come in the JSON answer (lods)");
  }
}

// The headers of every successful mesh answer.
void set_call_headers(const v1::GenerateMeshResponse& response, Response& out) {
  out.headers.set(kRequestIdHeader, response.request_id());
  out.headers.set("Server-Timing", server_timing(response.timings()));
  if (const auto cache = cache_status_of(response.cache_status())) {
    out.headers.set("X-Cache", cache_status_name(*cache));
  }
}

// Supersampling of a preview: 3 x 3 up to 1024 pixels; 2 x 2 above, where the pixels are small
// and 3 x 3 would double the time the connection's I/O thread spends drawing (2048: 120 against
// 185 ms for 20k faces).
int supersample_for(int size) { return size <= 1024 ? 3 : 2; }

}  // namespace

std::string server_timing(const v1::Timings& t) {
  return fmt::format(
      "queue;dur={:.1f}, text;dur={:.1f}, prefill;dur={:.1f}, decode;dur={:.1f}, "
      "mesh;dur={:.1f}, total;dur={:.1f}",
      t.queue_ms(), t.text_encoding_ms(), t.prefill_ms(), t.decode_ms(), t.mesh_ms(), t.total_ms());
}

Response mesh_answer(ResponseOutcome outcome, std::optional<v1::MeshFormat> file_format,
                     int64_t retry_after_seconds) {
  if (!outcome.status.ok()) {
    return status_response(outcome.status, retry_after_seconds, outcome.trailers);
  }
  const v1::GenerateMeshResponse& response = outcome.response;
  const MeshMediaType* const media = file_format ? media_type_of(*file_format) : nullptr;
  Response out;
  if (!media) {
    out = make_response(200, to_json(response), kJsonType);
  } else {
    out.status = 200;
    out.headers.set("Content-Type", media->type);
    set_mesh_headers(response, out);
    out.headers.set("Content-Disposition", fmt::format("inline; filename=\"{}.{}\"",
                                                       response.request_id(), media->extension));
    out.body = std::move(*outcome.response.mutable_encoded());
  }
  set_call_headers(response, out);
  return out;
}

Response mesh_png_answer(ResponseOutcome outcome, const PngAnswer& png,
                         int64_t retry_after_seconds) {
  if (!outcome.status.ok()) {
    return status_response(outcome.status, retry_after_seconds, outcome.trailers);
  }
  const v1::GenerateMeshResponse& response = outcome.response;
  const auto start = SteadyClock::now();
  Response out;
  try {
    // The gateway asked for RAW (negotiate): anything else, or a mesh we cannot draw (the size
    // was checked, the service made the mesh), is a bug of ours. Answered here, not thrown: this
    // runs in a deferred task, which has no one to answer for it.
    if (response.format() != v1::MESH_FORMAT_RAW) {
      throw internal_error("a " + v1::MeshFormat_Name(response.format()) + " response, not RAW");
    }
    // The response's arrays, drawn where they are (no Mesh is rebuilt from them).
    const MeshView mesh(
        std::span<const float>(response.raw().vertices().data(),
                               static_cast<size_t>(response.raw().vertices_size())),
        std::span<const uint32_t>(response.raw().indices().data(),
                                  static_cast<size_t>(response.raw().indices_size())));
    PreviewOptions options;
    options.width = options.height = png.size;
    options.supersample = supersample_for(png.size);
    // The prompt, as the mesh files' provenance records it (the service checked it is UTF-8); left
    // out where PNG text cannot hold it.
    if (png.description.size() <= kMaxPreviewDescriptionBytes &&
        png.description.find('\0') == std::string::npos) {
      options.description = png.description;
    }
    out.body = preview_png(mesh, options);
  } catch (const std::exception& e) {
    spdlog::error("request {}: cannot draw its mesh as PNG: {}", response.request_id(), e.what());
    out = error_response(500, ErrorCode::kInternal,
                         std::string("cannot draw the mesh as PNG: ") + e.what());
    out.headers.set(kRequestIdHeader, response.request_id());
    return out;
  }
  const double preview_ms = ms_since(start);
  out.status = 200;
  out.headers.set("Content-Type", kPngType);
  set_mesh_headers(response, out);
  if (png.ignored_format) {
    out.headers.add("X-Warning", "format " + v1::MeshFormat_Name(*png.ignored_format) +
                                     " ignored: Accept asked for image/png, a picture of the "
                                     "mesh, which is the same in every format");
  }
  out.headers.set("Content-Disposition",
                  fmt::format("inline; filename=\"{}.png\"", response.request_id()));
  set_call_headers(response, out);
  out.headers.set("Server-Timing", server_timing(response.timings()) +
                                       fmt::format(", preview;dur={:.1f}", preview_ms));
  return out;
}

}  // namespace cube3d::http
