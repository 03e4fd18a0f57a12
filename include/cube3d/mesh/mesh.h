// A triangle mesh as plain arrays: what marching cubes produces, what the clean-up and
// simplification steps transform, and what the writers (and the gRPC response) carry.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace cube3d {

struct Mesh {
  std::vector<float> vertices;    // x, y, z per vertex
  std::vector<uint32_t> indices;  // three per triangle; counter-clockwise seen from outside

  std::size_t vertex_count() const { return vertices.size() / 3; }
  std::size_t face_count() const { return indices.size() / 3; }
  bool empty() const { return indices.empty(); }
};

// Per-vertex unit normals: the sum of the area-weighted normals of the faces around each vertex,
// normalised. A vertex without a face of non-zero area gets (0, 0, 1), so that every normal stays
// unit length (glTF requires it).
std::vector<float> vertex_normals(const Mesh& mesh);

// Axis-aligned bounding box of all vertices (referenced or not, as glTF accessor bounds need);
// all zeros for a mesh without vertices.
struct BoundingBox {
  float min[3] = {0, 0, 0};
  float max[3] = {0, 0, 0};
  double diagonal() const;
};
BoundingBox bounding_box(const Mesh& mesh);

// Adds `offset` to every vertex (a pivot: mesh/mesh_frame.h pivot_offset).
void translate_mesh(Mesh& mesh, const std::array<float, 3>& offset);

}  // namespace cube3d
