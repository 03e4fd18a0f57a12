// What an HTTP client asks the mesh API for: the mesh file itself (by its media type in Accept),
// a PNG picture of the mesh (image/png), or the JSON mapping of the response.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "cube3d/server/httpd/http_message.h"
#include "cube3d/v1/mesh_service.pb.h"

namespace cube3d::http {

struct MeshMediaType {
  v1::MeshFormat format;
  const char* type;
  const char* extension;
};

// The media type of a file format (RAW has none: it is JSON only); null for none.
const MeshMediaType* media_type_of(v1::MeshFormat format);

// What an Accept header asks for: mesh formats (by preference, q > 0), whether a PNG preview
// will do (image/png or image/*) and where it ranks among them, and whether JSON will do
// (application/json, application/*, */*, or no Accept at all).
struct Accepted {
  std::vector<v1::MeshFormat> meshes;
  bool png = false;
  size_t png_rank = 0;  // with png: how many of `meshes` Accept prefers to it
  bool json = false;
};
Accepted parse_accept(const std::string& header);

inline constexpr const char* kPngType = "image/png";
// ?size=N of a PNG preview: its width and height in pixels.
inline constexpr int kDefaultPngSize = 512;
inline constexpr int kMinPngSize = 16;
inline constexpr int kMaxPngSize = 2048;

// How a mesh call is answered.
struct Negotiated {
  enum class Kind { kJson, kFile, kPng };
  Kind kind = Kind::kJson;
  v1::MeshFormat file_format = v1::MESH_FORMAT_UNSPECIFIED;  // kFile: the file's format
  // kPng: the file format the body asked for, set aside (a PNG shows the geometry, which is the
  // same in every format); for the answer's X-Warning.
  std::optional<v1::MeshFormat> ignored_format;

  // kFile's format, none otherwise (mesh_answer's argument).
  std::optional<v1::MeshFormat> file() const {
    return kind == Kind::kFile ? std::optional(file_format) : std::nullopt;
  }
};

// The answer to a mesh call, by Accept and the body's format (`request` is set to what is to be
// generated):
// - Accept names no mesh type and no image/png: JSON.
// - The most preferred of the types Accept names that can answer, where image/png always can
//   and a mesh type can when the body has no format or names that one: a request without a
//   format gets that file (set in `request`); image/png gets the mesh generated RAW and drawn
//   (mesh_preview.h), a file format in the body set aside (ignored_format).
// - None can (Accept names mesh types, not the body's format): JSON if Accept takes JSON, else
//   HttpError 406.
Negotiated negotiate(const std::string& accept_header, v1::GenerateMeshRequest& request);

// The PNG's size from the query parameter `size` (kDefaultPngSize without one); HttpError 400
// naming `size` unless it is a whole number in kMinPngSize..kMaxPngSize.
int png_size(const Request& request);

}  // namespace cube3d::http
