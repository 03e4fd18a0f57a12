// The mesh formats a request can ask for and the mesh stage can write: one enum for the
// scheduler, the mesh writers and the server config (the wire enum, v1::MeshFormat, is mapped to
// it once, at the service boundary).
#pragma once

#include <optional>
#include <string_view>

namespace cube3d {

enum class MeshFormat {
  kRaw,  // vertex and index arrays in the response, no file
  kObj,  // text OBJ
  kPly,  // binary little-endian PLY
  kGlb,  // binary glTF 2.0
};

// "raw", "obj", "ply", "glb" (the config's and the file extensions' spelling).
std::string_view to_string(MeshFormat format);

// The format of a lower-case name as to_string spells it; nullopt for anything else.
std::optional<MeshFormat> mesh_format_from_name(std::string_view name);

}  // namespace cube3d
