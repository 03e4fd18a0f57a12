"""The Ray Data pipeline:

    prompts (text, JSON lines, Parquet) -> plan on the driver (parse, name each request, drop
    duplicates and what the manifest and the folder already hold) -> ray.data.from_arrow, a
    block per batch -> map_batches(MeshWorker) over an actor pool, each actor with its own
    cube3d-server (or a fleet's address) -> a manifest Parquet file per block, written by the
    driver as the blocks stream back (<out>/manifest/<run>-<n>.parquet)

run() is the whole of it (the command line's); generate() is the map_batches step alone, for a
pipeline of one's own: a Dataset of to-do rows (manifest.TODO_SCHEMA, as plan() makes them) in,
a Dataset of manifest rows out.

A killed actor is Ray's to handle: Ray Data starts its actors with max_restarts=-1 and
max_task_retries=-1, so the actor comes back (starting a new server) and its block is run again;
files the first attempt wrote are not written again (worker.py), and the block's manifest rows
are written once, when the retried block finishes.
"""
from __future__ import annotations

import math
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import ray
import ray.data

from . import manifest
from .output import OutputLocation
from .requests import RequestDefaults
from .server import ServerSpec, server_args_for_threads
from .sources import Source, read_sources, sources_from_prompts
from .worker import MeshWorker, WorkerSettings


@dataclass(frozen=True)
class BatchOptions:
    server: ServerSpec
    # The actor pool: (min, max) actors, autoscaled between them by Ray Data.
    concurrency: tuple[int, int] = (1, 1)
    batch_size: int = 16             # requests per block, sent to the server at once
    max_in_flight: int | None = None  # requests one actor has in flight (default 2 x batch_size)
    calls_per_actor: int = 2         # blocks one actor works on at once (keeps its server busy
                                     # while a block's last answers come in)
    actor_cpus: float = 1.0          # CPUs Ray reserves per actor (its server's threads)
    gpus_per_actor: float | None = None  # None: 1 when the cluster has GPUs and the actors
                                         # start servers, else 0
    max_attempts: int = 3            # per request, for codes worth retrying
    timeout_s: float = 600.0         # per attempt
    retry_failed: bool = False       # rerun requests that failed for good before
    model_tag: str | None = None     # in every key; None: the config's model name (own servers)
    priority: str | None = None      # None: "batch" against a fleet, the default for own servers

    def __post_init__(self) -> None:
        low, high = self.concurrency
        if not 1 <= low <= high:
            raise ValueError(f"concurrency: 1 <= min <= max, got {self.concurrency}")
        if self.batch_size < 1 or self.max_attempts < 1 or self.calls_per_actor < 1:
            raise ValueError("batch_size, max_attempts and calls_per_actor are at least 1")


@dataclass
class RunSummary:
    run_id: str
    manifest: str
    requests: int = 0          # distinct requests (and invalid rows) in the prompts
    done_before: int = 0       # skipped: made by an earlier run
    failed_before: int = 0     # skipped: failed for good before
    duplicates: int = 0        # rows repeating an earlier row's request
    ok: int = 0                # made by this run (reused files included)
    reused: int = 0            # of those, files an earlier attempt had written
    failed: int = 0            # failed in this run (in the manifest with their errors)
    seconds: float = 0.0
    errors: list[dict[str, Any]] = field(default_factory=list)

    def line(self) -> str:
        return (f"{self.ok} made ({self.reused} found written by an earlier attempt), "
                f"{self.failed} failed, {self.done_before} done before, {self.failed_before} "
                f"failed before, {self.duplicates} duplicate rows; {self.seconds:.1f} s; "
                f"manifest {self.manifest}")


def model_tag_of(spec: ServerSpec) -> str:
    """The model's name from the server config (model.config's file name without .yaml, as the
    server names it); "" for a fleet."""
    if spec.config is None:
        return ""
    import yaml
    with open(spec.config) as f:
        config = yaml.safe_load(f) or {}
    path = str((config.get("model") or {}).get("config") or "")
    return os.path.splitext(os.path.basename(path))[0]


def cluster_gpus() -> float:
    return float(ray.cluster_resources().get("GPU", 0))


