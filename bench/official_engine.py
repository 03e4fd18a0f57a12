#!/usr/bin/env python3
"""The official Cube 3D engine (Roblox/cube's `Engine`, or `EngineFast` on CUDA) timed the way
cube3d-bench times ours, on random weights of the same model YAML, into the same JSON layout.

    bench/official_engine.py --official-repo DIR --model-config models/cube3d-v0.1.yaml \\
        [--device cpu|cuda] [--engine auto|engine|fast|both] [--tokens N] [--buckets 1,4] \\
        [--warmup 1] [--repeat 3] [--guidance-scale 3.0] [--resolution-base 8] [--threads N] \\
        [--weights-dir DIR] [--seed 0] [--json OUT.json] [--benchmark-json OUT.json]

DIR is a checkout of https://github.com/Roblox/cube (a clone, or `git archive` of one); nothing of
it is copied into this repository: the script puts DIR on sys.path and imports `cube3d` from
there (it needs omegaconf, transformers, safetensors, scikit-image and tqdm, as the official
code does). bench/README.md ("The official engine") describes the JSON section it writes.

What runs, and what is not the official code's own behaviour:
  - Weights: scripts/make_random_checkpoint.py (our writer, seeded) writes both checkpoints of
    the YAML's size; they are loaded into the official classes (DualStreamRoformer,
    OneDAutoEncoder) built from the same YAML, and saved from them with safetensors'
    save_model, the official checkpoint layout, which the official Engine then loads with its own
    load_model_weights. Our writer has the decoder side of the shape tokenizer only: the shape
    encoder keeps the official classes' own initialisation (inference never reads it). Any other
    tensor the official classes have and our writer lacks, or the other way round, fails the run.
    cube3d-bench --weights-dir DIR/ours loads the very same values.
  - No CLIP: like cube3d-bench, the prompts are random CLIP-like states ([77, Dt], unit normal;
    one fixed state for the empty prompt of guidance); `run_clip` returns text_proj of them and
    the engine's CLIP loaders are replaced by placeholders while it is constructed.
  - Marching cubes: the official code tries NVIDIA warp (CUDA only) and falls back to
    scikit-image. Without warp installed its grid.py cannot even be imported, so the script
    puts a placeholder `warp` module in place, whose every use fails: the official code then takes
    its scikit-image fallback. The JSON says which one ran and whether warp was installed.
  - Timing: the eager `Engine` (use_kv_cache=True) is stamped at the start of every GPT forward
    (after a device sync on CUDA): each decode step's time, as cube3d-bench's eager-kv;
    `EngineFast` replays one CUDA graph per step and is stamped at its first replay and at the
    end only, one mean step per run, as our graph-kv. TTFT: from run_gpt's start to the first
    decode step (condition, prefill, first token).

Every timed sample is kept (each run's decode steps, TTFT and end to end, under "samples"), with
the run's provenance, as cube3d-bench keeps its own: bench/tpot.py compares the two engines'
runs (FILE.json#official against FILE.json), and --benchmark-json writes Google Benchmark's
layout with cube3d-bench's names (eager-kv/bucket:1/tokens:T/tpot), so that compare.py joins
the two engines' files.

Exit status: 0 on success, 2 for a bad argument (the message names it), 1 for anything else.
"""
import argparse
import contextlib
import dataclasses
import datetime
import hashlib
import importlib
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)
WRITER = os.path.join(SOURCE, "scripts", "make_random_checkpoint.py")
CLIP_CONTEXT = 77  # CLIP's positions per prompt, as cube3d-bench's random states
BENCH_BBOX = (1.925, 1.2, 0.8)  # cube3d-bench's bounding box for use_bbox (v0.5) models
# Parts of the shape tokenizer our writer does not make (inference never reads them): the shape
# encoder and the quantizer's input side.
ENCODER_ONLY = ("encoder.", "bottleneck.block.c_in.", "bottleneck.block.c_x.")


