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
  // the compact encoding of docs/mesh-encoding.md (mesh/compact_mesh.h): not a file format of any
  // other program, but bytes like the files (extension .c3dm)
  kCompact,
};

// "raw", "obj", "ply", "glb", "compact" (the config's spelling; the file extensions' but for
// compact, whose extension is .c3dm).
std::string_view to_string(MeshFormat format);

// The format of a lower-case name as to_string spells it; nullopt for anything else.
std::optional<MeshFormat> mesh_format_from_name(std::string_view name);

}  // namespace cube3d
