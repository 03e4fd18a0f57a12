#!/usr/bin/env python3
"""Fetches the real Cube 3D weights, checks them, and writes a server config that serves them.

    scripts/fetch_models.py v0.1|v0.5 [DIR] [--device auto|cpu|cuda] [--check-only]
                            [--model-config F] [--revision REV] [--clip-revision REV]

DIR (default: .cache/models/cube3d-<version> in this checkout, where
models/cube3d-<version>-server.yaml looks) receives exactly the files cube3d-server reads:

    shape_gpt.safetensors                      from Roblox/cube3d-<version>
    shape_tokenizer.safetensors                from Roblox/cube3d-<version>
    clip-vit-large-patch14/config.json         from openai/clip-vit-large-patch14: the text
    clip-vit-large-patch14/model.safetensors   tower is read out of the full CLIP checkpoint,
    clip-vit-large-patch14/vocab.json          and vocab.json + merges.txt are its BPE
    clip-vit-large-patch14/merges.txt          tokenizer (the other tokenizer files are unused)

Downloads go through huggingface_hub (HF_ENDPOINT, HF_TOKEN and its other variables apply) into
DIR/.partial/ and resume there after an interruption, in this run (huggingface_hub retries) or
the next one; nothing is cached outside DIR. Every file is checked before it is put in place, and
again on every later run: its size and checksum against the hub's (SHA-256 of LFS files, the git
blob hash of the others; --check-only compares with DIR/fetch-manifest.json, the record of the
last download, and makes no request), a safetensors checkpoint's header against what the loader
requires for the model YAML (every tensor name, shape and a floating-point dtype, nothing
unexpected), every tensor the server reads free of NaN and infinity (read tensor by tensor, in
bounded chunks), and CLIP's config and tokenizer files as the server parses them. A file that
fails is named with the tensor at fault and left where it is: remove it to download it again.
(The one thing deleted is a partial download of a version the hub no longer has, with a line
saying so.)

When every file passes, DIR gets a copy of the model YAML (models/cube3d-<version>.yaml, or
--model-config) and server.yaml: models/cube3d-<version>-server.yaml with its paths pointing at
the files beside it and, with --device auto, device cuda and bfloat16 when a GPU is present
(`nvidia-smi -L`, else torch.cuda.is_available()), cpu and float32 with the CPU settings that
file documents otherwise. A server.yaml edited since this tool wrote it is kept: the new one goes
to server.yaml.new. cube3d-server --print-config (CUBE3D_BIN_DIR, build/bin or PATH) checks the
written config; the commands that serve it and call it are printed last.

Exit status: 0 everything checked out; 1 a check failed (each failure printed); 2 the run could
not be made (arguments, the hub or the network, another run holding DIR).
"""
import argparse
import dataclasses
import datetime
import fcntl
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
# The Python mirror of the loader's tensor list (src/model/weight_spec.cpp), shared with the
# random-checkpoint writer so that there is one copy of it in Python.
from make_random_checkpoint import gpt_spec, shape_tokenizer_spec  # noqa: E402

CUBE_REPOS = {"v0.1": "Roblox/cube3d-v0.1", "v0.5": "Roblox/cube3d-v0.5"}
CLIP_REPO = "openai/clip-vit-large-patch14"
CLIP_DIR = "clip-vit-large-patch14"
MANIFEST = "fetch-manifest.json"
PARTIAL_DIR = ".partial"
LOCK_FILE = ".fetch.lock"
SERVER_YAML = "server.yaml"
MANIFEST_FORMAT = 1

# dtype -> bytes per element: what the server's safetensors reader opens (src/tensor_io/safetensors.cpp);
# any other dtype anywhere in a file makes the whole file unreadable there.
SAFETENSORS_DTYPES = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "U8": 1}
# Float dtypes: the integer view of one element and its exponent bits. All exponent bits set is
# NaN or infinity, whatever the mantissa, which covers bfloat16 (numpy has no such dtype).
FLOAT_EXPONENTS = {"F32": ("<u4", 0x7F800000), "F16": ("<u2", 0x7C00), "BF16": ("<u2", 0x7F80)}
# The safetensors reference implementation refuses headers above 100 MB; real ones are < 100 KB.
MAX_HEADER_BYTES = 100 << 20
# Bytes read at a time while checking values: bounds memory for the 7 GB shape GPT.
CHUNK_BYTES = 64 << 20
# The server reads at most this much of config.json (clip_text_config.cpp) and of vocab.json or
# merges.txt (clip_vocab.cpp).
MAX_CLIP_CONFIG_BYTES = 1 << 20
MAX_VOCAB_FILE_BYTES = 64 << 20
MAX_DIMENSION = 1 << 24
MAX_VOCAB_IDS = 1 << 24
CLIP_CONTEXT_LENGTH = 77  # the tokenizer pads every prompt to 77 ids
CLIP_SPECIAL_TOKENS = ("<|startoftext|>", "<|endoftext|>")
# Only the shape decoder runs: the loader ignores these parts of a shape tokenizer checkpoint.
SHAPE_IGNORED_PREFIXES = ("encoder.", "bottleneck.block.c_in.", "bottleneck.block.c_x.")
# The Fourier embedder is shared by encoder and decoder; a checkpoint keeps it under any of these.
EMBEDDER_ALIASES = ("occupancy_decoder.embedder.weight", "embedder.weight",
                    "encoder.embedder.weight")