class UsageError(Exception):
    """A bad argument: exit status 2."""


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--official-repo", required=True,
                   help="a checkout of Roblox/cube (the folder holding the cube3d package)")
    p.add_argument("--official-commit", default=None,
                   help="recorded in the JSON when DIR is no git checkout (git archive)")
    p.add_argument("--model-config", required=True, help="model YAML, e.g. models/demo.yaml")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--engine", default="auto", choices=["auto", "engine", "fast", "both"],
                   help="auto: EngineFast on CUDA, Engine on the CPU; both: Engine, then "
                        "EngineFast (CUDA only)")
    p.add_argument("--tokens", type=int, default=None,
                   help="shape tokens per object (sets num_encoder_latents, as cube3d-bench)")
    p.add_argument("--buckets", default="1",
                   help="prompts per batch, e.g. 1,4 (EngineFast runs bucket 1 only)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--guidance-scale", type=float, default=3.0)
    p.add_argument("--resolution-base", type=float, default=8.0,
                   help="the shape stage's grid: (2^R + 1)^3 points; 0 skips it")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and text states")
    p.add_argument("--weights-dir", default=None,
                   help="where the checkpoints go (kept, and reused when they match); default: "
                        "a temporary folder")
    p.add_argument("--json", default=None,
                   help="output: an existing JSON object (cube3d-bench's) gets an \"official\" "
                        "key, anything else is written as {\"official\": ...}")
    p.add_argument("--benchmark-json", default=None,
                   help="also write the results in Google Benchmark's JSON layout")
    args = p.parse_args(argv)
    if not os.path.isdir(os.path.join(args.official_repo, "cube3d")):
        raise UsageError(f"--official-repo {args.official_repo}: no cube3d package there "
                         "(expected a checkout of Roblox/cube)")
    if not os.path.isfile(args.model_config):
        raise UsageError(f"--model-config {args.model_config}: no such file")
    if args.tokens is not None and args.tokens < 1:
        raise UsageError(f"--tokens {args.tokens}: must be >= 1")
    try:
        args.buckets = [int(b) for b in args.buckets.split(",")]
    except ValueError:
        raise UsageError(f"--buckets {args.buckets}: not a list of integers") from None
    if any(b < 1 for b in args.buckets) or len(set(args.buckets)) != len(args.buckets):
        raise UsageError(f"--buckets {args.buckets}: distinct integers >= 1")
    if args.warmup < 0 or args.repeat < 1:
        raise UsageError("--warmup must be >= 0 and --repeat >= 1")
    if args.guidance_scale < 0:
        raise UsageError("--guidance-scale must be >= 0")
    if args.resolution_base < 0:
        raise UsageError("--resolution-base must be >= 0")
    if args.threads is not None and args.threads < 1:
        raise UsageError("--threads must be >= 1")
    cuda = args.device.startswith("cuda")
    if not cuda and args.device != "cpu":
        raise UsageError(f"--device {args.device}: cpu, cuda or cuda:N")
    if args.engine == "auto":
        args.engines = ["fast"] if cuda else ["engine"]
    elif args.engine == "both":
        args.engines = ["engine", "fast"]
    else:
        args.engines = [args.engine]
    if "fast" in args.engines and not cuda:
        raise UsageError("--engine fast: the official EngineFast runs on CUDA only "
                         "(it captures a CUDA graph); use --engine engine on the CPU")
    return args


# --- the official code -------------------------------------------------------------------------

def placeholder_warp():
    """A stand-in `warp` module: importing it works, using it fails (ImportError), so that the
    official code, which imports warp unconditionally, takes its own scikit-image fallback."""
    module = types.ModuleType("warp")
    module.__doc__ = "placeholder made by bench/official_engine.py: warp is not installed"

    def missing(name):
        if name.startswith("__"):  # introspection (hasattr(warp, "__file__")): no such thing
            raise AttributeError(name)
        raise ImportError(f"warp is not installed (warp.{name} used through the placeholder "
                          "of bench/official_engine.py)")
    module.__getattr__ = missing
    return module


