// Measures of a triangle mesh: what the tests check and what a caller may log.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cube3d/mesh/mesh.h"

namespace cube3d {

double surface_area(const Mesh& mesh);

// Enclosed volume by the divergence theorem: positive for a closed mesh whose normals point out.
double signed_volume(const Mesh& mesh);

// How the undirected edges are shared by faces.
struct EdgeReport {
  std::size_t edges = 0;
  std::size_t boundary = 0;      // one face
  std::size_t manifold = 0;      // two faces that run it in opposite directions
  std::size_t misoriented = 0;   // two faces that run it in the same direction
  std::size_t non_manifold = 0;  // three faces or more

  // Closed and consistently oriented: every edge shared by exactly two opposite faces.
  bool watertight() const { return edges > 0 && manifold == edges; }
};
EdgeReport edge_report(const Mesh& mesh);

// Vertices where the surface is not a disc: the endpoints of edges with three or more faces or
// with two faces in the same direction, and pinch points, whose faces form more than one fan
// (faces connected through the edges at the vertex). Sorted, without repeats.
std::vector<uint32_t> non_manifold_vertices(const Mesh& mesh);
// The same for faces `indices` over vertices [0, vertex_count) (positions are not needed).
std::vector<uint32_t> non_manifold_vertices(const std::vector<uint32_t>& indices,
                                            std::size_t vertex_count);

// V - E + F, counting only the vertices that faces reference (2 per sphere-like closed surface,
// 0 per torus).
int64_t euler_characteristic(const Mesh& mesh);

// Connected components through shared vertices: one label per face, numbered in the order of
// each component's first face; `count` receives the number of components.
std::vector<uint32_t> face_components(const Mesh& mesh, std::size_t* count = nullptr);

}  // namespace cube3d