# transformers' CLIPTextConfig defaults: what a key missing from config.json means.
CLIP_DEFAULTS = {"vocab_size": 49408, "hidden_size": 512, "intermediate_size": 2048,
                 "num_hidden_layers": 12, "num_attention_heads": 8,
                 "max_position_embeddings": CLIP_CONTEXT_LENGTH, "hidden_act": "quick_gelu",
                 "layer_norm_eps": 1e-5}
CLIP_INT_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                 "num_attention_heads", "max_position_embeddings")

# For --device cpu: the settings models/cube3d-v0.X-server.yaml documents for a CPU (its comments
# say why), as (section, key, YAML value).
CPU_SETTINGS = [(None, "device", '"cpu"'), (None, "dtype", '"float32"'),
                ("batching", "batch_buckets", "[1, 2, 4]"),
                ("defaults", "resolution_base", "7"),
                ("limits", "default_deadline_ms", "3600000"),
                ("grpc", "max_connection_age_grace_ms", "3900000")]
CUDA_SETTINGS = [(None, "device", '"cuda"'), (None, "dtype", '"bfloat16"')]


class UsageError(Exception):
    """The run cannot be made (exit 2)."""


class CheckFailed(Exception):
    """A file cannot be checked further; the message names the file."""


@dataclasses.dataclass(frozen=True)
class Wanted:
    role: str      # gpt, shape, clip_config, vocab, merges, clip_weights
    repo: str
    filename: str  # in the repository
    dest: str      # relative to DIR


@dataclasses.dataclass(frozen=True)
class Remote:
    """What the hub says about one file at one commit."""
    commit: str
    size: int
    algorithm: str  # "sha256" (LFS files) or "git-sha1" (the git blob id of the others)
    digest: str
    hub_url: str    # the /resolve/ URL
    url: str        # where the bytes are (a CDN for LFS files)
    lfs: bool


@dataclasses.dataclass(frozen=True)
class Entry:
    name: str
    dtype: str
    shape: tuple
    begin: int
    end: int


def wanted_files(version):
    repo = CUBE_REPOS[version]
    # CLIP's config first: the CLIP checkpoint is checked against it. Small files before large.
    return [
        Wanted("clip_config", CLIP_REPO, "config.json", f"{CLIP_DIR}/config.json"),
        Wanted("vocab", CLIP_REPO, "vocab.json", f"{CLIP_DIR}/vocab.json"),
        Wanted("merges", CLIP_REPO, "merges.txt", f"{CLIP_DIR}/merges.txt"),
        Wanted("shape", repo, "shape_tokenizer.safetensors", "shape_tokenizer.safetensors"),
        Wanted("gpt", repo, "shape_gpt.safetensors", "shape_gpt.safetensors"),
        Wanted("clip_weights", CLIP_REPO, "model.safetensors", f"{CLIP_DIR}/model.safetensors"),
    ]


def shown(path):
    """A path as the user would type it: relative to the current directory when inside it."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def human_bytes(n):
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


# --- safetensors --------------------------------------------------------------------------------

def read_safetensors_header(path):
    """The entries of a safetensors file, checked as the server's reader checks them: the 8-byte
    length, the JSON header, each entry's dtype, shape and byte range, and ranges that tile the data
    section exactly. Returns (entries by name, data start)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            raise CheckFailed(f"{size} bytes: too short for a safetensors file")
        length = int.from_bytes(prefix, "little")
        if length > MAX_HEADER_BYTES or 8 + length > size:
            raise CheckFailed(f"header length {length} does not fit the file's {size} bytes "
                              "(truncated, or not a safetensors file)")
        raw = f.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckFailed(f"the header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise CheckFailed("the header is not a JSON object")
    data_start = 8 + length
    data_size = size - data_start
    entries = {}
    for name, value in header.items():
        if name == "__metadata__":
            continue
        where = f"tensor '{name}'"
        if not isinstance(value, dict) or not {"dtype", "shape", "data_offsets"} <= set(value):
            raise CheckFailed(f"{where}: header entry lacks dtype, shape or data_offsets")
        dtype, shape, offsets = value["dtype"], value["shape"], value["data_offsets"]
        if dtype not in SAFETENSORS_DTYPES:
            raise CheckFailed(f"{where}: dtype {dtype!r} is not one the server reads "
                              f"({', '.join(SAFETENSORS_DTYPES)})")
        if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
            raise CheckFailed(f"{where}: shape {shape!r} is not a list of non-negative integers")
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(_is_count(o) for o in offsets) or offsets[0] > offsets[1]):
            raise CheckFailed(f"{where}: data_offsets {offsets!r} are not [begin, end]")
        nbytes = SAFETENSORS_DTYPES[dtype] * math.prod(shape)
        if offsets[1] - offsets[0] != nbytes:
            raise CheckFailed(f"{where}: shape {shape} of {dtype} needs {nbytes} bytes, its "
                              f"data_offsets {offsets} hold {offsets[1] - offsets[0]}")
        entries[name] = Entry(name, dtype, tuple(shape), offsets[0], offsets[1])
    covered = 0
    for e in sorted(entries.values(), key=lambda e: (e.begin, e.end, e.name)):
        if e.begin != covered:
            what = "overlaps the tensor before it" if e.begin < covered else \
                f"leaves bytes [{covered}, {e.begin}) of the data section to no tensor"
            raise CheckFailed(f"tensor '{e.name}' {what}")
        covered = e.end
    if covered != data_size:
        raise CheckFailed(f"the tensors hold {covered} bytes of a {data_size}-byte data section "
                          "(truncated, or trailing bytes)")
    return entries, data_start