def import_official(repo):
    """Imports the official modules from `repo`; returns them and whether warp is installed."""
    try:
        importlib.import_module("warp")
        warp_installed = True
    except ImportError:
        sys.modules["warp"] = placeholder_warp()
        warp_installed = False
    sys.path.insert(0, os.path.abspath(repo))
    mods = types.SimpleNamespace()
    try:
        mods.engine = importlib.import_module("cube3d.inference.engine")
        mods.utils = importlib.import_module("cube3d.inference.utils")
        mods.gpt = importlib.import_module("cube3d.model.gpt.dual_stream_roformer")
        mods.shape = importlib.import_module("cube3d.model.autoencoder.one_d_autoencoder")
    except ImportError as e:
        raise RuntimeError(f"importing the official code from {repo} failed: {e} (it needs "
                           "omegaconf, transformers, safetensors, scikit-image and tqdm)") from e
    loaded_from = os.path.dirname(os.path.dirname(os.path.abspath(mods.engine.__file__)))
    if os.path.realpath(os.path.dirname(loaded_from)) != os.path.realpath(repo):
        raise RuntimeError(f"cube3d was imported from {loaded_from}, not from {repo}: another "
                           "cube3d package is installed")
    return mods, warp_installed


def repo_commit(repo, given):
    if given:
        return given
    try:
        out = subprocess.run(["git", "-C", repo, "rev-parse", "--show-toplevel", "HEAD"],
                             capture_output=True, text=True, timeout=30)
    except OSError:
        return None
    lines = out.stdout.split()
    # Only a checkout of its own: a folder inside another repository has that one's commit.
    if out.returncode != 0 or len(lines) != 2 or \
            os.path.realpath(lines[0]) != os.path.realpath(repo):
        return None
    return lines[1]


def official_yaml(mods, model_config, tokens):
    """The model YAML reduced to what the official config classes take (our YAMLs carry more,
    e.g. random_weights_seed), with num_encoder_latents = tokens and the CLIP name the Engine
    reads (never loaded here)."""
    import yaml

    with open(model_config) as f:
        config = yaml.safe_load(f)
    out = {}
    for section, cls in (("gpt_model", mods.gpt.DualStreamRoformer.Config),
                         ("shape_model", mods.shape.OneDAutoEncoder.Config)):
        if section not in config:
            raise UsageError(f"--model-config {model_config}: no {section} section")
        names = {f.name for f in dataclasses.fields(cls)}
        out[section] = {k: v for k, v in config[section].items() if k in names}
    model_tokens = out["shape_model"]["num_encoder_latents"]
    if tokens is not None:
        if tokens > model_tokens:
            raise UsageError(f"--tokens {tokens}: must be in 1..{model_tokens} "
                             f"(shape_model.num_encoder_latents of {model_config})")
        out["shape_model"]["num_encoder_latents"] = tokens
    out["text_model_pretrained_model_name_or_path"] = config.get(
        "text_model_pretrained_model_name_or_path", "openai/clip-vit-large-patch14")
    return out, model_tokens


# --- weights -----------------------------------------------------------------------------------

def load_writer():
    spec = importlib.util.spec_from_file_location("make_random_checkpoint", WRITER)
    writer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(writer)
    return writer


def into_official(model, ours_path, optional_prefixes):
    """Loads our writer's tensors into an official model: every one of them must be a tensor of
    the model with its shape, and every tensor of the model must be among them, shared with one
    of them (one module under two names) or under `optional_prefixes`. Returns the names left at
    the class's own initialisation."""
    import torch
    from safetensors.torch import load_file

    tensors = load_file(ours_path)
    own = model.state_dict()
    unknown = sorted(set(tensors) - set(own))
    if unknown:
        raise RuntimeError(f"{ours_path}: tensors the official {type(model).__name__} does not "
                           f"have: {unknown[:5]}{' ...' if len(unknown) > 5 else ''}")
    for name, value in tensors.items():
        if tuple(own[name].shape) != tuple(value.shape):
            raise RuntimeError(f"{ours_path}: {name} is {list(value.shape)}, the official "
                               f"{type(model).__name__} has {list(own[name].shape)}")
    with torch.no_grad():
        result = model.load_state_dict(tensors, strict=False)
    loaded = {own[n].data_ptr() for n in tensors}
    left = []
    for name in result.missing_keys:
        if own[name].data_ptr() in loaded:
            continue  # the same tensor under another name (a shared module)
        if not name.startswith(optional_prefixes):
            raise RuntimeError(f"{ours_path}: no {name}, which the official "
                               f"{type(model).__name__} needs (our writer's layout drifted)")
        left.append(name)
    return left


