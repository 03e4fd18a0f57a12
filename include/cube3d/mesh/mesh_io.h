// Mesh encoders: OBJ (text), binary little-endian PLY and GLB (binary glTF 2.0), as bytes for a
// response or written to a file chosen by extension.
//
// Each takes optional metadata (mesh_metadata.h), written where each format keeps such things:
// GLB asset.extras, OBJ and PLY header comments. Empty metadata gives the same bytes as an
// encoder without it.
#pragma once

#include <string>
#include <string_view>

#include "cube3d/mesh/compact_mesh.h"
#include "cube3d/mesh/mesh.h"
#include "cube3d/mesh/mesh_format.h"
#include "cube3d/mesh/mesh_metadata.h"

namespace cube3d {

// The format of a path's extension (.obj, .ply, .glb, .c3dm, any case); anything else throws
// invalid_argument naming the path and the allowed extensions.
MeshFormat mesh_format_from_path(std::string_view path);

// "v x y z" lines (shortest round-trip decimal), optional "vn" lines (vertex_normals), and
// "f a b c" (1-based; "f a//a b//b c//c" with normals). Metadata: after the "# cube3d-server"
// line and before any data, "# cube3d provenance" and then one "# <key>: <value>" line per entry,
// the value as ASCII-only JSON (metadata_json with ensure_ascii), so that no string can end the
// comment line.
std::string encode_obj(const Mesh& mesh, bool with_normals = false,
                       const MeshMetadata& metadata = {});

// Binary little-endian PLY: vertex (float x, y, z) and face (list uchar uint vertex_indices).
// Metadata: one "comment <key>: <value>" header line per entry (ASCII-only JSON, as for OBJ),
// after "comment cube3d-server" and before the element lines.
std::string encode_ply(const Mesh& mesh, const MeshMetadata& metadata = {});

// glTF 2.0 binary: one mesh with one triangle primitive, POSITION (with the exact bounding box
// as min/max) and NORMAL (vertex_normals) float accessors and uint32 indices. A mesh without
// faces gives a valid file with an empty scene. Metadata: asset.extras, a JSON object of the
// entries in order (metadata_json); a string "server_version" entry also makes asset.generator
// "cube3d-server <server_version>".
std::string encode_glb(const Mesh& mesh, const MeshMetadata& metadata = {});

// The compact encoding (docs/mesh-encoding.md): positions as `options` says, normals
// (vertex_normals) when asked for. It has no room for metadata: the answer that carries it does.
std::string encode_compact(const Mesh& mesh, const CompactMeshOptions& options = {});

// The bytes of a file format (`compact` for kCompact, `metadata` for the others); kRaw is not one
// (invalid_argument).
std::string encode_mesh(const Mesh& mesh, MeshFormat format, const MeshMetadata& metadata = {},
                        const CompactMeshOptions& compact = {});

// Writes encode_mesh(mesh, mesh_format_from_path(path), metadata) to path (OBJ without normals).
void write_mesh(const std::string& path, const Mesh& mesh, const MeshMetadata& metadata = {});

}  // namespace cube3d