def _is_count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def read_exactly(f, view):
    """Fills `view` from f; a short file is a CheckFailed."""
    got = 0
    while got < len(view):
        n = f.readinto(view[got:])
        if not n:
            raise CheckFailed("the file ended early (truncated while being checked?)")
        got += n


def scan_safetensors(path, entries, data_start, value_names, hasher):
    """Reads the file once, front to back, in CHUNK_BYTES pieces: feeds every byte to `hasher`
    (or none) and counts NaN and infinite values in the tensors of `value_names`. Returns
    {name: (count, flat index of the first)} for the tensors that have any."""
    nonfinite = {}
    buffer = memoryview(bytearray(min(CHUNK_BYTES, max(1, path.stat().st_size))))
    with open(path, "rb", buffering=0) as f:
        head = f.read(data_start)
        if hasher is not None:
            hasher.update(head)
        for e in sorted(entries.values(), key=lambda e: (e.begin, e.end, e.name)):
            check = e.name in value_names and e.dtype in FLOAT_EXPONENTS
            view_dtype, mask = FLOAT_EXPONENTS.get(e.dtype, ("u1", 0))
            # A multiple of every element size, so no element straddles two chunks.
            step = len(buffer) - len(buffer) % 8 or len(buffer)
            remaining, seen = e.end - e.begin, 0
            while remaining:
                n = min(step, remaining)
                chunk = buffer[:n]
                read_exactly(f, chunk)
                if hasher is not None:
                    hasher.update(chunk)
                if check:
                    bits = np.frombuffer(chunk, dtype=view_dtype)
                    bad = (bits & mask) == mask
                    count = int(np.count_nonzero(bad))
                    if count:
                        old = nonfinite.get(e.name)
                        first = old[1] if old else seen + int(np.argmax(bad))
                        nonfinite[e.name] = ((old[0] if old else 0) + count, first)
                    seen += bits.size
                remaining -= n
    return nonfinite


def read_floats(path, data_start, entry):
    """One (small) tensor as float32, for comparing the copies of a shared tensor."""
    with open(path, "rb") as f:
        f.seek(data_start + entry.begin)
        raw = f.read(entry.end - entry.begin)
    if entry.dtype == "BF16":
        return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
    return np.frombuffer(raw, "<f4" if entry.dtype == "F32" else "<f2").astype(np.float32)


# --- what the loader expects --------------------------------------------------------------------

def expected_tensors(role, model, clip, prefix=""):
    """[(names, shape)] of every tensor the loader requires (names: the aliases, any one of
    which may hold it), and the prefixes of tensors it ignores."""
    if role == "gpt":
        return [((n,), tuple(s)) for n, s, _ in gpt_spec(model["gpt_model"])], ()
    if role == "shape":
        spec = []
        for name, shape, _ in shape_tokenizer_spec(model["shape_model"]):
            names = EMBEDDER_ALIASES if name == EMBEDDER_ALIASES[0] else (name,)
            spec.append((names, tuple(shape)))
        return spec, SHAPE_IGNORED_PREFIXES
    # clip_weights: clip_text_checkpoint_spec() of src/model/weight_spec.cpp.
    d, f = clip["hidden_size"], clip["intermediate_size"]
    spec = [((prefix + "embeddings.token_embedding.weight",), (clip["vocab_size"], d)),
            ((prefix + "embeddings.position_embedding.weight",),
             (clip["max_position_embeddings"], d))]

    def linear(name, fan_in, fan_out):
        spec.append(((name + ".weight",), (fan_out, fan_in)))
        spec.append(((name + ".bias",), (fan_out,)))

    def layer_norm(name, dim):
        spec.append(((name + ".weight",), (dim,)))
        spec.append(((name + ".bias",), (dim,)))

    for i in range(clip["num_hidden_layers"]):
        p = f"{prefix}encoder.layers.{i}"
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            linear(f"{p}.self_attn.{proj}", d, d)
        layer_norm(f"{p}.layer_norm1", d)
        linear(f"{p}.mlp.fc1", d, f)
        linear(f"{p}.mlp.fc2", f, d)
        layer_norm(f"{p}.layer_norm2", d)
    layer_norm(prefix + "final_layer_norm", d)
    return spec, ()


def clip_visible(entries):
    """The CLIP tensors the loader looks at, and their name prefix: a CLIPModel (like
    openai/clip-vit-large-patch14) stores text_model.*, transformers 5's CLIPTextModel the same
    names without it; the vision tower, projections, logit_scale and position_ids are not read
    (clip_text_model.cpp)."""
    token = "embeddings.token_embedding.weight"
    prefix = "" if ("text_model." + token not in entries and token in entries) else "text_model."
    visible = {}
    for name, e in entries.items():
        if not name.startswith(prefix):
            continue
        rest = name[len(prefix):]
        if rest.startswith(("embeddings.", "encoder.", "final_layer_norm.")) \
                and rest != "embeddings.position_ids":
            visible[name] = e
    return visible, prefix