def make_weights(mods, writer, config, config_path, weights_dir, seed):
    """Our writer's checkpoints in weights_dir/ours, and the official classes' re-save of them in
    weights_dir/official; reused when a stamp of the config and seed matches."""
    from safetensors.torch import save_model

    stamp = hashlib.sha256(json.dumps([config, seed], sort_keys=True).encode()).hexdigest()
    ours = os.path.join(weights_dir, "ours")
    official = os.path.join(weights_dir, "official")
    stamp_path = os.path.join(official, "stamp.json")
    paths = {"gpt": os.path.join(official, "shape_gpt.safetensors"),
             "shape": os.path.join(official, "shape_tokenizer.safetensors")}
    if os.path.isfile(stamp_path):
        with open(stamp_path) as f:
            saved = json.load(f)
        if saved.get("stamp") == stamp and all(os.path.isfile(p) for p in paths.values()):
            return paths, saved["info"]
    os.makedirs(ours, exist_ok=True)
    os.makedirs(official, exist_ok=True)
    ours_gpt = os.path.join(ours, "shape_gpt.safetensors")
    ours_shape = os.path.join(ours, "shape_tokenizer.safetensors")
    writer.write_streamed(ours_gpt, writer.gpt_spec(config["gpt_model"]), seed, "F32")
    writer.write_streamed(ours_shape, writer.shape_tokenizer_spec(config["shape_model"]),
                          seed + 1, "F32")

    cfg = mods.utils.load_config(config_path)
    gpt = mods.gpt.DualStreamRoformer(
        mods.utils.parse_structured(mods.gpt.DualStreamRoformer.Config, cfg.gpt_model))
    left_gpt = into_official(gpt, ours_gpt, ())
    save_model(gpt, paths["gpt"])
    gpt_params = sum(p.numel() for p in gpt.parameters())
    del gpt
    shape = mods.shape.OneDAutoEncoder(
        mods.utils.parse_structured(mods.shape.OneDAutoEncoder.Config, cfg.shape_model))
    left_shape = into_official(shape, ours_shape, ENCODER_ONLY)
    save_model(shape, paths["shape"])
    del shape
    info = {"writer": "scripts/make_random_checkpoint.py", "seed": seed, "dtype": "float32",
            "ours": ours, "official": official,
            "layout": "saved by safetensors save_model from the official classes",
            "gpt_params": gpt_params,
            "left_at_official_init": sorted(left_gpt + left_shape)[:8],
            "left_at_official_init_count": len(left_gpt) + len(left_shape)}
    with open(stamp_path, "w") as f:
        json.dump({"stamp": stamp, "info": info}, f)
    return paths, info


# --- the engine, without CLIP ------------------------------------------------------------------

class _NoClipModel:
    """Stands in for CLIPTextModelWithProjection while the Engine is built: never run."""

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        return cls()

    def eval(self):
        return self


class _NoClipTokenizer:
    model_max_length = CLIP_CONTEXT

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        return cls()


@contextlib.contextmanager
def clip_placeholders(engine_module):
    saved = (engine_module.CLIPTextModelWithProjection, engine_module.CLIPTokenizerFast)
    engine_module.CLIPTextModelWithProjection = _NoClipModel
    engine_module.CLIPTokenizerFast = _NoClipTokenizer
    try:
        yield
    finally:
        engine_module.CLIPTextModelWithProjection, engine_module.CLIPTokenizerFast = saved


