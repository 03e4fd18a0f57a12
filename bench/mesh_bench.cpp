// cube3d-mesh-bench: the mesh stage (marching cubes, clean-up, decimation, GLB) on the analytic
// shapes of analytic_shapes.h at each resolution and thread count, per stage: milliseconds and
// faces. Prints a table and writes JSON (bench/README.md, "Mesh stage"). Torch-free: the grids
// are made here, not by a model. --dump-grids writes each grid for bench/official_mesh.py, which
// runs the official post-processing (scikit-image, pymeshlab) on the same grids;
// bench/mesh_stage.sh runs both and joins their JSON.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "analytic_shapes.h"
#include "cube3d/cli/cli_args.h"
#include "cube3d/cli/version.h"
#include "cube3d/core/clock.h"
#include "cube3d/core/error.h"
#include "cube3d/core/files.h"
#include "cube3d/mesh/mesh_io.h"
#include "cube3d/mesh/mesh_pipeline.h"
#include "cube3d/mesh/mesh_stats.h"

namespace cube3d::bench {
namespace {

std::vector<std::string> comma_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream stream(text);
  for (std::string item; std::getline(stream, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

int all_cores() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

std::string cpu_model() {
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}

// The grid file of tests/mesh_py/mesh_tool.cpp: three little-endian int64 dims, then float32.
void dump_grid(const AnalyticGrid& grid, const std::string& path) {
  std::ofstream file(path, std::ios::binary);
  file.write(reinterpret_cast<const char*>(grid.dims.data()), sizeof(int64_t) * 3);
  file.write(reinterpret_cast<const char*>(grid.values.data()),
             static_cast<std::streamsize>(grid.values.size() * sizeof(float)));
  if (!file) throw unavailable("cannot write grid file '" + path + "'");
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n == 0 ? 0 : (n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]));
}

struct Run {
  MeshPipelineReport report;
  double encode_ms = 0;
  double total_ms = 0;
  std::size_t glb_bytes = 0;
  Mesh mesh;
};

Run run_once(const AnalyticGrid& grid, const MeshPipelineOptions& options) {
  Run run;
  const auto start = SteadyClock::now();
  run.mesh = grid_to_mesh(grid.view(), options, &run.report);
  const auto meshed = SteadyClock::now();
  run.glb_bytes = encode_glb(run.mesh).size();
  run.encode_ms = ms_since(meshed);
  run.total_ms = ms_since(start);
  return run;
}

nlohmann::ordered_json stage(double ms, std::size_t faces) {
  return {{"ms", ms}, {"faces", faces}};
}

int run(int argc, char** argv) {
  CliArgs args("cube3d-mesh-bench",
               "The mesh stage on analytic shapes: per-stage ms and faces at each resolution "
               "and thread count.");
  args.option("--shapes", 1,
              "comma-separated shapes (default all: chair,sword,boat,creature,noise)", "LIST")
      .option("--resolutions", 1, "comma-separated resolution bases (default 8,9)", "LIST")
      .option("--threads", 1, "comma-separated thread counts, 0 = all cores (default 1,2,0)",
              "LIST")
      .option("--repeat", 1, "timed runs per setting; the median is reported (default 3)", "N")
      .option("--target-faces", 1, "decimation target (default max(10000, 10% of faces))", "N")
      .option("--max-faces", 1, "a hard face limit, as a mesh profile's (default none)", "N")
      .option("--max-marching-cubes-faces", 1, "the budget (default the mesh library's; 0: none)",
              "N")
      .option("--one-pass", 0, "simplify in one pass on one thread (no blocks), to compare")
      .option("--dump-grids", 1, "write each grid to DIR/<shape>-r<R>.grid (mesh_tool's format)",
              "DIR")
      .option("--json", 1, "write the results as JSON to FILE", "FILE");
  args.parse_answering_help(argc, argv);
  const std::vector<std::string> shapes =
      args.has("--shapes") ? comma_list(args.get("--shapes")) : analytic_shape_names();
  std::vector<int64_t> resolutions;
  for (const std::string& r : comma_list(args.get("--resolutions", "8,9"))) {
    resolutions.push_back(std::stoll(r));
  }
  std::vector<int> threads;
  std::set<int> seen_threads;
  for (const std::string& t : comma_list(args.get("--threads", "1,2,0"))) {
    const int count = std::stoi(t) <= 0 ? all_cores() : std::stoi(t);
    if (seen_threads.insert(count).second) threads.push_back(count);
  }
  const int repeat = static_cast<int>(std::max<int64_t>(1, args.get_int("--repeat", 3)));
  MeshPipelineOptions base;
  base.simplification.target_faces = args.get_uint("--target-faces", 0);
  if (args.has("--max-faces")) base.max_faces = args.get_uint("--max-faces", 0);
  base.max_marching_cubes_faces =
      args.get_uint("--max-marching-cubes-faces", base.max_marching_cubes_faces);
  base.simplification.blocks = !args.has("--one-pass");

  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  std::printf("%-9s %2s %3s | %8s %9s | %8s %9s | %8s %9s | %6s | %8s | %s\n", "shape", "r", "thr",
              "mc ms", "mc faces", "clean ms", "faces", "simp ms", "faces", "glb ms", "total ms",
              "watertight");
  for (const int64_t r : resolutions) {
    for (const std::string& name : shapes) {
      const auto grid_start = SteadyClock::now();
      const AnalyticGrid grid = sample_analytic_shape(name, r);
      const double grid_ms = ms_since(grid_start);
      if (args.has("--dump-grids")) {
        dump_grid(grid, args.get("--dump-grids") + "/" + name + "-r" + std::to_string(r) + ".grid");
      }
      for (const int t : threads) {
        MeshPipelineOptions options = base;
        options.threads = t;
        std::vector<double> totals;
        Run kept;
        for (int n = 0; n < repeat; ++n) {
          Run run = run_once(grid, options);
          totals.push_back(run.total_ms);
          // The run nearest the median speaks for the stages.
          if (n == 0 ||
              std::abs(run.total_ms - median(totals)) < std::abs(kept.total_ms - median(totals))) {
            kept = std::move(run);
          }
        }
        const MeshPipelineReport& rep = kept.report;
        const EdgeReport edges = edge_report(kept.mesh);
        const double total = median(totals);
        std::printf("%-9s %2lld %3d | %8.1f %9zu | %8.1f %9zu | %8.1f %9zu | %6.1f | %8.1f | %s\n",
                    name.c_str(), static_cast<long long>(r), t, rep.marching_cubes_ms,
                    rep.marching_cubes_faces, rep.cleanup_ms, rep.cleanup_faces, rep.simplify_ms,
                    kept.mesh.face_count(), kept.encode_ms, total,
                    edges.watertight() ? "yes" : "no");
        std::fflush(stdout);
        nlohmann::ordered_json entry;
        entry["shape"] = name;
        entry["resolution_base"] = r;
        entry["grid_points"] = grid.values.size();
        entry["grid_ms"] = grid_ms;
        entry["threads"] = t;
        entry["repeat"] = repeat;
        entry["total_ms"] = total;
        entry["total_ms_runs"] = totals;
        entry["marching_cubes"] = stage(rep.marching_cubes_ms, rep.marching_cubes_faces);
        entry["cleanup"] = stage(rep.cleanup_ms, rep.cleanup_faces);
        entry["simplify"] = stage(rep.simplify_ms, kept.mesh.face_count());
        entry["simplify"]["target_faces"] = rep.simplification.target_faces;
        entry["simplify"]["repair_rounds"] = rep.simplification.repair_rounds;
        entry["encode_glb"] = {{"ms", kept.encode_ms}, {"bytes", kept.glb_bytes}};
        entry["vertices"] = kept.mesh.vertex_count();
        entry["faces"] = kept.mesh.face_count();
        entry["watertight"] = edges.watertight();
        entry["non_manifold_edges"] = edges.non_manifold;
        entry["boundary_edges"] = edges.boundary;
        results.push_back(entry);
      }
    }
  }
  if (args.has("--json")) {
    nlohmann::ordered_json out;
    out["bench"] = "mesh-stage";
    out["tool"] = version_text("cube3d-mesh-bench");
    out["machine"] = {{"cpu", cpu_model()}, {"cores", all_cores()}};
    std::string command = "cube3d-mesh-bench";
    for (int n = 1; n < argc; ++n) command += std::string(" ") + argv[n];
    out["command"] = command;
    out["results"] = results;
    write_file(args.get("--json"), out.dump(2) + "\n");
  }
  return 0;
}

}  // namespace
}  // namespace cube3d::bench

int main(int argc, char** argv) {
  return cube3d::run_tool("cube3d-mesh-bench", cube3d::bench::run, argc, argv);
}
