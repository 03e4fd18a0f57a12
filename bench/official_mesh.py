#!/usr/bin/env python3
"""The official mesh stage on the grids that cube3d-mesh-bench dumps (--dump-grids), for the
mesh-stage benchmark's comparison (bench/mesh_stage.sh).

What it runs is what the official code runs after its occupancy query (Roblox/cube,
cube3d/model/autoencoder/one_d_autoencoder.py extract_geometry, and cube3d/generate.py with
cube3d/mesh_utils/postprocessing.py when pymeshlab is installed):
  - scikit-image marching cubes (`measure.marching_cubes(grid, 0, method="lewiner")`; the
    official code uses NVIDIA warp's GPU marching cubes when warp and a GPU are there, and falls
    back to this), the vertices mapped with its `/ grid_size * bbox_size + bbox_min`, the faces
    flipped;
  - pymeshlab: the clean-up (null faces, folded faces, duplicate vertices and faces, T-vertices,
    unreferenced vertices), the floaters (components under 15% of the diagonal) and quadric edge
    collapse to max(10000, 10% of the faces) with qualitythr 0.4, preservenormal, autoclean.
None of the official code is imported or copied: the calls are written here from its
documented behaviour. scikit-image and pymeshlab come from PyPI into the project's venv for the
bench only (never a runtime dependency of the server).

Usage: official_mesh.py --json OUT.json [--repeat N] GRID...
Each GRID is mesh_tool's format: three little-endian int64 dims, then float32 values, x-major.
"""
import argparse
import importlib.metadata
import json
import os
import platform
import statistics
import sys
import time

import numpy as np


def read_grid(path):
    with open(path, "rb") as f:
        dims = np.frombuffer(f.read(24), dtype="<i8")
        values = np.fromfile(f, dtype="<f4", count=int(np.prod(dims)))
    if values.size != int(np.prod(dims)):
        raise SystemExit(f"{path}: fewer values than its dimensions say")
    return values.reshape(tuple(int(d) for d in dims))


def official_stage(grid):
    """One run; returns per-stage milliseconds and face counts."""
    from skimage import measure
    import pymeshlab

    stages = {}
    start = time.perf_counter()
    vertices, faces, _, _ = measure.marching_cubes(grid, 0, method="lewiner")
    grid_size = np.array(grid.shape)
    bbox_min = np.array([-1.05, -1.05, -1.05])
    bbox_size = np.array([2.1, 2.1, 2.1])
    vertices = vertices / grid_size * bbox_size + bbox_min
    faces = np.ascontiguousarray(faces[:, [2, 1, 0]])
    vertices = vertices.astype(np.float32)
    stages["marching_cubes"] = {"ms": (time.perf_counter() - start) * 1e3, "faces": len(faces)}

    start = time.perf_counter()
    mesh_set = pymeshlab.MeshSet()
    mesh_set.add_mesh(pymeshlab.Mesh(vertex_matrix=vertices, face_matrix=faces), "input_mesh")
    stages["load"] = {"ms": (time.perf_counter() - start) * 1e3, "faces": len(faces)}

    start = time.perf_counter()
    mesh_set.meshing_remove_null_faces()
    mesh_set.meshing_remove_folded_faces()
    mesh_set.meshing_remove_duplicate_vertices()
    mesh_set.meshing_remove_duplicate_faces()
    mesh_set.meshing_remove_t_vertices()
    mesh_set.meshing_remove_unreferenced_vertices()
    stages["cleanup"] = {"ms": (time.perf_counter() - start) * 1e3,
                         "faces": mesh_set.current_mesh().face_number()}

    start = time.perf_counter()
    mesh_set.meshing_remove_connected_component_by_diameter(
        mincomponentdiag=pymeshlab.PercentageValue(15), removeunref=True)
    stages["floaters"] = {"ms": (time.perf_counter() - start) * 1e3,
                          "faces": mesh_set.current_mesh().face_number()}

    target = max(10000, int(len(faces) * 0.1))
    start = time.perf_counter()
    mesh_set.meshing_decimation_quadric_edge_collapse(
        targetfacenum=target, qualitythr=0.4, preservenormal=True, autoclean=True)
    stages["simplify"] = {"ms": (time.perf_counter() - start) * 1e3,
                          "faces": mesh_set.current_mesh().face_number(), "target_faces": target}
    stages["postprocess_ms"] = sum(stages[s]["ms"] for s in ("cleanup", "floaters", "simplify"))
    stages["total_ms"] = stages["marching_cubes"]["ms"] + stages["load"]["ms"] + \
        stages["postprocess_ms"]
    return stages


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("grids", nargs="+")
    parser.add_argument("--json", required=True)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    import skimage

    results = []
    for path in args.grids:
        grid = read_grid(path)
        name = os.path.basename(path).rsplit(".", 1)[0]  # "<shape>-r<R>"
        shape, _, resolution = name.rpartition("-r")
        runs = [official_stage(grid) for _ in range(max(1, args.repeat))]
        totals = [r["total_ms"] for r in runs]
        kept = min(runs, key=lambda r: abs(r["total_ms"] - statistics.median(totals)))
        kept.update({"shape": shape, "resolution_base": int(resolution), "threads": 1,
                     "total_ms": statistics.median(totals), "total_ms_runs": totals})
        results.append(kept)
        print(f"official {shape:9s} r{resolution} | mc {kept['marching_cubes']['ms']:8.1f} ms "
              f"{kept['marching_cubes']['faces']:9d} faces | post {kept['postprocess_ms']:9.1f} "
              f"ms -> {kept['simplify']['faces']} faces | total {kept['total_ms']:9.1f} ms",
              flush=True)
    out = {
        "bench": "mesh-stage-official",
        "what": "scikit-image marching cubes (lewiner) + pymeshlab post-processing as the "
                "official generate.py calls it; single-threaded (both libraries run on one core)",
        "marching_cubes": "scikit-image (the official code's CPU fallback when NVIDIA warp is "
                          "not installed)",
        "versions": {"python": platform.python_version(), "numpy": np.__version__,
                     "scikit-image": skimage.__version__,
                     "pymeshlab": importlib.metadata.version("pymeshlab")},
        "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
        "results": results,
    }
    with open(args.json, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
