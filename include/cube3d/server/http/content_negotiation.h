// What an HTTP client asks the mesh API for: the mesh file itself (by its media type in Accept)
// or the JSON mapping of the response.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cube3d/v1/mesh_service.pb.h"

namespace cube3d::http {

struct MeshMediaType {
  v1::MeshFormat format;
  const char* type;
  const char* extension;
};

// The media type of a file format (RAW has none: it is JSON only); null for none.
const MeshMediaType* media_type_of(v1::MeshFormat format);

// What an Accept header asks for: mesh formats (by preference, q > 0) and whether JSON will do
// (application/json, application/*, */*, or no Accept at all).
struct Accepted {
  std::vector<v1::MeshFormat> meshes;
  bool json = false;
};
Accepted parse_accept(const std::string& header);

// The mesh file format of the answer, or none for JSON. A request without a format gets the
// most preferred one Accept names (set in `request`); a request with a format keeps it, and
// Accept only says how it comes back: that file if Accept names it, JSON if Accept takes JSON,
// else HttpError 406.
std::optional<v1::MeshFormat> negotiate(const std::string& accept_header,
                                        v1::GenerateMeshRequest& request);

}  // namespace cube3d::http
