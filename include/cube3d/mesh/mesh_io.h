// Mesh encoders: OBJ (text), binary little-endian PLY and GLB (binary glTF 2.0), as bytes for a
// response or written to a file chosen by extension.
#pragma once

#include <string>
#include <string_view>

#include "cube3d/core/mesh_format.h"
#include "cube3d/mesh/mesh.h"

namespace cube3d {

// The format of a path's extension (.obj, .ply, .glb, any case); anything else throws
// invalid_argument naming the path and the allowed extensions.
MeshFormat mesh_format_from_path(std::string_view path);

// "v x y z" lines (shortest round-trip decimal), optional "vn" lines (vertex_normals), and
// "f a b c" (1-based; "f a//a b//b c//c" with normals).
std::string encode_obj(const Mesh& mesh, bool with_normals = false);

// Binary little-endian PLY: vertex (float x, y, z) and face (list uchar uint vertex_indices).
std::string encode_ply(const Mesh& mesh);

// glTF 2.0 binary: one mesh with one triangle primitive, POSITION (with the exact bounding box
// as min/max) and NORMAL (vertex_normals) float accessors and uint32 indices. A mesh without
// faces gives a valid file with an empty scene.
std::string encode_glb(const Mesh& mesh);

// The bytes of a file format; kRaw is not one (invalid_argument).
std::string encode_mesh(const Mesh& mesh, MeshFormat format);

// Writes encode_mesh(mesh, mesh_format_from_path(path)) to path (OBJ without normals).
void write_mesh(const std::string& path, const Mesh& mesh);

}  // namespace cube3d
