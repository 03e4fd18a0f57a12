// cube3d_mesh_tool: a test driver that turns a raw grid file into a mesh file, so that the
// Python tests can check our marching cubes and writers against scikit-image, trimesh and
// pygltflib.
//
// Grid file: three little-endian int64 dimensions (nx, ny, nz), then nx * ny * nz float32 values
// in x-major order. Prints one JSON line with counts and timings.
//
// --metadata FILE: a JSON object whose members go into the file as mesh metadata (strings,
// integers, doubles, bools, arrays of numbers), so the Python tests can read provenance back.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cube3d/core/error.h"
#include "cube3d/mesh/grid.h"
#include "cube3d/mesh/mesh_io.h"
#include "cube3d/mesh/mesh_pipeline.h"
#include "cube3d/mesh/mesh_stats.h"

namespace {

constexpr const char* kUsage =
    "usage: cube3d_mesh_tool GRID OUT.obj|ply|glb [--no-postprocess] [--no-simplify]\n"
    "       [--target-faces N] [--level L] [--threads N] [--index-space] [--bounds MIN MAX]\n"
    "       [--obj-normals] [--allow-sloppy] [--max-faces N] [--repeat N]\n"
    "       [--max-marching-cubes-faces N (0: no budget)] [--metadata FILE.json]\n";

struct Grid {
  std::vector<float> values;
  std::array<int64_t, 3> dims{0, 0, 0};
};

Grid read_grid(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    throw cube3d::invalid_argument("cannot open grid file '" + path + "'");
  }
  Grid grid;
  file.read(reinterpret_cast<char*>(grid.dims.data()), sizeof(int64_t) * 3);
  const int64_t count = grid.dims[0] * grid.dims[1] * grid.dims[2];
  if (!file || grid.dims[0] < 1 || grid.dims[1] < 1 || grid.dims[2] < 1 || count > (1LL << 32)) {
    throw cube3d::invalid_argument("'" + path + "': bad grid header");
  }
  grid.values.resize(static_cast<std::size_t>(count));
  file.read(reinterpret_cast<char*>(grid.values.data()),
            static_cast<std::streamsize>(grid.values.size() * sizeof(float)));
  if (!file) {
    throw cube3d::invalid_argument("'" + path + "': fewer values than its dimensions say");
  }
  return grid;
}

cube3d::MeshMetadata read_metadata(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    throw cube3d::invalid_argument("cannot open metadata file '" + path + "'");
  }
  const auto object = nlohmann::ordered_json::parse(file);
  if (!object.is_object()) {
    throw cube3d::invalid_argument("'" + path + "': metadata must be a JSON object");
  }
  cube3d::MeshMetadata metadata;
  for (const auto& [key, value] : object.items()) {
    if (value.is_string()) {
      metadata.add(key, value.get<std::string>());
    } else if (value.is_boolean()) {
      metadata.add(key, value.get<bool>());
    } else if (value.is_number_unsigned()) {
      metadata.add(key, value.get<uint64_t>());
    } else if (value.is_number_integer()) {
      metadata.add(key, value.get<int64_t>());
    } else if (value.is_number_float()) {
      metadata.add(key, value.get<double>());
    } else if (value.is_array()) {
      metadata.add(key, value.get<std::vector<double>>());
    } else {
      throw cube3d::invalid_argument("'" + path + "': metadata member " + key +
                                     " is not a string, number, bool or array of numbers");
    }
  }
  return metadata;
}

int run(int argc, char** argv) {
  std::vector<std::string> positional;
  cube3d::MeshPipelineOptions options;
  bool obj_normals = false;
  int repeat = 1;
  cube3d::MeshMetadata metadata;
  for (int n = 1; n < argc; ++n) {
    const std::string arg = argv[n];
    auto value = [&]() -> std::string {
      if (n + 1 >= argc) {
        throw cube3d::invalid_argument(arg + " needs a value");
      }
      return argv[++n];
    };
    if (arg == "--no-postprocess") {
      options.postprocess = false;
    } else if (arg == "--no-simplify") {
      options.simplify = false;
    } else if (arg == "--target-faces") {
      options.simplification.target_faces = std::stoull(value());
    } else if (arg == "--level") {
      options.marching_cubes.level = std::stof(value());
    } else if (arg == "--threads") {
      options.threads = std::stoi(value());
    } else if (arg == "--max-marching-cubes-faces") {
      options.max_marching_cubes_faces = std::stoull(value());
    } else if (arg == "--index-space") {
      options.world_coordinates = false;
    } else if (arg == "--bounds") {
      options.bound_min = std::stof(value());
      options.bound_max = std::stof(value());
    } else if (arg == "--obj-normals") {
      obj_normals = true;
    } else if (arg == "--allow-sloppy") {
      options.simplification.allow_sloppy = true;
    } else if (arg == "--max-faces") {
      options.max_faces = std::stoull(value());
    } else if (arg == "--metadata") {
      metadata = read_metadata(value());
    } else if (arg == "--repeat") {
      repeat = std::max(1, std::stoi(value()));
    } else if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (arg.rfind("--", 0) == 0) {
      throw cube3d::invalid_argument("unknown option " + arg);
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.size() != 2) {
    std::cerr << kUsage;
    return 2;
  }
  // Fail on a bad output path before the work.
  const cube3d::MeshFormat format = cube3d::mesh_format_from_path(positional[1]);

  const Grid grid = read_grid(positional[0]);
  const cube3d::GridView view{grid.values, grid.dims};
  cube3d::Mesh mesh;
  cube3d::MeshPipelineReport report;
  double best_ms = 1e30;
  for (int r = 0; r < repeat; ++r) {
    const auto start = std::chrono::steady_clock::now();
    mesh = cube3d::grid_to_mesh(view, options, &report);
    const std::chrono::duration<double, std::milli> elapsed =
        std::chrono::steady_clock::now() - start;
    best_ms = std::min(best_ms, elapsed.count());
  }
  const std::string bytes = format == cube3d::MeshFormat::kObj
                                ? cube3d::encode_obj(mesh, obj_normals, metadata)
                                : cube3d::encode_mesh(mesh, format, metadata);
  std::ofstream out(positional[1], std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    throw cube3d::invalid_argument("cannot write '" + positional[1] + "'");
  }

  const cube3d::EdgeReport edges = cube3d::edge_report(mesh);
  const nlohmann::json summary = {
      {"vertices", mesh.vertex_count()},
      {"faces", mesh.face_count()},
      {"marching_cubes_faces", report.marching_cubes_faces},
      {"target_faces", report.simplification.target_faces},
      {"floater_faces", report.cleanup.floater_faces},
      {"sloppy", report.simplification.sloppy},
      {"capped", report.capped},
      {"uncapped_target_faces", report.uncapped_target_faces},
      {"faces_before_sloppy_pass", report.faces_before_sloppy_pass},
      {"over_budget", report.over_budget},
      {"budget_warning", cube3d::budget_warning(report, grid.dims)},
      {"watertight", edges.watertight()},
      {"boundary_edges", edges.boundary},
      {"euler", cube3d::euler_characteristic(mesh)},
      {"pipeline_ms", best_ms},
      {"bytes", bytes.size()},
  };
  std::cout << summary.dump() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& error) {
    std::cerr << "cube3d_mesh_tool: " << error.what() << "\n";
    return 1;
  }
}
