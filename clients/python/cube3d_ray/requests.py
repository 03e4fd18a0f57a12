"""What one mesh is made from, and its stable name.

A request is the prompt with the parameters a prompts file, a JSON line or a Parquet row may set
(seed, guidance scale, top-p, bounding box, resolution, face target, format, mesh profile), with
the run's defaults filled in. Its key is the SHA-256 of a canonical JSON text of those fields and
the model tag (`canonical_json`); the mesh file is named by the key's first 20 hex digits and the
format's extension, so the same request always gets the same name and any change another one.
Unset fields stay unset (the server's defaults apply, which belong to the model tag's server).
Numbers that travel as float32 on the wire (guidance scale, top-p, the box) are hashed as the
float32 they become, so 0.9 from JSON and 0.9 from a float32 Parquet column are one request.
"""
from __future__ import annotations

import hashlib
import json
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The file name's digits (80 bits, as cube3d-generate's batch mode names its files).
NAME_DIGITS = 20
# Format name -> file extension. "compact" is docs/mesh-encoding.md's encoding; "raw" writes the
# vertex and index arrays as a NumPy .npz (vertices float32 [n, 3], indices uint32 [m, 3]).
FORMATS = {"glb": "glb", "obj": "obj", "ply": "ply", "compact": "c3dm", "raw": "npz"}
MESH_PROFILES = ("none", "roblox")
MAX_SEED = 2**64 - 1
MIN_RESOLUTION, MAX_RESOLUTION = 1, 9

# The accepted spellings of each field: the HTTP API's JSON names, snake case, and short ones.
ALIASES = {
    "prompt": "prompt",
    "seed": "seed",
    "guidance_scale": "guidance_scale", "guidanceScale": "guidance_scale",
    "top_p": "top_p", "topP": "top_p",
    "bounding_box": "bounding_box", "boundingBox": "bounding_box", "bbox": "bounding_box",
    "resolution": "resolution_base", "resolution_base": "resolution_base",
    "resolutionBase": "resolution_base",
    "target_face_count": "target_face_count", "targetFaceCount": "target_face_count",
    "target_faces": "target_face_count",
    "format": "format",
    "mesh_profile": "mesh_profile", "meshProfile": "mesh_profile",
}


class RequestError(ValueError):
    """A row that is not a valid request (the message says which field and why)."""


def float32(x: float) -> float:
    """x as the float32 the wire carries, back as a Python float."""
    value: float = struct.unpack("<f", struct.pack("<f", x))[0]
    return value


@dataclass(frozen=True, kw_only=True)
class MeshParameters:
    """A request's fields besides its prompt, keyword-only (None: unset, the server's default)."""
    seed: int | None = None
    guidance_scale: float | None = None
    top_p: float | None = None
    bounding_box: tuple[float, float, float] | None = None
    resolution_base: int | None = None
    target_face_count: int | None = None
    format: str = "glb"
    mesh_profile: str | None = None


@dataclass(frozen=True)
class MeshRequest(MeshParameters):
    """MeshRequest(prompt, seed=..., ...): the prompt and its parameters."""
    prompt: str

    def fields(self) -> dict[str, Any]:
        """The request's fields, float32 ones as float32, unset ones None."""
        return {
            "prompt": self.prompt,
            "seed": self.seed,
            "guidance_scale": None if self.guidance_scale is None else float32(self.guidance_scale),
            "top_p": None if self.top_p is None else float32(self.top_p),
            "bounding_box": None if self.bounding_box is None
            else [float32(s) for s in self.bounding_box],
            "resolution_base": self.resolution_base,
            "target_face_count": self.target_face_count,
            "format": self.format,
            "mesh_profile": self.mesh_profile,
        }

    def canonical_json(self, model: str) -> str:
        """What the key hashes: {"v": 1, "model": ..., the fields}, keys sorted, no spaces."""
        return json.dumps({"v": 1, "model": model, **self.fields()}, sort_keys=True,
                          separators=(",", ":"), ensure_ascii=False, allow_nan=False)

    def key(self, model: str) -> str:
        return hashlib.sha256(self.canonical_json(model).encode()).hexdigest()

    def file_name(self, model: str) -> str:
        return self.key(model)[:NAME_DIGITS] + "." + FORMATS[self.format]

    @staticmethod
    def from_canonical_json(text: str) -> tuple[str, MeshRequest]:
        """(model, request) back from canonical_json's text."""
        d = json.loads(text)
        box = d.get("bounding_box")
        return d["model"], MeshRequest(
            prompt=d["prompt"], seed=d.get("seed"), guidance_scale=d.get("guidance_scale"),
            top_p=d.get("top_p"), bounding_box=None if box is None else (box[0], box[1], box[2]),
            resolution_base=d.get("resolution_base"),
            target_face_count=d.get("target_face_count"), format=d.get("format", "glb"),
            mesh_profile=d.get("mesh_profile"))