def generate(todo: ray.data.Dataset, settings: WorkerSettings, options: BatchOptions
             ) -> ray.data.Dataset:
    """map_batches(MeshWorker) over the actor pool: to-do rows in, manifest rows out."""
    gpus = options.gpus_per_actor
    if gpus is None:
        gpus = 1.0 if options.server.address is None and cluster_gpus() >= 1 else 0.0
    low, high = options.concurrency
    compute = ray.data.ActorPoolStrategy(
        min_size=low, max_size=high, max_concurrent_calls_per_actor=options.calls_per_actor,
        enable_true_multi_threading=options.calls_per_actor > 1)
    return todo.map_batches(
        MeshWorker, fn_constructor_kwargs={"settings": settings}, batch_size=options.batch_size,
        batch_format="pyarrow", compute=compute, num_cpus=options.actor_cpus,
        num_gpus=gpus or None, udf_modifying_row_count=False)


def run(prompts: str | Sequence[str | Mapping[str, Any]], out: str,
        options: BatchOptions, defaults: RequestDefaults = RequestDefaults(),
        filesystem: Any = None, ray_init: Callable[[], None] | None = None) -> RunSummary:
    """Makes every request of `prompts` (a file's path or URI, or a list) not yet made into
    `out`; see the module's docstring. ray_init is called once there is something to make
    (a rerun with nothing left starts no Ray); without it Ray Data starts a local Ray when none
    is running."""
    start = time.monotonic()
    location = OutputLocation.of(out, filesystem)
    summary = RunSummary(run_id=uuid.uuid4().hex, manifest=location.manifest_path)
    if isinstance(prompts, str):
        sources: list[Source] = read_sources(prompts, defaults, filesystem)
    else:
        sources = sources_from_prompts(prompts, defaults)
    model = options.model_tag if options.model_tag is not None else model_tag_of(options.server)
    location.make()
    location.remove_leftovers()
    rows = manifest.latest(manifest.read(location))
    todo = manifest.plan(sources, model, rows, location.names(), options.retry_failed)
    summary.requests = todo.done + todo.failed_before + len(todo.todo)
    summary.done_before, summary.failed_before = todo.done, todo.failed_before
    summary.duplicates = todo.duplicates
    if todo.todo:
        digests = {r["model_digest"] for r in rows.values()
                   if r["model"] == model and r["status"] == "ok" and r["model_digest"]}
        priority = options.priority or ("batch" if options.server.address else None)
        server = options.server
        if server.address is None and "OMP_NUM_THREADS" not in dict(server.env):
            # A server's intra-op threads: the CPUs Ray reserved for its actor.
            threads = max(1, round(options.actor_cpus))
            server = replace(server, env=server.env + tuple(server_args_for_threads(threads)))
        settings = WorkerSettings(
            server=server, output=location, run_id=summary.run_id,
            max_in_flight=options.max_in_flight or 2 * options.batch_size,
            max_attempts=options.max_attempts, timeout_s=options.timeout_s, priority=priority,
            expected_digest=next(iter(digests)) if len(digests) == 1 else None)
        if ray_init is not None:
            ray_init()
        elif not ray.is_initialized():
            ray.init()
        blocks = manifest.batches(todo.table, options.batch_size)
        dataset = ray.data.from_arrow(list(blocks))
        # The manifest rows are written by the driver, a Parquet file per block as each block
        # comes back (Ray Data's progress bars follow the blocks): what a stopped run finished
        # is kept, and no task needs a CPU beside the actors for it.
        for batch in generate(dataset, settings, options).iter_batches(
                batch_size=None, batch_format="pyarrow"):
            if batch.num_rows == 0:
                continue
            rows = batch.to_pylist()
            manifest.write_block(location, summary.run_id, batch)
            summary.ok += sum(1 for r in rows if r["status"] == "ok")
            summary.reused += sum(1 for r in rows if r["reused"])
            summary.errors += [r for r in rows if r["status"] != "ok"]
        summary.failed = len(summary.errors)
        # What a killed writer left (a temporary file it had not linked yet); its request was
        # made again by the retried block.
        location.remove_leftovers()
    summary.seconds = time.monotonic() - start
    return summary


def init_ray(address: str | None = None, num_cpus: float | None = None,
             num_gpus: float | None = None) -> None:
    """ray.init for the command line: the cluster at `address` (or RAY_ADDRESS), else a local
    one of num_cpus / num_gpus."""
    if ray.is_initialized():
        return
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True}
    if address:
        kwargs["address"] = address
    else:
        if num_cpus is not None:
            kwargs["num_cpus"] = int(math.ceil(num_cpus))
        if num_gpus is not None:
            kwargs["num_gpus"] = int(num_gpus)
    ray.init(**kwargs)
