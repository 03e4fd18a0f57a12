"""The manifest: a Parquet dataset under <out>/manifest/, one row per request handled (a file per
block, written as the block comes back, so a run that stops half-way has kept the rows of what it
finished; pyarrow.parquet.read_table(<out>/manifest) or ray.data.read_parquet read it whole).
Columns (SCHEMA):

  key, file, status ("ok" | "error"), line, prompt, request (the canonical JSON the key hashes),
  seed, guidance_scale, top_p, bounding_box, resolution_base, format, target_face_count,
  mesh_profile (what made the mesh: the server's effective parameters, or for an error the
  request's), model (the run's model tag), model_name, model_digest (the weights' SHA-256, from
  the server), server_version, bytes, vertices, faces, queue_ms, text_encoding_ms, prefill_ms,
  decode_ms, mesh_ms, server_ms (the server's timings), call_ms (the call as the actor saw it,
  attempts and back-off included), write_ms, attempts, error_code, error, request_id, reused
  (the file was there, written by an earlier attempt, and was not written again), worker
  (host:pid of the actor), run_id, finished_at. A file per block: <run_id>-<its first key's
  first 16 hex digits>.parquet (written whole: manifest.write_block).

A key's row is its latest (finished_at); `latest` reads them. The plan (plan()) of a run skips
the keys whose latest row is ok with its file present, and those that failed for good (an
invalid request: INVALID_ARGUMENT and the like) unless asked to retry them; every other request
is made, each distinct key once.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .output import OutputLocation
from .requests import MeshRequest
from .sources import Source

SCHEMA = pa.schema([
    ("key", pa.string()), ("file", pa.string()), ("status", pa.string()), ("line", pa.int64()),
    ("prompt", pa.string()), ("request", pa.string()),
    ("seed", pa.uint64()), ("guidance_scale", pa.float64()), ("top_p", pa.float64()),
    ("bounding_box", pa.list_(pa.float64())), ("resolution_base", pa.int32()),
    ("format", pa.string()), ("target_face_count", pa.int64()), ("mesh_profile", pa.string()),
    ("model", pa.string()), ("model_name", pa.string()), ("model_digest", pa.string()),
    ("server_version", pa.string()),
    ("bytes", pa.int64()), ("vertices", pa.int64()), ("faces", pa.int64()),
    ("queue_ms", pa.float64()), ("text_encoding_ms", pa.float64()), ("prefill_ms", pa.float64()),
    ("decode_ms", pa.float64()), ("mesh_ms", pa.float64()), ("server_ms", pa.float64()),
    ("call_ms", pa.float64()), ("write_ms", pa.float64()),
    ("attempts", pa.int32()), ("error_code", pa.string()), ("error", pa.string()),
    ("request_id", pa.string()), ("reused", pa.bool_()), ("worker", pa.string()),
    ("run_id", pa.string()), ("finished_at", pa.timestamp("ms", tz="UTC")),
])

# What the actors take: one row per request to make (or to record as invalid).
TODO_SCHEMA = pa.schema([("key", pa.string()), ("file", pa.string()), ("line", pa.int64()),
                         ("request", pa.string()), ("invalid", pa.string())])

# gRPC codes that the same request would get again: not retried, and a rerun skips them (unless
# told to retry failures). Every other code (UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED,
# INTERNAL, ...) is retried, up to the attempts allowed, and again by a rerun.
PERMANENT_CODES = frozenset({"INVALID_ARGUMENT", "PERMISSION_DENIED", "FAILED_PRECONDITION",
                             "OUT_OF_RANGE", "UNIMPLEMENTED", "UNAUTHENTICATED", "NOT_FOUND",
                             "ALREADY_EXISTS"})


def read(location: OutputLocation) -> pa.Table:
    """Every manifest row written so far (an empty table when there is none)."""
    fs = location.filesystem
    from pyarrow import fs as pafs
    info = fs.get_file_info(location.manifest_path)
    if info.type != pafs.FileType.Directory:
        return SCHEMA.empty_table()
    selector = pafs.FileSelector(location.manifest_path, recursive=True)
    files = sorted(i.path for i in fs.get_file_info(selector)
                   if i.type == pafs.FileType.File and i.path.endswith(".parquet"))
    if not files:
        return SCHEMA.empty_table()
    tables = [pq.read_table(path, filesystem=fs, schema=SCHEMA) for path in files]
    return pa.concat_tables(tables)


def latest(table: pa.Table) -> dict[str, dict[str, Any]]:
    """key -> its latest row."""
    rows: dict[str, dict[str, Any]] = {}
    for row in table.to_pylist():
        old = rows.get(row["key"])
        if old is None or (row["finished_at"] or 0) >= (old["finished_at"] or 0):
            rows[row["key"]] = row
    return rows


def invalid_key(source: Source) -> str:
    import hashlib
    return hashlib.sha256(("invalid\n" + source.text).encode()).hexdigest()


@dataclass
class Plan:
    todo: list[dict[str, Any]] = field(default_factory=list)  # TODO_SCHEMA rows
    done: int = 0          # ok in the manifest, file present: skipped
    failed_before: int = 0  # failed for good in an earlier run: skipped
    duplicates: int = 0    # rows whose request an earlier row already asks for
    missing_files: int = 0  # ok in the manifest but the file is gone: made again

    @property
    def table(self) -> pa.Table:
        return pa.Table.from_pylist(self.todo, schema=TODO_SCHEMA)


def plan(sources: Iterable[Source], model: str, rows: dict[str, dict[str, Any]],
         files: set[str], retry_failed: bool = False) -> Plan:
    """What a run has to do: see the module's docstring."""
    out = Plan()
    seen: set[str] = set()
    for source in sources:
        if source.request is None:
            key, name, request = invalid_key(source), None, None
        else:
            request = source.request.canonical_json(model)
            key, name = source.request.key(model), source.request.file_name(model)
        if key in seen:
            out.duplicates += 1
            continue
        seen.add(key)
        row = rows.get(key)
        if row is not None and row["status"] == "ok":
            if name is not None and name in files:
                out.done += 1
                continue
            out.missing_files += 1
        elif row is not None and row["error_code"] in PERMANENT_CODES and not retry_failed:
            out.failed_before += 1
            continue
        out.todo.append({"key": key, "file": name, "line": source.line, "request": request,
                         "invalid": source.error if source.request is None else None})
    return out


def batches(todo: pa.Table, size: int) -> Sequence[pa.Table]:
    """The to-do table cut into blocks of `size` rows: one Ray Data block (hence one actor call)
    each, so that every actor of the pool gets work."""
    return [todo.slice(i, size) for i in range(0, todo.num_rows, size)]


def request_of(row: dict[str, Any]) -> tuple[str, MeshRequest]:
    model, request = MeshRequest.from_canonical_json(row["request"])
    return model, request


def write_block(location: OutputLocation, run_id: str, rows: pa.Table) -> str:
    """Writes one block's rows as <manifest>/<run_id>-<first key>.parquet (on a local
    filesystem through a temporary file renamed over the name, so that a reader never sees half
    a file); returns its path."""
    fs = location.filesystem
    fs.create_dir(location.manifest_path, recursive=True)
    first = min(rows.column("key").to_pylist())
    path = f"{location.manifest_path}/{run_id}-{first[:16]}.parquet"
    table = rows.cast(SCHEMA)
    if location.local:
        import os
        temporary = f"{path}.tmp.{os.getpid()}"
        pq.write_table(table, temporary)
        os.replace(temporary, path)
    else:
        pq.write_table(table, path, filesystem=fs)
    return path