class TextStates:
    """Random CLIP-like states per prompt ([77, Dt], unit normal), fixed by the seed and the
    order prompts are first seen; the empty prompt (guidance's) has one state of its own."""

    def __init__(self, dim, seed):
        self.dim = dim
        self.seed = seed
        self.seeds = {"": seed + 999}

    def __call__(self, prompts, device):
        import torch

        if isinstance(prompts, str):
            prompts = [prompts]
        out = []
        for prompt in prompts:
            if prompt not in self.seeds:
                self.seeds[prompt] = self.seed + len(self.seeds)
            gen = torch.Generator().manual_seed(self.seeds[prompt])
            out.append(torch.randn(CLIP_CONTEXT, self.dim, generator=gen))
        return torch.stack(out).to(device)


def engine_class(base, states):
    import torch

    class RandomTextEngine(base):
        """The official engine with run_clip replaced: text_proj of random states, no CLIP."""

        @torch.inference_mode()
        def run_clip(self, text_inputs):
            return self.gpt_model.encode_text(states(text_inputs, self.device))

    RandomTextEngine.__name__ = base.__name__
    return RandomTextEngine


def build_engine(mods, kind, config_path, paths, device, states):
    base = mods.engine.EngineFast if kind == "fast" else mods.engine.Engine
    with clip_placeholders(mods.engine):
        return engine_class(base, states)(config_path, paths["gpt"], paths["shape"], device)


# --- timing --------------------------------------------------------------------------------------

class Clock:
    def __init__(self, device):
        import torch

        self.sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def now(self):
        self.sync()
        return time.perf_counter()


class _CountingGraph:
    """Wraps EngineFast's CUDA graph: stamps the first replay of a run."""

    def __init__(self, graph, on_replay):
        self.graph = graph
        self.on_replay = on_replay

    def replay(self):
        self.on_replay()
        self.graph.replay()

    def __getattr__(self, name):
        return getattr(self.graph, name)


def instrument_decode(engine, kind, clock):
    """Installs the stamps; returns the list each run fills (reset it before a run)."""
    stamps = []
    if kind == "fast":
        def on_replay():
            if not stamps:
                stamps.append(clock.now())
        engine.graph = _CountingGraph(engine.graph, on_replay)
    else:
        forward = engine.gpt_model.forward

        def stamped_forward(*args, **kwargs):
            stamps.append(clock.now())
            return forward(*args, **kwargs)
        engine.gpt_model.forward = stamped_forward
    return stamps


