#!/usr/bin/env python3
"""Hierarchical vs dense occupancy, mesh by mesh (issue 12's acceptance comparison).

For each model and resolution base, runs cube3d-generate twice on the same tokens, with
`--occupancy dense` (every grid point, as the official code) and `--occupancy hierarchical`
(coarse to fine near the surface), each writing the raw marching-cubes mesh (`--no-postprocess`,
PLY) and its timings JSON, and reports:

  - the vertices of each mesh, and the share of each mesh's vertices that lie within one voxel
    (2.1 / 2^r, the grid spacing) of the other mesh's vertices, both ways, plus the share that
    coincide exactly (to 1e-6) and the largest nearest-vertex distance in voxels;
  - the occupancy points each evaluated (from the timings JSON's `occupancy_points`; a dense run
    without it counts (2^r + 1)^3) and their ratio;
  - the wall time of each run and, where the JSON has them, the occupancy and shape-decode times.

An empty mesh (no surface at level 0) is reported as such, not an error.

    python3 bench/compare_occupancy.py                     # tiny_v01, tiny_v05, demo at r 6 7 8
    python3 bench/compare_occupancy.py --resolution-bases 6 7 --json /tmp/occupancy.json
    python3 bench/compare_occupancy.py --models demo models/my-random.yaml --max-seconds 600

Models: `tiny_v01` and `tiny_v05` are the golden checkpoints of tests/golden with their saved
text embeddings (as tests/tools/test_generate_cli.py runs them); `demo` is models/demo.yaml with
random weights and random text states; any other argument is a model YAML path run the same way
as `demo` (it must have random_weights_seed). Cases run smallest resolution first, so a
--max-seconds budget spends itself on the cheap ones; a case whose estimated cost (8x the same
model's previous resolution, the grid's growth) does not fit what is left is skipped and listed.

Needs numpy, scipy and trimesh (scripts/setup.sh installs them).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import trimesh
from scipy.spatial import cKDTree

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)
GOLDEN = os.path.join(SOURCE, "tests", "golden")
GRID_SPAN = 2.1          # the query box [-1.05, 1.05] (core/constants.h)
EXACT_TOLERANCE = 1e-6   # world units: "the same vertex"
MODES = ("dense", "hierarchical")
GROWTH_PER_LEVEL = 8     # one more resolution base: 8x the grid points


def golden_args(name):
    """The golden model's files, as tests/tools/test_generate_cli.py passes them."""
    def path(*parts):
        return os.path.join(GOLDEN, name, *parts)
    return ["--model-config", path("model.yaml"),
            "--gpt-weights", path("shape_gpt.safetensors"),
            "--shape-weights", path("shape_tokenizer.safetensors"),
            "--text-embeddings", path("inputs.safetensors")]


def model_args(spec):
    """(display name, cube3d-generate arguments) for a --models entry."""
    if spec in ("tiny_v01", "tiny_v05"):
        return spec, golden_args(spec)
    if spec == "demo":
        return "demo", ["--model-config", os.path.join(SOURCE, "models", "demo.yaml")]
    if not os.path.isfile(spec):
        raise SystemExit(f"compare_occupancy: unknown model '{spec}' (expected tiny_v01, "
                         f"tiny_v05, demo or a model YAML path)")
    return os.path.basename(spec), ["--model-config", os.path.abspath(spec)]


def dense_points(resolution_base):
    return ((1 << resolution_base) + 1) ** 3


def voxel(resolution_base):
    return GRID_SPAN / (1 << resolution_base)


