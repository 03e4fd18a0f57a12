// Occupancy fields of analytic shapes, the size and kind of what Cube 3D makes (a chair, a sword,
// a boat hull, a creature of blended capsules: 50k-200k marching-cubes faces at resolution 8),
// and a noise field like a random-weight model's (about half inside, the surface everywhere).
// Signed-distance primitives combined with min/max and a smooth union; the field is
// -distance * kFieldScale (positive inside), sampled on the project's grid.
//
// What they are for: the mesh-stage benchmark (cube3d-mesh-bench) and the mesh tests that pin the
// post-processing's guarantees on realistic shapes. Deterministic: the same name and resolution
// give the same bytes on every machine and for any thread count (the noise hashes its lattice
// with splitmix64, no std:: distribution).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cube3d/mesh/grid.h"

namespace cube3d::bench {

// The shapes, in the order the bench reports them: chair, sword, boat, creature, noise.
const std::vector<std::string>& analytic_shape_names();

// The field value at a world position (x, y, z) in [-1.05, 1.05]^3: positive inside.
// invalid_argument for an unknown name.
double analytic_field(const std::string& name, double x, double y, double z);

struct AnalyticGrid {
  std::string name;
  int64_t resolution_base = 0;
  std::vector<float> values;  // [n^3] x-major
  std::array<int64_t, 3> dims{0, 0, 0};
  GridView view() const { return GridView{values, dims}; }
};

// The shape sampled on the 2^resolution_base + 1 grid over [-1.05, 1.05]^3 with `threads` threads
// (0: all cores); the values do not depend on the thread count.
AnalyticGrid sample_analytic_shape(const std::string& name, int64_t resolution_base,
                                   int threads = 0);

}  // namespace cube3d::bench