def ids_checksum(ids):
    """FNV-1a 64 over the ids as int64, row-major: cube3d-bench's ids_checksum."""
    import numpy as np

    data = np.ascontiguousarray(ids.detach().cpu().numpy().astype("<i8")).tobytes()
    h = 1469598103934665603
    for byte in data:
        h = ((h ^ byte) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def percentile(sorted_values, q):
    if not sorted_values:
        return 0.0
    index = q * (len(sorted_values) - 1)
    lo = int(index)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (index - lo)


def whole_ns(ms):
    """A sample as kept: milliseconds to the nanosecond, as cube3d-bench's."""
    return round(ms * 1e6) / 1e6


def timed_run(engine, kind, clock, stamps, prompts, args, bbox):
    stamps.clear()
    start = clock.now()
    ids = engine.run_gpt(prompts, use_kv_cache=True, guidance_scale=args.guidance_scale,
                         bounding_box_xyz=bbox)
    end = clock.now()
    tokens = ids.shape[1]
    if kind == "fast":
        first = stamps[0] if stamps else end
        steps = [(end - first) * 1e3 / (tokens - 1)] if tokens > 1 and stamps else []
        ttft = (first - start) * 1e3
    else:
        # stamps[0] is the prefill's forward, stamps[i] the start of decode step i.
        marks = stamps[1:] + [end]
        steps = [(b - a) * 1e3 for a, b in zip(marks, marks[1:])]
        ttft = ((stamps[1] if len(stamps) > 1 else end) - start) * 1e3
    return {"steps": [whole_ns(s) for s in steps], "ttft_ms": whole_ns(ttft),
            "e2e_ms": whole_ns((end - start) * 1e3), "ids": ids}


def bench_decode(engine, kind, clock, stamps, bucket, args, bbox, tokens):
    prompts = [f"bench prompt {i}" for i in range(bucket)]
    for _ in range(args.warmup):
        timed_run(engine, kind, clock, stamps, prompts, args, bbox)
    steps, ttft, e2e, checksums, step_runs = [], [], [], [], []
    for _ in range(args.repeat):
        run = timed_run(engine, kind, clock, stamps, prompts, args, bbox)
        steps += run["steps"]
        step_runs.append(run["steps"])
        ttft.append(run["ttft_ms"])
        e2e.append(run["e2e_ms"])
        checksums.append(ids_checksum(run["ids"]))
    steps.sort()
    mean_e2e = statistics.fmean(e2e)
    return {"mode": "graph-kv" if kind == "fast" else "eager-kv",
            "engine": "EngineFast" if kind == "fast" else "Engine",
            "bucket": bucket, "tokens": tokens, "steps": len(steps),
            "tpot_kind": "per_run_mean" if kind == "fast" else "per_step",
            "tpot_ms_median": percentile(steps, 0.5), "tpot_ms_p90": percentile(steps, 0.9),
            "tpot_ms_mean": statistics.fmean(steps) if steps else 0.0,
            "ttft_ms": statistics.fmean(ttft), "e2e_ms": mean_e2e,
            "tokens_per_s": bucket * tokens / (mean_e2e / 1e3) if mean_e2e > 0 else 0.0,
            "ids_checksum": checksums[-1], "ids_stable": len(set(checksums)) == 1,
            "samples": {"tpot_ms": step_runs, "ttft_ms": ttft, "e2e_ms": e2e}}


# --- the shape stage ---------------------------------------------------------------------------

class _TimedMeasure:
    """Wraps scikit-image's measure module as the official shape code imported it."""

    def __init__(self, measure, record):
        self.measure = measure
        self.record = record

    def marching_cubes(self, *args, **kwargs):
        start = time.perf_counter()
        out = self.measure.marching_cubes(*args, **kwargs)
        self.record("scikit-image", time.perf_counter() - start, len(out[1]))
        return out

    def __getattr__(self, name):
        return getattr(self.measure, name)


def bench_object(mods, engine, clock, args, bbox):
    """One object through the official t2s (tokens, latents, dense occupancy, marching cubes),
    with its stages timed from outside."""
    times = {"latents": 0.0, "occupancy": 0.0, "marching_cubes": 0.0}
    seen = {"points": 0, "marching_cubes": [], "faces": 0}
    shape_model = engine.shape_model
    decode_indices, query = shape_model.decode_indices, shape_model.query

    def timed_decode_indices(*a, **k):
        start = clock.now()
        out = decode_indices(*a, **k)
        times["latents"] += clock.now() - start
        return out

    def timed_query(queries, latents):
        start = clock.now()
        out = query(queries, latents)
        times["occupancy"] += clock.now() - start
        seen["points"] += queries.shape[0] * queries.shape[1]
        return out

    def record(which, seconds, faces):
        times["marching_cubes"] += seconds
        seen["marching_cubes"].append(which)
        seen["faces"] += faces

    warp_mc = mods.shape.marching_cubes_with_warp

    def timed_warp(*a, **k):
        start = time.perf_counter()
        out = warp_mc(*a, **k)  # raises when warp cannot run: the official code falls back
        record("warp", time.perf_counter() - start, len(out[1]))
        return out

    measure = mods.shape.measure
    shape_model.decode_indices, shape_model.query = timed_decode_indices, timed_query
    mods.shape.measure = _TimedMeasure(measure, record)
    mods.shape.marching_cubes_with_warp = timed_warp
    try:
        start = clock.now()
        ids = engine.run_gpt(["bench object"], use_kv_cache=True,
                             guidance_scale=args.guidance_scale, bounding_box_xyz=bbox)
        tokens_s = clock.now() - start
        import torch

        start = clock.now()
        with torch.autocast(engine.device.type, dtype=torch.bfloat16):  # as the official t2s
            mesh = engine.run_shape_decode(ids, args.resolution_base)
        shape_s = clock.now() - start
    finally:
        del shape_model.decode_indices, shape_model.query
        mods.shape.measure = measure
        mods.shape.marching_cubes_with_warp = warp_mc
    vertices, faces = mesh[0]
    n = int(2 ** args.resolution_base) + 1
    return {"resolution_base": args.resolution_base, "grid_points_per_axis": n,
            "occupancy": "dense", "occupancy_points": seen["points"], "dense_points": n ** 3,
            "tokens_ms": tokens_s * 1e3, "latents_ms": times["latents"] * 1e3,
            "occupancy_ms": times["occupancy"] * 1e3,
            "marching_cubes": seen["marching_cubes"][-1] if seen["marching_cubes"] else "none",
            "marching_cubes_ms": times["marching_cubes"] * 1e3,
            "marching_cubes_faces": seen["faces"],
            "shape_ms": shape_s * 1e3, "object_ms": (tokens_s + shape_s) * 1e3,
            "faces": 0 if faces is None else int(len(faces)),
            "postprocess": "none (the official engine's t2s does not simplify; generate.py "
                           "does with pymeshlab: bench/official_mesh.py times that)"}


# --- output --------------------------------------------------------------------------------------

def device_name(device):
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def driver_version(device):
    if device.type != "cuda":
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader",
                              "-i", str(device.index or 0)], capture_output=True, text=True,
                             timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def provenance(device, commit, threads):
    """The run's machine and software, in cube3d-bench's "provenance" keys (bench/tpot.py
    compare reads them): read before the engine is built, so the load is the machine's own."""
    import torch

    try:
        with open("/proc/loadavg") as f:
            load = [float(x) for x in f.read().split()[:3]]
    except (OSError, ValueError):
        load = None
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count()
    return {"commit": commit, "build_type": None, "assertions": None,
            "compiler": f"Python {platform.python_version()}", "torch": torch.__version__,
            "device": str(device), "device_name": device_name(device),
            "driver": driver_version(device), "threads": threads, "cpu_cores": cores,
            "cpu_model": device_name(torch.device("cpu")), "host": platform.node(),
            "os": f"{platform.system()} {platform.release()} {platform.machine()}",
            "load_avg_at_start": load}


