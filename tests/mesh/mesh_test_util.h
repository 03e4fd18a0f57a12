// Helpers shared by the mesh tests: analytic fields sampled on the project's grid, and a minimal
// safetensors reader (the project's reader returns libtorch tensors; the mesh layer has none).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "cube3d/mesh/grid.h"
#include "cube3d/mesh/mesh.h"

namespace cube3d::test {

inline constexpr double kPi = 3.14159265358979323846;

// A field sampled at the world positions of an n^3 grid over [-1.05, 1.05]^3, x-major.
struct SampledGrid {
  std::vector<float> values;
  std::array<int64_t, 3> dims{0, 0, 0};
  GridView view() const { return GridView{values, dims}; }
};

inline SampledGrid sample(int64_t n, const std::function<double(double, double, double)>& f) {
  SampledGrid grid;
  grid.dims = {n, n, n};
  grid.values.resize(static_cast<std::size_t>(n * n * n));
  const double step = (double{kGridBoundMax} - kGridBoundMin) / static_cast<double>(n - 1);
  std::size_t at = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t k = 0; k < n; ++k) {
        grid.values[at++] = static_cast<float>(
            f(kGridBoundMin + i * step, kGridBoundMin + j * step, kGridBoundMin + k * step));
      }
    }
  }
  return grid;
}

inline SampledGrid sample_resolution(int64_t r,
                                     const std::function<double(double, double, double)>& f) {
  return sample(grid_points_per_axis(r), f);
}

// Positive inside.
inline double sphere(double x, double y, double z, double cx, double radius) {
  return radius - std::sqrt((x - cx) * (x - cx) + y * y + z * z);
}

// One tensor of a safetensors file, converted to double (F32 and I64 only).
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<double> values;
};

inline Tensor read_safetensors(const std::string& path, const std::string& name) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    throw std::runtime_error("cannot open " + path);
  }
  const std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  const auto header = nlohmann::json::parse(bytes.substr(8, header_size));
  const auto& entry = header.at(name);
  Tensor tensor;
  tensor.shape = entry.at("shape").get<std::vector<int64_t>>();
  const auto offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
  const char* data = bytes.data() + 8 + header_size + offsets[0];
  const std::string dtype = entry.at("dtype").get<std::string>();
  const std::size_t size = offsets[1] - offsets[0];
  if (dtype == "F32") {
    std::vector<float> raw(size / 4);
    std::memcpy(raw.data(), data, size);
    tensor.values.assign(raw.begin(), raw.end());
  } else if (dtype == "I64") {
    std::vector<int64_t> raw(size / 8);
    std::memcpy(raw.data(), data, size);
    tensor.values.assign(raw.begin(), raw.end());
  } else {
    throw std::runtime_error(name + ": unsupported dtype " + dtype);
  }
  return tensor;
}

}  // namespace cube3d::test