def check_binary(generate):
    if not os.access(generate, os.X_OK):
        raise SystemExit(f"compare_occupancy: {generate} is missing: build cube3d-generate "
                         f"(scripts/build.sh) or pass --bin-dir")
    proc = subprocess.run([generate, "--help"], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    if "--occupancy" not in proc.stdout + proc.stderr:
        raise SystemExit(f"compare_occupancy: {generate} has no --occupancy option (a build from "
                         f"before hierarchical occupancy)")


def load_vertices(path):
    """The mesh file's vertices [V, 3] (float64); empty when there is no file or no surface."""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return np.zeros((0, 3))
    try:
        mesh = trimesh.load(path, force="mesh", process=False)
    except (ValueError, IndexError, KeyError):
        # trimesh refuses some zero-element PLY files: that is the empty mesh.
        return np.zeros((0, 3))
    vertices = np.asarray(getattr(mesh, "vertices", np.zeros((0, 3))), dtype=np.float64)
    return vertices.reshape(-1, 3)


def run_generate(generate, args, mode, resolution_base, out_dir, timeout):
    """One cube3d-generate run; returns a dict of what it measured (or why it failed)."""
    stem = os.path.join(out_dir, f"{mode}-r{resolution_base}")
    mesh_path, timings_path = stem + ".ply", stem + ".json"
    command = [generate, *args, "--resolution-base", str(resolution_base),
               "--occupancy", mode, "--mesh-out", mesh_path, "--no-postprocess",
               "--timings-json", timings_path]
    start = time.monotonic()
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s", "wall_s": time.monotonic() - start}
    wall_s = time.monotonic() - start
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
        return {"error": f"exit {proc.returncode}: " + " | ".join(tail), "wall_s": wall_s}
    timings = {}
    if os.path.exists(timings_path):
        with open(timings_path) as f:
            timings = json.load(f)
    points = timings.get("occupancy_points")
    if points is None and mode == "dense":
        points = dense_points(resolution_base)  # a build whose JSON does not count them
    vertices = load_vertices(mesh_path)
    return {"wall_s": wall_s, "vertices": vertices, "vertex_count": len(vertices),
            "occupancy_points": points, "occupancy_ms": timings.get("occupancy_ms"),
            "shape_decode_ms": timings.get("shape_decode_ms"), "timings": timings,
            "command": command}


def nearest_stats(a, b, tolerance):
    """Share of a's vertices within `tolerance` of a vertex of b, the share within
    EXACT_TOLERANCE, and the largest nearest distance; None for each when a or b is empty."""
    if len(a) == 0 or len(b) == 0:
        return None, None, None
    distances, _ = cKDTree(b).query(a, k=1)
    return (float(np.mean(distances <= tolerance)), float(np.mean(distances <= EXACT_TOLERANCE)),
            float(distances.max()))


def compare(model, resolution_base, runs):
    """The case's report row from the two runs."""
    dense, hier = runs["dense"], runs["hierarchical"]
    row = {"model": model, "resolution_base": resolution_base,
           "voxel": voxel(resolution_base), "dense_grid_points": dense_points(resolution_base)}
    for mode, run in runs.items():
        row[mode] = {k: v for k, v in run.items() if k not in ("vertices", "command")}
        if "command" in run:
            row[mode]["command"] = " ".join(run["command"])
    errors = [f"{mode}: {run['error']}" for mode, run in runs.items() if "error" in run]
    if errors:
        row["error"] = "; ".join(errors)
        return row
    empty = [mode for mode, run in runs.items() if run["vertex_count"] == 0]
    if empty:
        row["empty"] = empty
    tolerance = voxel(resolution_base)
    d2h, d2h_exact, d2h_max = nearest_stats(dense["vertices"], hier["vertices"], tolerance)
    h2d, h2d_exact, h2d_max = nearest_stats(hier["vertices"], dense["vertices"], tolerance)
    row.update({
        "dense_within_voxel_of_hierarchical": d2h, "hierarchical_within_voxel_of_dense": h2d,
        "dense_exact_in_hierarchical": d2h_exact, "hierarchical_exact_in_dense": h2d_exact,
        "dense_to_hierarchical_max_voxels": None if d2h_max is None else d2h_max / tolerance,
        "hierarchical_to_dense_max_voxels": None if h2d_max is None else h2d_max / tolerance,
    })
    if len(empty) == 2:
        row["both_empty"] = True  # the same (empty) mesh
    if dense["occupancy_points"] and hier["occupancy_points"]:
        row["points_ratio"] = dense["occupancy_points"] / hier["occupancy_points"]
    return row


# --- output --------------------------------------------------------------------------------------

def percent(x):
    return "-" if x is None else f"{100.0 * x:.2f}%"


def count(x):
    return "-" if x is None else f"{x:,}"


def seconds(run):
    if "wall_s" not in run:
        return "-"
    text = f"{run['wall_s']:.1f}"
    if run.get("occupancy_ms") is not None:
        text += f" ({run['occupancy_ms'] / 1000.0:.1f})"
    return text


COLUMNS = ["model", "r", "V dense", "V hier", "dense~hier", "hier~dense", "exact d/h",
           "points dense", "points hier", "ratio", "s dense (occ)", "s hier (occ)"]


def table_rows(rows, skipped):
    lines = []
    for row in rows:
        dense, hier = row["dense"], row["hierarchical"]
        if "error" in row:
            lines.append([row["model"], str(row["resolution_base"]), "error: " + row["error"]])
            continue
        exact = "-"
        if row["dense_exact_in_hierarchical"] is not None:
            exact = (f"{percent(row['dense_exact_in_hierarchical'])}/"
                     f"{percent(row['hierarchical_exact_in_dense'])}")
        ratio = row.get("points_ratio")
        lines.append([
            row["model"], str(row["resolution_base"]),
            count(dense["vertex_count"]) + (" (empty)" if dense["vertex_count"] == 0 else ""),
            count(hier["vertex_count"]) + (" (empty)" if hier["vertex_count"] == 0 else ""),
            percent(row["dense_within_voxel_of_hierarchical"]),
            percent(row["hierarchical_within_voxel_of_dense"]), exact,
            count(dense["occupancy_points"]), count(hier["occupancy_points"]),
            "-" if ratio is None else f"{ratio:.1f}x", seconds(dense), seconds(hier)])
    for model, resolution_base, why in skipped:
        lines.append([model, str(resolution_base), f"skipped: {why}"])
    return lines


def print_table(rows, skipped, out=sys.stdout):
    lines = table_rows(rows, skipped)
    full = [line for line in lines if len(line) == len(COLUMNS)]
    widths = [max([len(c)] + [len(line[i]) for line in full]) for i, c in enumerate(COLUMNS)]
    out.write("  ".join(c.rjust(w) for c, w in zip(COLUMNS, widths)).rstrip() + "\n")
    for line in lines:
        if len(line) == len(COLUMNS):
            out.write("  ".join(c.rjust(w) for c, w in zip(line, widths)).rstrip() + "\n")
        else:  # an error or a skipped case: the message after model and r
            out.write("  ".join([line[0].rjust(widths[0]), line[1].rjust(widths[1]), line[2]])
                      + "\n")
    out.write("dense~hier: share of the dense mesh's vertices within one voxel (2.1 / 2^r) of a "
              "hierarchical vertex; hier~dense the reverse; exact d/h: shares that coincide (to "
              "1e-6). Times: wall seconds per cube3d-generate run (occupancy field alone).\n")


def git_commit():
    try:
        return subprocess.run(["git", "-C", SOURCE, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


# --- main ----------------------------------------------------------------------------------------

def parse_args(argv):
    parser = argparse.ArgumentParser(
        description="Compare hierarchical and dense occupancy meshes and points evaluated.")
    parser.add_argument("--bin-dir", default=os.path.join(SOURCE, "build", "bin"),
                        help="folder of cube3d-generate (default: build/bin)")
    parser.add_argument("--models", nargs="+", default=["tiny_v01", "tiny_v05", "demo"],
                        help="tiny_v01, tiny_v05, demo or random-weight model YAML paths")
    parser.add_argument("--resolution-bases", nargs="+", type=int, default=[6, 7, 8],
                        metavar="R", help="grid resolution bases (default 6 7 8)")
    parser.add_argument("--max-seconds", type=float, default=None,
                        help="time budget for all runs; cases that would not fit are skipped")
    parser.add_argument("--device", default="cpu", help="cpu (default) | cuda | cuda:N")
    parser.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                        help="further cube3d-generate arguments for every run (last option)")
    parser.add_argument("--json", metavar="F", help="write every measurement as JSON")
    parser.add_argument("--keep", metavar="DIR",
                        help="keep the meshes and timings JSON under DIR (default: a temporary "
                             "folder, removed)")
    return parser.parse_args(argv)


def main(argv=None):
    options = parse_args(argv)
    generate = os.path.join(options.bin_dir, "cube3d-generate")
    check_binary(generate)
    models = [model_args(spec) for spec in options.models]
    for r in options.resolution_bases:
        if not 1 <= r <= 10:
            raise SystemExit(f"compare_occupancy: resolution base {r} outside 1..10")

    work = options.keep or tempfile.mkdtemp(prefix="cube3d-occupancy-")
    os.makedirs(work, exist_ok=True)
    started = time.monotonic()
    rows, skipped = [], []
    last_cost = {}  # model -> (resolution base, seconds of both runs)
    try:
        for resolution_base in sorted(options.resolution_bases):
            for model, args in models:
                left = None
                if options.max_seconds is not None:
                    left = options.max_seconds - (time.monotonic() - started)
                    previous = last_cost.get(model)
                    estimate = None
                    if previous is not None:
                        estimate = previous[1] * GROWTH_PER_LEVEL ** (resolution_base - previous[0])
                    if left <= 0 or (estimate is not None and estimate > left):
                        why = f"about {estimate:.0f} s" if estimate is not None else "no time"
                        skipped.append((model, resolution_base,
                                        f"{why} needed, {max(left, 0):.0f} s of the budget left"))
                        continue
                out_dir = os.path.join(work, f"{model}-r{resolution_base}")
                os.makedirs(out_dir, exist_ok=True)
                runs = {}
                for mode in MODES:
                    timeout = None
                    if options.max_seconds is not None:
                        timeout = max(1.0, options.max_seconds - (time.monotonic() - started))
                    runs[mode] = run_generate(
                        generate, [*args, "--device", options.device, *options.extra], mode,
                        resolution_base, out_dir, timeout)
                    print(f"  {model} r={resolution_base} {mode}: "
                          + (runs[mode].get("error") or
                             f"{runs[mode]['vertex_count']} vertices, "
                             f"{runs[mode]['wall_s']:.1f} s"), file=sys.stderr, flush=True)
                last_cost[model] = (resolution_base, sum(r.get("wall_s", 0) for r in runs.values()))
                rows.append(compare(model, resolution_base, runs))
    finally:
        if not options.keep:
            shutil.rmtree(work, ignore_errors=True)

    print_table(rows, skipped)
    if options.json:
        report = {"commit": git_commit(), "command": " ".join(sys.argv),
                  "generate": generate, "device": options.device,
                  "seconds": time.monotonic() - started, "cases": rows,
                  "skipped": [{"model": m, "resolution_base": r, "why": why}
                              for m, r, why in skipped]}
        with open(options.json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    return 1 if any("error" in row for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