def check_checkpoint(path, role, model, clip=None, hasher=None, config_name="the model YAML"):
    """Problems of one checkpoint (each a line naming the tensor), reading it once."""
    entries, data_start = read_safetensors_header(path)
    prefix = ""
    visible = entries
    if role == "clip_weights":
        visible, prefix = clip_visible(entries)
    spec, ignored = expected_tensors(role, model, clip, prefix)
    problems, values, claimed, shared = [], set(), set(), []
    for names, shape in spec:
        claimed.update(names)
        present = [n for n in names if n in visible]
        if not present:
            problems.append(f"missing tensor '{names[0]}' {list(shape)}")
            continue
        good = []
        for name in present:
            e = visible[name]
            if e.shape != shape:
                problems.append(f"tensor '{name}' is {list(e.shape)}, expected {list(shape)}")
            elif e.dtype not in FLOAT_EXPONENTS:
                problems.append(f"tensor '{name}' is stored as {e.dtype}, expected a float "
                                "type (F32, F16 or BF16)")
            else:
                good.append(name)
        values.update(good)
        if len(good) > 1:
            shared.append(good)
    for name in sorted(visible):
        if name not in claimed and not name.startswith(ignored):
            problems.append(f"unexpected tensor '{name}' {list(visible[name].shape)} "
                            f"(not in {config_name}: a checkpoint of another model?)")
    nonfinite = scan_safetensors(path, entries, data_start, values, hasher)
    for name, (count, first) in sorted(nonfinite.items()):
        e = entries[name]
        at = [int(i) for i in np.unravel_index(first, e.shape)] if e.shape else []
        problems.append(f"tensor '{name}' {list(e.shape)} {e.dtype}: {count} NaN or infinite "
                        f"value(s) of {math.prod(e.shape)}, the first at {at}")
    for names in shared:
        first = read_floats(path, data_start, entries[names[0]])
        for other in names[1:]:
            if not np.array_equal(first, read_floats(path, data_start, entries[other])):
                problems.append(f"tensors '{names[0]}' and '{other}' (one shared tensor) differ")
    return problems


# --- CLIP's config and tokenizer ----------------------------------------------------------------

def read_small(path, limit):
    size = path.stat().st_size
    if size > limit:
        raise CheckFailed(f"{size} bytes: larger than the server reads ({limit})")
    return path.read_bytes()