def write_benchmark_json(path, section):
    """Google Benchmark's layout of the section (bench/tpot_stats.py, cube3d-bench's names)."""
    sys.path.insert(0, HERE)
    import tpot_stats

    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(tpot_stats.google_benchmark_json(section, "bench/official_engine.py"), f,
                  indent=2)
        f.write("\n")
    os.replace(tmp, path)


def write_json(path, section):
    """Puts the section under "official" of the JSON object at `path` (cube3d-bench's output),
    or writes {"official": section} when there is none."""
    out = {}
    if os.path.exists(path):
        try:
            with open(path) as f:
                out = json.load(f)
        except (OSError, ValueError) as e:
            raise RuntimeError(f"--json {path}: exists but is no JSON ({e}); not overwritten")
        if not isinstance(out, dict):
            raise RuntimeError(f"--json {path}: holds no JSON object; not overwritten")
    out["official"] = section
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def print_row(r):
    print(f"{r['engine']:<11} {r['mode']:<9} {r['bucket']:6d} {r['tokens']:6d} "
          f"{r['tpot_ms_median']:9.3f} {r['tpot_ms_p90']:9.3f} {r['ttft_ms']:9.2f} "
          f"{r['e2e_ms']:9.1f} {r['tokens_per_s']:9.1f} {r['ids_checksum']:>16}", flush=True)


