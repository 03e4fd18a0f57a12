// The HTTP front door's mesh answers, shared by its routes (the mesh calls in http_gateway.cpp,
// the jobs in job_routes.cpp): a mesh call's outcome as JSON (json_codec.h), as its file or as a
// PNG picture of it, with the headers that carry the rest; errors as http_status.h writes them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cube3d/server/httpd/http_message.h"
#include "cube3d/server/wire/answer_codec.h"
#include "cube3d/v1/mesh_service.pb.h"

namespace cube3d::http {

inline constexpr const char* kRequestIdHeader = "X-Request-Id";

// "queue;dur=1.0, text;dur=..., total;dur=..." (ms).
std::string server_timing(const v1::Timings& timings);

// A mesh call's outcome: the error, the JSON response (file_format unset), or the file with
// X-Request-Id, Server-Timing, X-Cache, X-Vertex-Count, X-Face-Count, X-Batch-Bucket,
// X-Occupancy-Points and one X-Warning per warning.
Response mesh_answer(ResponseOutcome outcome, std::optional<v1::MeshFormat> file_format,
                     int64_t retry_after_seconds);

// A PNG picture of a RAW mesh response (mesh_preview.h: the 3/4 product view, `size` x `size`
// pixels, the prompt as its Description), with the file answer's headers, Server-Timing's
// `preview` (the drawing and encoding), and an X-Warning for a body's format set aside; a mesh it
// cannot draw is a 500 (INTERNAL). Drawn on the calling thread: 20k faces at 512 x 512 take some
// 30 ms of one core.
struct PngAnswer {
  int size = 512;
  std::optional<v1::MeshFormat> ignored_format;  // Negotiated::ignored_format
  std::string description;                       // the prompt
};
Response mesh_png_answer(ResponseOutcome outcome, const PngAnswer& png,
                         int64_t retry_after_seconds);

}  // namespace cube3d::http
