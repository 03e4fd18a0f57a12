"""python -m cube3d_ray (or cube3d-ray): a catalogue of prompts to mesh files on Ray.

    python -m cube3d_ray --prompts prompts.txt --out /data/catalog \
        --binary /opt/cube3d/bin/cube3d-server --config /etc/cube3d/server.yaml \
        --concurrency 2,8

Exit status: 0 when every request is made (now or before); 3 when some failed, in this run or
for good in an earlier one (each is in the manifest with its error, and the rest were made); 2 on
a usage error (bad flags, an unreadable prompts file, a server config the server refuses).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence

from .pipeline import BatchOptions, init_ray, run
from .requests import FORMATS, MESH_PROFILES, RequestDefaults, RequestError
from .server import ServerSpec
from .worker import ModelMismatch

EXIT_OK, EXIT_USAGE, EXIT_SOME_FAILED = 0, 2, 3


def concurrency(text: str) -> tuple[int, int]:
    """"N" (a pool of N actors) or "MIN,MAX" (autoscaled between them)."""
    try:
        parts = [int(p) for p in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or MIN,MAX, got {text!r}") from None
    if len(parts) == 1:
        parts = parts * 2
    if len(parts) != 2 or not 1 <= parts[0] <= parts[1]:
        raise argparse.ArgumentTypeError(f"expected N or MIN,MAX with 1 <= MIN <= MAX, got "
                                         f"{text!r}")
    return parts[0], parts[1]


def model_mismatch(error: BaseException) -> str | None:
    """The message of a ModelMismatch an actor raised, which reaches the driver wrapped by Ray
    (RayTaskError, UserCodeException, their causes); None for any other error."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [error]
    while todo:
        e = todo.pop()
        if e is None or any(e is s for s in seen) or len(seen) > 20:
            continue
        seen.append(e)
        if isinstance(e, ModelMismatch):
            return str(e)
        todo += [getattr(e, "cause", None), e.__cause__, e.__context__]
    marker = f"{ModelMismatch.__module__}.{ModelMismatch.__name__}: "
    for line in str(error).splitlines():
        if marker in line:
            return line.split(marker, 1)[1]
    return None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m cube3d_ray",
        description="Turn a catalogue of prompts into mesh files with cube3d-server on Ray Data: "
        "an actor pool, each actor with its own server (--binary/--config) or calling a fleet "
        "(--address); files named by a hash of the request under --out, a Parquet manifest in "
        "--out/manifest; a rerun makes only what is missing.")
    p.add_argument("--prompts", required=True, metavar="P",
                   help="a text file (one prompt a line, # comments; a line may be a JSON "
                   "object), JSON lines (.jsonl) or Parquet (.parquet or a folder): prompt and "
                   "optional seed, guidance_scale, top_p, bounding_box, resolution, "
                   "target_face_count, format, mesh_profile; a path or a URI (s3://...)")
    p.add_argument("--out", required=True, metavar="O",
                   help="the output folder or URI (s3://bucket/catalog, gs://...)")
    where = p.add_argument_group("the servers (one of)")
    where.add_argument("--binary", metavar="B", help="cube3d-server, started by each actor on "
                       "its node on a free loopback port")
    where.add_argument("--config", metavar="C", help="with --binary: its server YAML (a path "
                       "on the nodes)")
    where.add_argument("--address", metavar="A", help="the gRPC address of running servers "
                       "(host:port, dns:///name:port, or a comma-separated list)")
    where.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                       help="one more flag for the servers (repeat; e.g. --server-arg=--set "
                       "--server-arg=batching.batch_buckets=1,2,4)")
    where.add_argument("--server-log-dir", metavar="D", help="the servers' logs (default: a "
                       "temp folder on each node)")
    where.add_argument("--api-key-env", metavar="VAR", help="the environment variable holding "
                       "the fleet's API key (sent as a bearer token)")
    where.add_argument("--ca-file", metavar="F", help="TLS roots for the fleet (default: "
                       "plaintext)")
    pool = p.add_argument_group("the actor pool")
    pool.add_argument("--concurrency", type=concurrency, default=(1, 1), metavar="N|MIN,MAX",
                      help="actors: N, or autoscaled from MIN to MAX (default 1)")
    pool.add_argument("--batch-size", type=int, default=16, help="requests per block, sent to "
                      "a server at once (default 16)")
    pool.add_argument("--actor-cpus", type=float, default=1.0, help="CPUs per actor (default 1)")
    pool.add_argument("--actor-gpus", type=float, default=None,
                      help="GPUs per actor (default: 1 when the cluster has GPUs and the actors "
                      "start servers, else 0)")
    pool.add_argument("--max-attempts", type=int, default=3, help="tries per request for "
                      "codes worth retrying (default 3)")
    pool.add_argument("--timeout-s", type=float, default=600.0, help="per attempt (default 600)")
    pool.add_argument("--retry-failed", action="store_true", help="also redo requests that "
                      "failed for good in an earlier run (INVALID_ARGUMENT and the like)")
    pool.add_argument("--model-tag", default=None, help="the model's part of every file name "
                      "(default: the config's model name with --binary, '' with --address)")
    pool.add_argument("--priority", choices=("batch", "interactive"), default=None,
                      help="the requests' priority (default: batch with --address)")
    defaults = p.add_argument_group("defaults for rows that do not say")
    defaults.add_argument("--seed", type=int)
    defaults.add_argument("--guidance-scale", type=float)
    defaults.add_argument("--top-p", type=float)
    defaults.add_argument("--bbox", type=float, nargs=3, metavar=("X", "Y", "Z"))
    defaults.add_argument("--resolution", type=int, help="grid of 2^R + 1 points per axis")
    defaults.add_argument("--target-face-count", type=int)
    defaults.add_argument("--format", choices=tuple(FORMATS), default="glb")
    defaults.add_argument("--mesh-profile", choices=MESH_PROFILES)
    ray_group = p.add_argument_group("Ray")
    ray_group.add_argument("--ray-address", default=None, help="the cluster (default: "
                           "RAY_ADDRESS, else a local Ray started here)")
    ray_group.add_argument("--num-cpus", type=float, default=None, help="a local Ray's CPUs")
    ray_group.add_argument("--num-gpus", type=float, default=None, help="a local Ray's GPUs")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.binary is not None and not os.access(args.binary, os.X_OK) \
                and args.ray_address is None and not os.environ.get("RAY_ADDRESS"):
            raise ValueError(f"--binary {args.binary}: not an executable file here")
        server = ServerSpec(
            binary=args.binary, config=args.config, address=args.address,
            args=tuple(args.server_arg), log_dir=args.server_log_dir,
            api_key=os.environ.get(args.api_key_env) if args.api_key_env else None,
            ca_file=args.ca_file)
        defaults = RequestDefaults(
            seed=args.seed, guidance_scale=args.guidance_scale, top_p=args.top_p,
            bounding_box=tuple(args.bbox) if args.bbox else None,
            resolution_base=args.resolution, target_face_count=args.target_face_count,
            format=args.format, mesh_profile=args.mesh_profile)
        defaults.check()
        options = BatchOptions(
            server=server, concurrency=args.concurrency, batch_size=args.batch_size,
            actor_cpus=args.actor_cpus, gpus_per_actor=args.actor_gpus,
            max_attempts=args.max_attempts, timeout_s=args.timeout_s,
            retry_failed=args.retry_failed, model_tag=args.model_tag, priority=args.priority)
    except (ValueError, RequestError) as e:
        print(f"cube3d_ray: {e}", file=sys.stderr)
        return EXIT_USAGE
    if server.binary is not None and os.access(server.binary, os.X_OK):
        # The config checked here first, when the binary is on this machine: a mistake is one
        # message and exit 2, not every actor failing to start.
        check = subprocess.run([server.binary, "--config", str(server.config), *server.args,
                                "--print-config"], capture_output=True, text=True)
        if check.returncode != 0:
            print(f"cube3d_ray: {check.stderr.strip() or check.stdout.strip()}", file=sys.stderr)
            return EXIT_USAGE
    try:
        summary = run(args.prompts, args.out, options, defaults,
                      ray_init=lambda: init_ray(args.ray_address, args.num_cpus, args.num_gpus))
    except (OSError, RequestError) as e:
        print(f"cube3d_ray: {e}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as e:
        mismatch = model_mismatch(e)
        if mismatch is None:
            raise
        print(f"cube3d_ray: {mismatch}", file=sys.stderr)
        return EXIT_USAGE
    for row in summary.errors[:20]:
        print(f"cube3d_ray: line {row['line']}: {row['error_code']}: {row['error']}",
              file=sys.stderr)
    print(f"cube3d_ray: {summary.line()}")
    return EXIT_SOME_FAILED if summary.failed or summary.failed_before else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