def run(args):
    os.environ.setdefault("TQDM_DISABLE", "1")  # the official loops' progress bars
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {args.device}: no CUDA device here")
    mods, warp_installed = import_official(args.official_repo)
    config, model_tokens = official_yaml(mods, args.model_config, args.tokens)
    tokens = config["shape_model"]["num_encoder_latents"]
    use_bbox = bool(config["gpt_model"].get("use_bbox", False))
    bbox = BENCH_BBOX if use_bbox else None
    if "fast" in args.engines and args.buckets != [1]:
        raise UsageError("--buckets: the official EngineFast runs one prompt at a time (1)")

    with contextlib.ExitStack() as stack:
        weights_dir = args.weights_dir or stack.enter_context(
            tempfile.TemporaryDirectory(prefix="official_engine_"))
        os.makedirs(weights_dir, exist_ok=True)
        config_path = os.path.join(weights_dir, "official_config.yaml")
        import yaml

        with open(config_path, "w") as f:
            yaml.safe_dump(config, f, sort_keys=False)
        start = time.perf_counter()
        paths, weights = make_weights(mods, load_writer(), config, config_path, weights_dir,
                                      args.seed)
        weights["make_ms"] = (time.perf_counter() - start) * 1e3
        states = TextStates(config["gpt_model"]["text_model_embed_dim"], args.seed)
        clock = Clock(device)
        commit = repo_commit(args.official_repo, args.official_commit)
        section = {
            "repo": os.path.abspath(args.official_repo),
            "commit": commit,
            "provenance": provenance(device, commit, torch.get_num_threads()),
            "device": str(device), "device_name": device_name(device),
            "dtype": "float32 weights, bfloat16 autocast (the official engine's own)",
            "model": args.model_config, "tokens": tokens, "model_tokens": model_tokens,
            "warmup": args.warmup, "repeat": args.repeat,
            "guidance_scale": args.guidance_scale, "threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "weights": weights,
            "text": f"random CLIP-like states [{CLIP_CONTEXT}, Dt] (no CLIP), as cube3d-bench",
            "warp_installed": warp_installed,
            "notes": [], "load_ms": {}, "results": [], "complete": False}
        if not warp_installed:
            section["notes"].append(
                "warp is not installed: a placeholder module let the official grid.py import; "
                "its marching cubes falls back to scikit-image")
        if args.json:
            write_json(args.json, section)
        print(f"official engine ({section['commit'] or 'commit unknown'}) on {device}: "
              f"{args.model_config}, {tokens} tokens, weights from our writer "
              f"(seed {args.seed}) in the official layout", flush=True)
        print(f"\n{'engine':<11} {'mode':<9} {'bucket':>6} {'tokens':>6} {'TPOT med':>9} "
              f"{'TPOT p90':>9} {'TTFT':>9} {'e2e':>9} {'tok/s':>9} {'ids checksum':>16}",
              flush=True)
        engine = None
        for kind in args.engines:
            engine = None
            start = time.perf_counter()
            engine = build_engine(mods, kind, config_path, paths, device, states)
            section["load_ms"]["EngineFast" if kind == "fast" else "Engine"] = (
                time.perf_counter() - start) * 1e3
            stamps = instrument_decode(engine, kind, clock)
            for bucket in args.buckets:
                r = bench_decode(engine, kind, clock, stamps, bucket, args, bbox, tokens)
                print_row(r)
                section["results"].append(r)
                if args.json:
                    write_json(args.json, section)
                if args.benchmark_json:
                    write_benchmark_json(args.benchmark_json, section)
        if args.resolution_base > 0:
            section["mesh"] = bench_object(mods, engine, clock, args, bbox)
            m = section["mesh"]
            print(f"\nobject at resolution {args.resolution_base:g}: tokens {m['tokens_ms']:.1f} "
                  f"ms, latents {m['latents_ms']:.1f}, occupancy {m['occupancy_ms']:.1f} "
                  f"({m['occupancy_points']} points), marching cubes "
                  f"({m['marching_cubes']}) {m['marching_cubes_ms']:.1f}, shape "
                  f"{m['shape_ms']:.1f}, object {m['object_ms']:.1f} ms, {m['faces']} faces",
                  flush=True)
            if m["faces"] == 0:
                section["notes"].append("the random weights' occupancy field has no surface at "
                                        "this resolution: no mesh, marching cubes failed")
        section["complete"] = True
        if args.json:
            write_json(args.json, section)
            print(f"\nwrote \"official\" into {args.json}", flush=True)
    return 0


def main(argv=None):
    try:
        args = parse_args(argv)
        return run(args)
    except UsageError as e:
        print(f"official_engine.py: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        print(f"official_engine.py: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
