#include "cube3d/mesh/mesh.h"

#include <algorithm>
#include <cmath>

namespace cube3d {

std::vector<float> vertex_normals(const Mesh& mesh) {
  std::vector<double> sums(mesh.vertices.size(), 0.0);
  const auto& v = mesh.vertices;
  for (std::size_t f = 0; f + 2 < mesh.indices.size(); f += 3) {
    const std::size_t a = mesh.indices[f] * std::size_t{3};
    const std::size_t b = mesh.indices[f + 1] * std::size_t{3};
    const std::size_t c = mesh.indices[f + 2] * std::size_t{3};
    const double e1[3] = {double{v[b]} - v[a], double{v[b + 1]} - v[a + 1],
                          double{v[b + 2]} - v[a + 2]};
    const double e2[3] = {double{v[c]} - v[a], double{v[c + 1]} - v[a + 1],
                          double{v[c + 2]} - v[a + 2]};
    // The unnormalised cross product is twice the face area times its unit normal: summing it
    // weights each face by its area.
    const double n[3] = {e1[1] * e2[2] - e1[2] * e2[1], e1[2] * e2[0] - e1[0] * e2[2],
                         e1[0] * e2[1] - e1[1] * e2[0]};
    for (const std::size_t corner : {a, b, c}) {
      sums[corner] += n[0];
      sums[corner + 1] += n[1];
      sums[corner + 2] += n[2];
    }
  }
  std::vector<float> normals(sums.size());
  for (std::size_t n = 0; n + 2 < sums.size(); n += 3) {
    const double length =
        std::sqrt(sums[n] * sums[n] + sums[n + 1] * sums[n + 1] + sums[n + 2] * sums[n + 2]);
    if (length > 0.0 && std::isfinite(length)) {
      for (int axis = 0; axis < 3; ++axis) {
        normals[n + axis] = static_cast<float>(sums[n + axis] / length);
      }
    } else {
      normals[n] = 0.0f;
      normals[n + 1] = 0.0f;
      normals[n + 2] = 1.0f;
    }
  }
  return normals;
}

double BoundingBox::diagonal() const {
  double sum = 0.0;
  for (int axis = 0; axis < 3; ++axis) {
    const double extent = double{max[axis]} - min[axis];
    sum += extent * extent;
  }
  return std::sqrt(sum);
}

BoundingBox bounding_box(const Mesh& mesh) {
  BoundingBox box;
  for (std::size_t n = 0; n + 2 < mesh.vertices.size(); n += 3) {
    for (std::size_t axis = 0; axis < 3; ++axis) {
      const float x = mesh.vertices[n + axis];
      box.min[axis] = n == 0 ? x : std::min(box.min[axis], x);
      box.max[axis] = n == 0 ? x : std::max(box.max[axis], x);
    }
  }
  return box;
}

void translate_mesh(Mesh& mesh, const std::array<float, 3>& offset) {
  if (offset == std::array<float, 3>{0, 0, 0}) return;
  for (std::size_t n = 0; n + 2 < mesh.vertices.size(); n += 3) {
    for (std::size_t axis = 0; axis < 3; ++axis) mesh.vertices[n + axis] += offset[axis];
  }
}

}  // namespace cube3d
