#include "cube3d/server/http/content_negotiation.h"

#include <algorithm>
#include <cctype>
#include <string_view>

#include "cube3d/core/printable.h"
#include "cube3d/server/http/http_error.h"
#include "cube3d/server/http/whole_number.h"
#include "cube3d/server/httpd/http_message.h"

namespace cube3d::http {
namespace {

// One media type per file format.
constexpr MeshMediaType kMeshMediaTypes[] = {
    {v1::MESH_FORMAT_GLB, "model/gltf-binary", "glb"},
    {v1::MESH_FORMAT_OBJ, "model/obj", "obj"},
    {v1::MESH_FORMAT_PLY, "application/x-ply", "ply"},
    // docs/mesh-encoding.md; a vendor type of our own (no registered type exists for it).
    {v1::MESH_FORMAT_COMPACT, "application/vnd.cube3d.mesh", "c3dm"},
};

}  // namespace

const MeshMediaType* media_type_of(v1::MeshFormat format) {
  for (const auto& m : kMeshMediaTypes) {
    if (m.format == format) return &m;
  }
  return nullptr;
}

Accepted parse_accept(const std::string& header) {
  Accepted accepted;
  if (lower_trimmed(header).empty()) {
    accepted.json = true;
    return accepted;
  }
  struct Range {
    std::string type;
    double q;
  };
  std::vector<Range> ranges;
  std::string_view rest = header;
  while (!rest.empty()) {
    const std::string_view item = take_item(rest, ',');
    std::string_view params = item;  // the media range, then its parameters
    Range range{lower_trimmed(take_item(params, ';')), 1.0};
    while (!params.empty()) {
      const std::string param = lower_trimmed(take_item(params, ';'));
      if (param.starts_with("q=")) {
        try {
          range.q = std::stod(param.substr(2));
        } catch (const std::exception&) {
          range.q = 1.0;  // an unreadable weight: as if none were given
        }
      }
    }
    if (range.q > 0 && !range.type.empty()) ranges.push_back(std::move(range));
  }
  std::stable_sort(ranges.begin(), ranges.end(),
                   [](const Range& a, const Range& b) { return a.q > b.q; });
  for (const auto& range : ranges) {
    if (range.type == "application/json" || range.type == "*/*" || range.type == "application/*") {
      accepted.json = true;
    }
    // image/* too: the one image type we make is what a client asking for "an image" means.
    if ((range.type == kPngType || range.type == "image/*") && !accepted.png) {
      accepted.png = true;
      accepted.png_rank = accepted.meshes.size();
    }
    for (const auto& m : kMeshMediaTypes) {
      if (range.type == m.type && std::find(accepted.meshes.begin(), accepted.meshes.end(),
                                            m.format) == accepted.meshes.end()) {
        accepted.meshes.push_back(m.format);
      }
    }
  }
  return accepted;
}

Negotiated negotiate(const std::string& accept_header, v1::GenerateMeshRequest& request) {
  const Accepted accepted = parse_accept(accept_header);
  Negotiated answer;
  if (accepted.meshes.empty() && !accepted.png) return answer;  // JSON
  const bool has_format = request.has_format() && request.format() != v1::MESH_FORMAT_UNSPECIFIED;
  // The mesh types that can answer: any without a format in the body, else only the body's
  // (it decides what is generated; Accept only says how it comes back).
  const auto usable =
      has_format ? std::find(accepted.meshes.begin(), accepted.meshes.end(), request.format())
                 : accepted.meshes.begin();
  const bool file_usable = usable != accepted.meshes.end();
  const auto file_rank = static_cast<size_t>(usable - accepted.meshes.begin());
  // A PNG can always answer: it draws the geometry, which no format changes. Preferred when
  // Accept ranks it at least as high as the usable file type.
  if (accepted.png && (!file_usable || accepted.png_rank <= file_rank)) {
    answer.kind = Negotiated::Kind::kPng;
    if (has_format && request.format() != v1::MESH_FORMAT_RAW) {
      answer.ignored_format = request.format();
    }
    // The arrays to draw, not a file to decode; the body's format is set aside (see above).
    request.set_format(v1::MESH_FORMAT_RAW);
    return answer;
  }
  if (file_usable) {
    answer.kind = Negotiated::Kind::kFile;
    answer.file_format = *usable;
    request.set_format(*usable);
    return answer;
  }
  if (accepted.json) return answer;
  throw HttpError(406, ErrorCode::kInvalidArgument,
                  "the body asks for format " + v1::MeshFormat_Name(request.format()) +
                      " but Accept is '" + printable(accept_header, 200) +
                      "': make them agree, drop one of them, or accept application/json (or "
                      "image/png, a picture of the mesh)");
}

int png_size(const Request& request) {
  const std::optional<std::string> text = request.query_param("size");
  if (!text) return kDefaultPngSize;
  return static_cast<int>(
      whole_number(*text, "query parameter size", "pixels", kMinPngSize, kMaxPngSize));
}

}  // namespace cube3d::http
