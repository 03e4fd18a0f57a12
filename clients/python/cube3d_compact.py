"""Reads cube3d-server's compact mesh encoding (MESH_FORMAT_COMPACT; docs/mesh-encoding.md).

The reference reader for Python callers: standard library only (numpy is not needed), and as
strict as the server's own decoder (src/mesh/compact_mesh.cpp): a payload that breaks a rule of
the spec raises ValueError naming the field and its byte offset.

    import base64, cube3d_compact
    mesh = cube3d_compact.decode(base64.b64decode(answer["encoded"]))
    mesh.vertices  # [x0, y0, z0, x1, ...] floats
    mesh.indices   # [a0, b0, c0, a1, ...] three per triangle, counter-clockwise from outside
    mesh.normals   # [] or xyz per vertex
"""

import math
import struct
from dataclasses import dataclass, field
from typing import List, Tuple

MAGIC = b"C3DM"
VERSION = 1
HEADER_BYTES = 40
OFFSET_VERSION = 4
OFFSET_FLAGS = 5
OFFSET_HEADER_BYTES = 6
OFFSET_VERTEX_COUNT = 8
OFFSET_TRIANGLE_COUNT = 12
OFFSET_BOUNDS_MIN = 16
OFFSET_BOUNDS_MAX = 28
FLAG_QUANTIZED = 1
FLAG_INDICES32 = 2
FLAG_NORMALS = 4
KNOWN_FLAGS = 7
MAX_U16_VERTICES = 65536
QUANT_STEPS = 65535
NORMAL_SCALE = 127


@dataclass
class CompactMesh:
    flags: int
    bounds_min: Tuple[float, float, float]
    bounds_max: Tuple[float, float, float]
    vertices: List[float] = field(default_factory=list)
    indices: List[int] = field(default_factory=list)
    normals: List[float] = field(default_factory=list)

    @property
    def quantized(self) -> bool:
        return bool(self.flags & FLAG_QUANTIZED)


def _align4(n: int) -> int:
    return (n + 3) & ~3


def layout(vertex_count: int, triangle_count: int, flags: int) -> Tuple[int, int, int, int]:
    """(positions, normals or 0, indices, end): each section's byte offset and the length."""
    positions = HEADER_BYTES
    nxt = _align4(positions + vertex_count * 3 * (2 if flags & FLAG_QUANTIZED else 4))
    normals = 0
    if flags & FLAG_NORMALS:
        normals = nxt
        nxt = _align4(nxt + vertex_count * 3)
    indices = nxt
    end = _align4(indices + triangle_count * 3 * (4 if flags & FLAG_INDICES32 else 2))
    return positions, normals, indices, end


def _bad(what: str, offset: int) -> ValueError:
    return ValueError(f"compact mesh: {what} (byte offset {offset})")


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def decode(data: bytes) -> CompactMesh:
    data = bytes(data)
    if len(data) < HEADER_BYTES:
        raise _bad(f"a header is {HEADER_BYTES} bytes, the payload {len(data)}", 0)
    if data[:4] != MAGIC:
        raise _bad('magic is not "C3DM"', 0)
    if data[OFFSET_VERSION] != VERSION:
        raise _bad(f"version {data[OFFSET_VERSION]}, this reader knows version {VERSION}",
                   OFFSET_VERSION)
    flags = data[OFFSET_FLAGS]
    if flags & ~KNOWN_FLAGS:
        raise _bad(f"flags {flags} set a bit this version does not define", OFFSET_FLAGS)
    (header_bytes,) = struct.unpack_from("<H", data, OFFSET_HEADER_BYTES)
    if header_bytes != HEADER_BYTES:
        raise _bad(f"header size {header_bytes}, version 1's is {HEADER_BYTES}",
                   OFFSET_HEADER_BYTES)
    vertex_count, triangle_count = struct.unpack_from("<II", data, OFFSET_VERTEX_COUNT)
    positions_at, normals_at, indices_at, end = layout(vertex_count, triangle_count, flags)
    if end != len(data):
        raise _bad(f"{vertex_count} vertices and {triangle_count} triangles with flags {flags} "
                   f"take {end} bytes, the payload has {len(data)}", OFFSET_VERTEX_COUNT)
    lo = struct.unpack_from("<3f", data, OFFSET_BOUNDS_MIN)
    hi = struct.unpack_from("<3f", data, OFFSET_BOUNDS_MAX)
    for a in range(3):
        if not (math.isfinite(lo[a]) and math.isfinite(hi[a]) and lo[a] <= hi[a]):
            raise _bad(f"bounds are not finite with min <= max on axis {a}",
                       OFFSET_BOUNDS_MIN + 4 * a)

    def check_zero(start: int, stop: int) -> None:
        for at in range(start, stop):
            if data[at] != 0:
                raise _bad("padding is not zero", at)

    mesh = CompactMesh(flags=flags, bounds_min=lo, bounds_max=hi)
    n = vertex_count * 3
    if flags & FLAG_QUANTIZED:
        raw = struct.unpack_from(f"<{n}H", data, positions_at)
        # In double, rounded once to float32 and kept within the bounds: what the C++ reader
        # gives.
        steps = [(hi[a] - lo[a]) / QUANT_STEPS for a in range(3)]
        mesh.vertices = [min(max(_f32(lo[i % 3] + q * steps[i % 3]), lo[i % 3]), hi[i % 3])
                         for i, q in enumerate(raw)]
        section_end = positions_at + 2 * n
    else:
        mesh.vertices = list(struct.unpack_from(f"<{n}f", data, positions_at))
        for i, p in enumerate(mesh.vertices):
            if not lo[i % 3] <= p <= hi[i % 3]:  # NaN fails too
                raise _bad("position outside the header's bounds", positions_at + 4 * i)
        section_end = positions_at + 4 * n
    if flags & FLAG_NORMALS:
        check_zero(section_end, normals_at)
        raw = struct.unpack_from(f"<{n}b", data, normals_at)
        mesh.normals = [max(q / NORMAL_SCALE, -1.0) for q in raw]
        section_end = normals_at + n
    check_zero(section_end, indices_at)
    count = triangle_count * 3
    wide = bool(flags & FLAG_INDICES32)
    mesh.indices = list(struct.unpack_from(f"<{count}{'I' if wide else 'H'}", data, indices_at))
    for i, index in enumerate(mesh.indices):
        if index >= vertex_count:
            raise _bad(f"index {index} of {vertex_count} vertices",
                       indices_at + i * (4 if wide else 2))
    check_zero(indices_at + count * (4 if wide else 2), end)
    return mesh