@dataclass(frozen=True, kw_only=True)
class RequestDefaults(MeshParameters):
    """The run's values for the fields a row leaves out (None: the server's default)."""

    def check(self) -> None:
        """RequestError when a default is not a valid value of its field."""
        row: dict[str, Any] = {"prompt": "-"}
        if self.bounding_box is not None:
            row["bounding_box"] = list(self.bounding_box)
        request_from_mapping(row, self)


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError(f"{name} must be a number, got {value!r}")
    x = float(value)
    if not math.isfinite(x):
        raise RequestError(f"{name} must be finite")
    return x


def _whole(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise RequestError(f"{name} must be a whole number, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, str) and value.isdigit():  # protobuf's JSON writes uint64 as a string
        return int(value)
    raise RequestError(f"{name} must be a whole number, got {value!r}")


def _box(value: Any) -> tuple[float, float, float]:
    if isinstance(value, Mapping):
        unknown = set(value) - {"x", "y", "z"}
        if unknown:
            raise RequestError(f"bounding_box: unknown key {sorted(unknown)[0]!r} (x, y, z)")
        missing = [a for a in "xyz" if a not in value]
        if missing:
            raise RequestError(f"bounding_box.{missing[0]} is missing")
        sides = [value["x"], value["y"], value["z"]]
    elif isinstance(value, (list, tuple)) and len(value) == 3:
        sides = list(value)
    elif hasattr(value, "tolist") and len(value) == 3:  # a NumPy array from a Parquet list column
        sides = list(value.tolist())
    else:
        raise RequestError(f"bounding_box must be {{x, y, z}} or [x, y, z], got {value!r}")
    out = tuple(_number(s, "bounding_box side") for s in sides)
    if any(s <= 0 for s in out):
        raise RequestError("bounding_box: each side must be positive")
    return (out[0], out[1], out[2])


def request_from_mapping(row: Mapping[str, Any], defaults: RequestDefaults) -> MeshRequest:
    """A JSON object's or a Parquet row's request, the defaults filled in. A key that is not a
    known field is an error (a misspelt field must not be ignored); None (JSON null, a Parquet
    null) counts as absent."""
    values: dict[str, Any] = {}
    for key, value in row.items():
        name = ALIASES.get(key)
        if name is None:
            raise RequestError(f"unknown field {key!r} (known: prompt, seed, guidance_scale, "
                               f"top_p, bounding_box, resolution, target_face_count, format, "
                               f"mesh_profile)")
        if value is not None:
            if name in values:
                raise RequestError(f"{key!r}: {name} given twice")
            values[name] = value
    prompt = values.get("prompt")
    if not isinstance(prompt, str):
        raise RequestError("prompt is missing" if prompt is None else "prompt must be a string")
    prompt = prompt.strip()
    if not prompt:
        raise RequestError("prompt is empty")

    seed = values.get("seed", defaults.seed)
    if seed is not None:
        seed = _whole(seed, "seed")
        if not 0 <= seed <= MAX_SEED:
            raise RequestError("seed must be in [0, 2^64)")
    guidance = values.get("guidance_scale", defaults.guidance_scale)
    if guidance is not None:
        guidance = _number(guidance, "guidance_scale")
        if guidance < 0:
            raise RequestError("guidance_scale must be >= 0")
    top_p = values.get("top_p", defaults.top_p)
    if top_p is not None:
        top_p = _number(top_p, "top_p")
        if not 0 < top_p <= 1:
            raise RequestError("top_p must be in (0, 1]")
    box = values.get("bounding_box")
    box = _box(box) if box is not None else defaults.bounding_box
    resolution = values.get("resolution_base", defaults.resolution_base)
    if resolution is not None:
        resolution = _whole(resolution, "resolution")
        if not MIN_RESOLUTION <= resolution <= MAX_RESOLUTION:
            raise RequestError(f"resolution must be in [{MIN_RESOLUTION}, {MAX_RESOLUTION}]")
    faces = values.get("target_face_count", defaults.target_face_count)
    if faces is not None:
        faces = _whole(faces, "target_face_count")
        if not 1 <= faces < 2**32:
            raise RequestError("target_face_count must be in [1, 2^32)")
    fmt = values.get("format", defaults.format)
    if not isinstance(fmt, str) or fmt.lower() not in FORMATS:
        raise RequestError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    profile = values.get("mesh_profile", defaults.mesh_profile)
    if profile is not None and (not isinstance(profile, str)
                                or profile.lower() not in MESH_PROFILES):
        raise RequestError(f"mesh_profile must be none or roblox, got {profile!r}")
    return MeshRequest(prompt=prompt, seed=seed, guidance_scale=guidance, top_p=top_p,
                       bounding_box=box, resolution_base=resolution, target_face_count=faces,
                       format=fmt.lower(),
                       mesh_profile=None if profile is None else profile.lower())