def read_small_json_object(path, limit, not_an_object):
    """The JSON object in a file of at most `limit` bytes; CheckFailed when it is not JSON, or
    saying `not_an_object` when it is JSON of another kind."""
    try:
        root = json.loads(read_small(path, limit).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckFailed(f"not JSON ({e})") from None
    if not isinstance(root, dict):
        raise CheckFailed(not_an_object)
    return root


def clip_text_config(path, model):
    """(CLIP text config, problems), read as clip_text_config.cpp reads config.json."""
    root = read_small_json_object(path, MAX_CLIP_CONFIG_BYTES,
                                  "the top level is not a JSON object")
    model_type = root.get("model_type") or ""
    if root.get("text_config_dict") is not None:
        section, where = root["text_config_dict"], "text_config_dict."
    elif root.get("text_config") is not None:
        section, where = root["text_config"], "text_config."
    elif model_type == "clip":
        section, where = {}, "text_config."
    elif model_type not in ("", "clip_text_model"):
        raise CheckFailed(f"model_type {model_type!r} is not a CLIP text model")
    else:
        section, where = root, ""
    if not isinstance(section, dict):
        raise CheckFailed(f"{where.rstrip('.')} is not a JSON object")
    config, problems = dict(CLIP_DEFAULTS), []
    for key in CLIP_INT_KEYS:
        value = section.get(key)
        if value is None:
            continue
        if not _is_count(value) or not 1 <= value <= MAX_DIMENSION:
            problems.append(f"{where}{key} must be an integer in 1..{MAX_DIMENSION} "
                            f"(got {value!r})")
        else:
            config[key] = value
    if section.get("hidden_act") is not None:
        config["hidden_act"] = section["hidden_act"]
    if section.get("layer_norm_eps") is not None:
        config["layer_norm_eps"] = section["layer_norm_eps"]
    if config["hidden_act"] not in ("quick_gelu", "gelu"):
        problems.append(f"{where}hidden_act {config['hidden_act']!r} is not supported "
                        "(quick_gelu or gelu)")
    eps = config["layer_norm_eps"]
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < math.inf:
        problems.append(f"{where}layer_norm_eps must be a positive number (got {eps!r})")
    if config["hidden_size"] % config["num_attention_heads"]:
        problems.append(f"{where}num_attention_heads ({config['num_attention_heads']}) must "
                        f"divide hidden_size ({config['hidden_size']})")
    text_dim = model["gpt_model"]["text_model_embed_dim"]
    if config["hidden_size"] != text_dim:
        problems.append(f"{where}hidden_size is {config['hidden_size']} but the model YAML's "
                        f"gpt_model.text_model_embed_dim is {text_dim}: another CLIP")
    if config["max_position_embeddings"] < CLIP_CONTEXT_LENGTH:
        problems.append(f"{where}max_position_embeddings ({config['max_position_embeddings']}) "
                        f"is below the {CLIP_CONTEXT_LENGTH} ids of every prompt")
    return config, problems


def check_vocab(path, clip):
    """vocab.json as clip_vocab.cpp reads it: token -> id, the ids 0..N-1 each once."""
    vocab = read_small_json_object(path, MAX_VOCAB_FILE_BYTES,
                                   "not a JSON object of token -> id")
    problems, by_id = [], {}
    for token, value in vocab.items():
        if not _is_count(value) or value >= MAX_VOCAB_IDS:
            problems.append(f"token {token!r}: id {value!r} is not an id")
        elif value in by_id:
            problems.append(f"id {value} is used by {by_id[value]!r} and {token!r}")
        else:
            by_id[value] = token
    if not problems and len(by_id) != (max(by_id) + 1 if by_id else 0):
        missing = next(i for i in range(len(by_id) + 1) if i not in by_id)
        problems.append(f"no token has id {missing}")
    for special in CLIP_SPECIAL_TOKENS:
        if special not in vocab:
            problems.append(f"the special token {special} is missing")
    if clip is not None and by_id and max(by_id) >= clip["vocab_size"]:
        problems.append(f"ids go up to {max(by_id)} but CLIP's config.json has vocab_size "
                        f"{clip['vocab_size']}: the tokenizer of another model")
    return problems


def check_merges(path):
    """merges.txt as clip_vocab.cpp reads it: an optional #version line, then two symbols a
    line."""
    try:
        text = read_small(path, MAX_VOCAB_FILE_BYTES).decode("utf-8")
    except UnicodeDecodeError as e:
        raise CheckFailed(f"not UTF-8 text ({e})") from None
    lines = text.split("\n")
    first = 1 if text.startswith("#version") else 0
    for i in range(first, len(lines)):
        if i + 1 == len(lines) and not lines[i]:
            break
        if len(lines[i].split()) != 2:
            return [f"line {i + 1}: malformed merge (expected two symbols): {lines[i]!r}"]
    return []


# --- checking one file --------------------------------------------------------------------------

def new_hasher(algorithm, size):
    if algorithm == "sha256":
        return hashlib.sha256()
    hasher = hashlib.sha1()  # git's blob id: sha1 of "blob <size>\0" + content
    hasher.update(b"blob %d\0" % size)
    return hasher


def check_file(path, wanted, model, state, expected=None):
    """Problems of one file, as lines naming it. `expected` is (size, algorithm, digest) from the
    hub or the manifest, or None. `state` carries CLIP's parsed config from its config.json to
    the checks that need it."""
    label = shown(path)
    if not path.is_file():
        return [f"{label}: missing"]
    size = path.stat().st_size
    problems = []
    hasher = None
    if expected is not None:
        if size != expected[0]:
            problems.append(f"{label}: {size} bytes, the hub's file has {expected[0]}")
        else:
            hasher = new_hasher(expected[1], size)
    try:
        if wanted.role in ("gpt", "shape", "clip_weights"):
            clip = state.get("clip")
            if wanted.role == "clip_weights" and clip is None:
                problems.append(f"{label}: not checked: CLIP's config.json did not pass")
                return problems
            config_name = "CLIP's config.json" if wanted.role == "clip_weights" else \
                state.get("model_name", "the model YAML")
            found = check_checkpoint(path, wanted.role, model, clip, hasher, config_name)
        elif wanted.role == "clip_config":
            state["clip"], found = clip_text_config(path, model)
            if found:
                state["clip"] = None
        elif wanted.role == "vocab":
            found = check_vocab(path, state.get("clip"))
        else:
            found = check_merges(path)
        if hasher is not None and wanted.role not in ("gpt", "shape", "clip_weights"):
            hasher.update(path.read_bytes())
    except CheckFailed as e:
        if wanted.role == "clip_config":
            state["clip"] = None
        return problems + [f"{label}: {e}"]
    problems += [f"{label}: {p}" for p in found]
    if hasher is not None and hasher.hexdigest() != expected[2]:
        problems.append(f"{label}: {expected[1]} {hasher.hexdigest()} is not the hub's "
                        f"{expected[2]} (corrupted, or another version of the file)")
    return problems


# --- the hub ------------------------------------------------------------------------------------

def origin(url):
    from urllib.parse import urlsplit
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


def resolve_repo(repo, revision, files):
    """{filename: Remote} for `files` of `repo` at `revision`, all at one commit: the first
    file's metadata names the commit, the rest are asked for at it (a push in between cannot mix
    two versions). Sizes and checksums come from the hub's paths-info (the git blob id, or the
    LFS object's SHA-256), checked against each file's own metadata."""
    from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_url
    try:
        first = get_hf_file_metadata(hf_hub_url(repo, files[0], revision=revision))
        commit = first.commit_hash
        if not commit:
            raise UsageError(f"{repo}: the hub's answer names no commit (is HF_ENDPOINT a hub?)")
        infos = {i.path: i for i in HfApi().get_paths_info(repo, files, revision=commit)}
        remotes = {}
        for name in files:
            url = hf_hub_url(repo, name, revision=commit)
            meta = first if name == files[0] else get_hf_file_metadata(url)
            info = infos.get(name)
            if info is None or not hasattr(info, "blob_id"):
                raise UsageError(f"{repo}: no file {name} at {revision} ({commit})")
            lfs = info.lfs is not None
            algorithm, digest = ("sha256", info.lfs.sha256) if lfs else ("git-sha1", info.blob_id)
            if meta.size is not None and meta.size != info.size:
                raise UsageError(f"{repo}/{name}: the hub says {meta.size} bytes and {info.size}")
            # Where hf_hub_download would GET it: the redirect's target (a signed CDN URL) for
            # an LFS file, except a Xet-stored one, whose resolve URL is fetched and redirected.
            where = url if getattr(meta, "xet_file_data", None) else (meta.location or url)
            remotes[name] = Remote(commit, info.size, algorithm, digest.lower(), url, where, lfs)
        return remotes
    except UsageError:
        raise
    except Exception as e:  # huggingface_hub's HTTP errors, httpx's transport errors, offline mode
        raise UsageError(f"{repo} at {revision}: {type(e).__name__}: {e}\n  (HF_ENDPOINT: "
                         f"{os.environ.get('HF_ENDPOINT', 'https://huggingface.co')}; a gated "
                         "or private repository needs HF_TOKEN)") from None


def partial_path(directory, wanted, remote):
    # Keyed by the content's checksum: a partial download of another version is never resumed.
    return directory / PARTIAL_DIR / f"{wanted.dest.replace('/', '__')}.{remote.digest[:16]}.part"


def download(wanted, remote, part):
    """Downloads into `part`, resuming from its bytes (an LFS file's partial from an earlier
    run; huggingface_hub's own retries resume within this run). Not hf_hub_download: its
    temporary file is unique to the process and deleted when the download fails (huggingface_hub
    PR 4228), so an interrupted 7 GB download would start over in the next run."""
    from huggingface_hub import constants
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers
    # http_get writes what arrives a chunk at a time; an interruption loses the chunk in flight,
    # so smaller ones (10 MiB by default) keep more of a broken download.
    constants.DOWNLOAD_CHUNK_SIZE = min(constants.DOWNLOAD_CHUNK_SIZE, 1 << 20)
    headers = build_hf_headers()
    if origin(remote.url) != origin(remote.hub_url):
        # A signed CDN URL: the token stays on the hub (httpx drops it from redirects to
        # another origin too).
        headers.pop("authorization", None)
    part.parent.mkdir(parents=True, exist_ok=True)
    for stale in part.parent.glob(part.name.rsplit(".", 2)[0] + ".*.part"):
        if stale != part:
            print(f"  removing {shown(stale)}: a partial download of another version")
            stale.unlink()
    have = part.stat().st_size if part.exists() else 0
    # A small file may come compressed, and a range of compressed bytes cannot be appended;
    # a partial longer than the file cannot be its beginning.
    if not remote.lfs or have > remote.size:
        have = 0
    if have:
        print(f"  resuming at {human_bytes(have)} of {human_bytes(remote.size)}")
    with open(part, "r+b" if part.exists() else "w+b") as f:
        f.truncate(have)
        f.seek(have)
        try:
            http_get(remote.url, f, resume_size=have, headers=headers,
                     expected_size=remote.size, displayed_filename=wanted.filename)
        except KeyboardInterrupt:
            raise
        except Exception as e:  # the same variety as in resolve_repo
            f.flush()
            kept = part.stat().st_size
            raise UsageError(f"{wanted.repo}/{wanted.filename}: download failed after "
                             f"{human_bytes(kept)} of {human_bytes(remote.size)}: "
                             f"{type(e).__name__}: {e}\n  kept {shown(part)}: run again to "
                             "resume") from None


# --- DIR's own files ----------------------------------------------------------------------------

def load_manifest(directory):
    path = directory / MANIFEST
    if not path.exists():
        return {"format": MANIFEST_FORMAT, "files": {}, "written": {}}
    try:
        manifest = json.loads(path.read_text())
        if manifest.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"format {manifest.get('format')!r}")
        manifest.setdefault("files", {})
        manifest.setdefault("written", {})
        return manifest
    except (ValueError, OSError) as e:
        raise UsageError(f"{shown(path)}: unreadable ({e}); move it away to start afresh") \
            from None


