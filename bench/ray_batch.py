#!/usr/bin/env python3
"""Catalogue batches two ways on the same prompts and machine: objects per second.

  * indexed-job: cube3d-generate's batch mode as the Indexed Job runs it
    (deploy/k8s/examples/batch): N processes side by side, process I taking --shard I/N of the
    prompts file, each loading the model itself and making its lines one at a time, one thread
    each (the Job's OMP_NUM_THREADS = limits.cpu); N = 1 and 2.
  * ray: cube3d-ray (clients/python) on a local Ray of as many CPUs as the machine has: an
    actor pool of N actors (1 CPU each), each starting a cube3d-server (one intra-op thread)
    and sending it its blocks at once; N = 1 and 2.

Each configuration writes into a fresh folder. The time is the whole run as a user waits for
it: for indexed-job from the first process's start to the last's exit, for ray the run() call
(its plan, the actors' start and their servers' model load, the meshes, the manifest), Ray
itself being up already, as on a cluster one uses (ray.init is timed apart). Also recorded: the
mesh phase (first to last manifest row's finish) of the ray runs.

    python3 bench/ray_batch.py --json bench/results/2026-12-07-ray-batch.json

Needs the build (build/bin: cube3d-generate, cube3d-server) and ray[data] (scripts/setup.sh);
cube3d-ray is pip-installed from the checkout into a temporary folder.
"""
import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)


def install_package(folder):
    target = os.path.join(folder, "site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "--disable-pip-version-check", "--target", target,
                    os.path.join(SOURCE, "clients", "python")], check=True)
    for leftover in ("build", "cube3d_ray.egg-info"):
        shutil.rmtree(os.path.join(SOURCE, "clients", "python", leftover), ignore_errors=True)
    sys.path.insert(0, target)
    os.environ["PYTHONPATH"] = os.pathsep.join([target, os.environ.get("PYTHONPATH", "")])


def indexed_job(bin_dir, prompts, out, shards, resolution):
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    for variable in ("JOB_COMPLETION_INDEX", "CUBE3D_SHARD_COUNT"):
        env.pop(variable, None)
    start = time.monotonic()
    procs = [subprocess.Popen(
        [os.path.join(bin_dir, "cube3d-generate"), "--model-config",
         os.path.join(SOURCE, "models", "demo.yaml"), "--resolution-base", str(resolution),
         "--prompts-file", prompts, "--out-dir", out, "--shard", f"{i}/{shards}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env) for i in range(shards)]
    for p in procs:
        _, err = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise RuntimeError(f"cube3d-generate exited {p.returncode}: {err.decode()[-2000:]}")
    return time.monotonic() - start


def ray_run(bin_dir, prompts, out, actors, resolution, config, logs):
    import pyarrow.parquet as pq
    import cube3d_ray
    spec = cube3d_ray.ServerSpec(binary=os.path.join(bin_dir, "cube3d-server"), config=config,
                                 log_dir=logs)
    options = cube3d_ray.BatchOptions(server=spec, concurrency=(actors, actors), batch_size=8,
                                      actor_cpus=1.0)
    start = time.monotonic()
    summary = cube3d_ray.run(prompts, out, options,
                             cube3d_ray.RequestDefaults(resolution_base=resolution))
    seconds = time.monotonic() - start
    if summary.failed:
        raise RuntimeError(f"{summary.failed} requests failed: {summary.errors[:3]}")
    rows = pq.read_table(os.path.join(out, "manifest")).to_pylist()
    finished = sorted(r["finished_at"].timestamp() for r in rows)
    return seconds, finished[-1] - finished[0], summary.ok


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--prompts", type=int, default=32, help="prompts (default 32)")
    p.add_argument("--resolution", type=int, default=5, help="resolution base (default 5)")
    p.add_argument("--bin-dir", default=os.path.join(SOURCE, "build", "bin"))
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()

    tmp = tempfile.mkdtemp(prefix="cube3d-ray-bench-")
    try:
        install_package(tmp)
        prompts = os.path.join(tmp, "prompts.txt")
        with open(prompts, "w") as f:
            f.write("\n".join(f"a catalogue object number {i}" for i in range(args.prompts))
                    + "\n")
        # The demo model with the server's defaults (batch buckets 1, 2, 4, 8), no result cache.
        config = os.path.join(tmp, "server.yaml")
        with open(config, "w") as f:
            f.write(f"model:\n  config: {os.path.join(SOURCE, 'models', 'demo.yaml')}\n"
                    f"cache:\n  enabled: false\n")
        load_before = os.getloadavg()
        results = []
        for shards in (1, 2):
            seconds = indexed_job(args.bin_dir, prompts, os.path.join(tmp, f"job-{shards}"),
                                  shards, args.resolution)
            results.append({"path": "indexed-job", "workers": shards, "seconds": seconds,
                            "objects": args.prompts, "objects_per_s": args.prompts / seconds})
            print(f"indexed-job, {shards} process(es): {seconds:.1f} s, "
                  f"{args.prompts / seconds:.2f} objects/s", flush=True)

        import ray
        cpus = os.cpu_count() or 2
        t0 = time.monotonic()
        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
        ray_start = time.monotonic() - t0
        ray.data.DataContext.get_current().enable_progress_bars = False
        for actors in (1, 2):
            seconds, mesh_phase, made = ray_run(args.bin_dir, prompts,
                                                os.path.join(tmp, f"ray-{actors}"), actors,
                                                args.resolution, config,
                                                os.path.join(tmp, "logs"))
            results.append({"path": "ray", "workers": actors, "seconds": seconds,
                            "objects": made, "objects_per_s": made / seconds,
                            "mesh_phase_s": mesh_phase,
                            "mesh_phase_objects_per_s": (made - 1) / mesh_phase
                            if mesh_phase > 0 else None})
            print(f"ray, {actors} actor(s): {seconds:.1f} s, {made / seconds:.2f} objects/s "
                  f"(mesh phase {mesh_phase:.1f} s)", flush=True)
        ray.shutdown()
        load_after = os.getloadavg()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report = {
        "what": "catalogue batch throughput, Indexed Job path (cube3d-generate --shard) vs "
                "cube3d-ray (Ray Data actor pool of cube3d-servers), same prompts and machine",
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=SOURCE,
                                 capture_output=True, text=True).stdout.strip(),
        "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or
                    platform.machine(), "python": platform.python_version()},
        "model": "models/demo.yaml (random weights), CPU, float32",
        "prompts": args.prompts, "resolution_base": args.resolution,
        "ray_version": __import__("ray").__version__, "ray_init_s": ray_start,
        # The machine's load average (1, 5, 15 min) before and after: other work beside the
        # bench shows here.
        "load_average_before": load_before, "load_average_after": load_after,
        "results": results,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