def save_manifest(directory, manifest):
    path = directory / MANIFEST
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def sha256_of(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_owned(directory, name, text, manifest):
    """Writes DIR/name unless it was edited since this tool wrote it (its SHA-256 then differs
    from the manifest's record): that one is kept and the new text goes to name.new. Returns the
    path written."""
    path = directory / name
    data = text.encode()
    if path.exists():
        current = sha256_of(path)
        if current == hashlib.sha256(data).hexdigest():
            manifest["written"][name] = current
            return path
        if manifest["written"].get(name) != current:
            new = path.with_name(name + ".new")
            new.write_bytes(data)
            print(f"  kept {shown(path)}: it changed since fetch_models.py wrote it; the new "
                  f"one is {shown(new)}")
            return new
    tmp = path.with_name(name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    manifest["written"][name] = hashlib.sha256(data).hexdigest()
    return path


def server_yaml_text(template, version, model_name, device, why):
    """The template (models/cube3d-<version>-server.yaml) with the model section pointing at the
    files beside DIR/server.yaml and the device's settings; every substituted key must be in the
    template exactly once, so that a reworded template fails here, not at the server."""
    lines = template.read_text().splitlines()
    # The template's opening comment, up to its first blank line, is about itself (where it
    # looks for the weights, how to fetch them); ours replaces it.
    start = lines.index("") + 1 if "" in lines else 0
    body = lines[start:]
    settings = [("model", "config", f'"{model_name}"'),
                ("model", "gpt_weights", '"shape_gpt.safetensors"'),
                ("model", "shape_weights", '"shape_tokenizer.safetensors"'),
                ("model", "clip_model", f'"{CLIP_DIR}"'),
                ("model", "clip_vocab", f'"{CLIP_DIR}"')]
    settings += CPU_SETTINGS if device == "cpu" else CUDA_SETTINGS
    for section, key, value in settings:
        hits = [i for i, line in enumerate(body) if _is_key_line(body, i, section, key)]
        if len(hits) != 1:
            raise UsageError(f"{shown(template)}: expected one line setting "
                             f"{(section + '.') if section else ''}{key}, found {len(hits)}")
        line = body[hits[0]]
        indent = line[:len(line) - len(line.lstrip())]
        body[hits[0]] = f"{indent}{key}: {value}"
    date = datetime.date.today().isoformat()
    source = template.relative_to(ROOT) if template.is_relative_to(ROOT) else template
    head = [f"# cube3d-server for Cube 3D {version}, written by scripts/fetch_models.py on {date}",
            f"# from {source}: its paths point at the checked files beside this one",
            f"# (relative to this file's folder; {MANIFEST} records where each came from).",
            f"# Device: {device} ({why}).",
            "#   cube3d-server --config <this file>",
            "# A later fetch_models.py run rewrites this file, unless it was edited since: then",
            "# it writes server.yaml.new beside it.",
            ""]
    return "\n".join(head + body) + "\n"


def _is_key_line(lines, i, section, key):
    """Whether lines[i] sets `key` at the top level (section None) or directly in `section`."""
    line = lines[i]
    if section is None:
        return line.startswith(f"{key}:")
    if not re.match(rf"^\s+{re.escape(key)}:", line):
        return False
    for j in range(i - 1, -1, -1):
        if lines[j] and not lines[j].startswith((" ", "#")):
            return lines[j].rstrip() == f"{section}:"
    return False


def detect_device():
    """(device, why): cuda when a GPU is visible, cpu otherwise."""
    try:
        result = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        if result.returncode == 0 and "GPU" in result.stdout:
            return "cuda", "nvidia-smi -L lists a GPU"
        why = "nvidia-smi -L lists no GPU"
    except (OSError, subprocess.TimeoutExpired):
        why = "no nvidia-smi"
    try:
        import torch  # slow to import: only asked when nvidia-smi gave no answer
        if torch.cuda.is_available():
            return "cuda", "torch.cuda.is_available()"
    except ImportError:
        pass
    return "cpu", f"{why}, and torch sees no CUDA device (--device cuda to override)"


def server_binary():
    """cube3d-server: in CUBE3D_BIN_DIR, else this checkout's build/bin, else on PATH; None
    when there is none."""
    for folder in (os.environ.get("CUBE3D_BIN_DIR"), ROOT / "build" / "bin"):
        if folder and (Path(folder) / "cube3d-server").exists():
            return Path(folder) / "cube3d-server"
    found = shutil.which("cube3d-server")
    return Path(found) if found else None


def check_server_config(config):
    """Problems the server's own config check finds in the written config (none when no
    cube3d-server binary is at hand)."""
    binary = server_binary()
    if binary is None:
        print("  (no cube3d-server binary found: the config was not checked by the server)")
        return []
    result = subprocess.run([str(binary), "--config", str(config), "--print-config"],
                            capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        return [f"{shown(config)}: cube3d-server --print-config refuses it: "
                f"{(result.stderr or result.stdout).strip()}"]
    return []


# --- the run ------------------------------------------------------------------------------------

def model_yaml(args, directory):
    """The model YAML to check against: --model-config, else (--check-only) the copy in DIR
    that its server.yaml serves, else models/cube3d-<version>.yaml."""
    name = f"cube3d-{args.version}.yaml"
    path = Path(args.model_config) if args.model_config else ROOT / "models" / name
    if args.check_only and not args.model_config and (directory / name).exists():
        path = directory / name
    try:
        model = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise UsageError(f"{path}: cannot read the model YAML ({e})") from None
    if not isinstance(model, dict) or not isinstance(model.get("gpt_model"), dict) \
            or not isinstance(model.get("shape_model"), dict):
        raise UsageError(f"{path}: not a model YAML in the official layout (gpt_model:, "
                         "shape_model:)")
    return path, model


def expected_of(record):
    return (record["size"], record["algorithm"], record["digest"]) if record else None


def check_only(args, directory, files, model, model_path):
    """Checks DIR against its manifest: no request to the hub."""
    manifest = load_manifest(directory) if (directory / MANIFEST).exists() else None
    if manifest is None:
        print(f"fetch_models: no {shown(directory / MANIFEST)}: sizes and checksums cannot be "
              "compared with the hub's; checking the contents only")
    state = {"model_name": model_path.name}
    problems = []
    for wanted in files:
        path = directory / wanted.dest
        record = manifest["files"].get(wanted.dest) if manifest else None
        if manifest is not None and record is None and path.exists():
            problems.append(f"{shown(path)}: not in {MANIFEST} (not downloaded by this tool)")
        found = check_file(path, wanted, model, state, expected_of(record))
        if not path.exists():
            found = [f"{shown(path)}: missing (a run without --check-only downloads it)"]
        report(wanted, path, found, "checked")
        problems += found
    if not (directory / SERVER_YAML).exists():
        print(f"  note: no {shown(directory / SERVER_YAML)} (written by a run without "
              "--check-only)")
    return problems


def fetch(args, directory, files, model, model_path):
    directory.mkdir(parents=True, exist_ok=True)
    manifest = load_manifest(directory)
    revisions = {CUBE_REPOS[args.version]: args.revision, CLIP_REPO: args.clip_revision}
    remotes = {}
    for repo, revision in revisions.items():
        names = [w.filename for w in files if w.repo == repo]
        remotes[repo] = resolve_repo(repo, revision, names)
        print(f"fetch_models: {repo} at {revision} (commit {remotes[repo][names[0]].commit})")
    state = {"model_name": model_path.name}
    problems = []
    for wanted in files:
        remote = remotes[wanted.repo][wanted.filename]
        path = directory / wanted.dest
        expected = (remote.size, remote.algorithm, remote.digest)
        record = manifest["files"].get(wanted.dest)
        same = record is not None and record["digest"] == remote.digest
        if path.exists() and (same or record is None):
            # Installed (or put there by hand): check it where it is; never replace it.
            found = check_file(path, wanted, model, state, expected)
            if found and record is None:
                found.append(f"{shown(path)}: not downloaded by this tool; delete it to "
                             "download the hub's file")
            elif found:
                found.append(f"{shown(path)}: delete it to download it again")
            report(wanted, path, found, "up to date" if same else "adopted")
        else:
            if path.exists():
                print(f"  {wanted.dest}: the hub has another version; downloading it")
            part = partial_path(directory, wanted, remote)
            print(f"  {wanted.dest}: downloading {human_bytes(remote.size)} from "
                  f"{wanted.repo}", flush=True)
            download(wanted, remote, part)
            found = check_file(part, wanted, model, state, expected)
            if found:
                found.append(f"{shown(part)}: kept for inspection, not installed; delete it to "
                             "download it again")
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                os.replace(part, path)
            report(wanted, part if found else path, found, "downloaded")
        if not found:
            manifest["files"][wanted.dest] = {
                "repo": wanted.repo, "filename": wanted.filename,
                "revision": revisions[wanted.repo], "commit": remote.commit,
                "size": remote.size, "algorithm": remote.algorithm, "digest": remote.digest}
            save_manifest(directory, manifest)
        problems += found
    if problems:
        return problems

    written = write_owned(directory, model_path.name, model_path.read_text(), manifest)
    if written.name != model_path.name:
        return [f"{shown(directory / model_path.name)}: edited since fetch_models.py copied it "
                f"from {shown(model_path)}; compare it with {shown(written)} and keep one"]
    device, why = (args.device, f"--device {args.device}") if args.device != "auto" else \
        detect_device()
    template = ROOT / "models" / f"cube3d-{args.version}-server.yaml"
    text = server_yaml_text(template, args.version, model_path.name, device, why)
    config = write_owned(directory, SERVER_YAML, text, manifest)
    save_manifest(directory, manifest)
    problems = check_server_config(config)
    if problems:
        return problems
    print_next_steps(args.version, config, device)
    return []


def report(wanted, path, problems, what):
    size = human_bytes(path.stat().st_size) if path.exists() else "-"
    status = "FAILED" if problems else "ok"
    print(f"  {wanted.dest:42} {size:>10}  {what}: {status}", flush=True)
    for p in problems:
        print(f"fetch_models: {p}", file=sys.stderr, flush=True)


def print_next_steps(version, config, device):
    binary = server_binary()
    server = shown(binary) if binary else "cube3d-server"
    client_path = binary.with_name("cube3d-client") if binary else None
    client = shown(client_path) if client_path and client_path.exists() else "cube3d-client"
    bbox = " --bbox 1 2 1" if version == "v0.5" else ""
    # The client's own default (10 minutes) is shorter than a CPU generation may take.
    timeout = " --timeout-ms 3600000" if device == "cpu" else ""
    print(f"\nServe it:\n  {server} --config {shown(config)}")
    print(f"Call it (from another shell, once it logs that it is serving):\n  {client} --prompt "
          f"\"a wooden chair\"{bbox}{timeout} --out chair.glb")
    if device == "cpu":
        print("On a CPU a mesh takes minutes (a GPU: seconds); the config gives requests an hour.")


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog="Exit status: 0 ok, 1 a check failed, 2 the run could not be made.")
    parser.add_argument("version", choices=sorted(CUBE_REPOS), help="the Cube 3D release")
    parser.add_argument("dir", nargs="?", help="where the files go (default: "
                        ".cache/models/cube3d-<version> of this checkout)")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                        help="device of the written server.yaml (auto: cuda when a GPU is seen)")
    parser.add_argument("--check-only", action="store_true",
                        help="check DIR against its manifest, download nothing, ask no hub")
    parser.add_argument("--model-config", metavar="F",
                        help="the model YAML to check against and serve (default: "
                        "models/cube3d-<version>.yaml)")
    parser.add_argument("--revision", default="main",
                        help="branch, tag or commit of Roblox/cube3d-<version> (default main)")
    parser.add_argument("--clip-revision", default="main",
                        help=f"branch, tag or commit of {CLIP_REPO} (default main)")
    args = parser.parse_args(argv)
    directory = Path(args.dir) if args.dir else ROOT / ".cache" / "models" / \
        f"cube3d-{args.version}"
    files = wanted_files(args.version)
    try:
        model_path, model = model_yaml(args, directory)
        if args.check_only:
            problems = check_only(args, directory, files, model, model_path)
        else:
            directory.mkdir(parents=True, exist_ok=True)
            with open(directory / LOCK_FILE, "w") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise UsageError(f"{shown(directory)}: another fetch_models.py run is "
                                     "using it") from None
                problems = fetch(args, directory, files, model, model_path)
    except UsageError as e:
        print(f"fetch_models: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nfetch_models: interrupted; run again to resume", file=sys.stderr)
        return 2
    if problems:
        print(f"fetch_models: {len(problems)} problem(s) in {shown(directory)} (listed above)",
              file=sys.stderr)
        return 1
    if args.check_only:
        print(f"fetch_models: {shown(directory)}: every file checked out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
