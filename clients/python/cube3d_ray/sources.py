"""Reading the prompts: a text file, JSON lines or Parquet, on any filesystem pyarrow knows (a
local path, or a URI: s3://, gs://, hdfs://, file://).

  * text (any other name): one prompt a line, white space around it trimmed; blank lines and
    lines whose first non-blank character is '#' are skipped; a line starting with '{' is a JSON
    object as in JSON lines. The same file cube3d-generate --prompts-file reads.
  * JSON lines (.jsonl, .ndjson, .json): one JSON object a line (blank lines skipped): "prompt"
    and any of seed, guidance_scale, top_p, bounding_box ({x, y, z} or [x, y, z]), resolution,
    target_face_count, format, mesh_profile (the HTTP API's camelCase names are accepted too).
  * Parquet (.parquet, or a folder of Parquet files): a column per field, the same names.

Every row becomes a Source: its position (line number from 1, or row number from 1 for Parquet)
and either its request or why it is not one.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from .requests import MeshRequest, RequestDefaults, RequestError, request_from_mapping

JSON_SUFFIXES = (".jsonl", ".ndjson", ".json")
PARQUET_SUFFIXES = (".parquet", ".pq")


@dataclass(frozen=True)
class Source:
    line: int             # 1-based line (text, JSON lines) or row (Parquet)
    text: str             # the line as read, or the row as JSON: for reports
    request: MeshRequest | None
    error: str | None     # why the row is not a request


def resolve(uri: str, filesystem: pafs.FileSystem | None = None) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path) of a local path or a URI pyarrow knows."""
    if filesystem is not None:
        return filesystem, uri
    if "://" in uri:
        fs, path = pafs.FileSystem.from_uri(uri)
        return fs, path
    import os
    return pafs.LocalFileSystem(), os.path.abspath(uri)


def kind_of(path: str, fs: pafs.FileSystem) -> str:
    """"parquet", "jsonl" or "text"."""
    lowered = path.lower().rstrip("/")
    if lowered.endswith(PARQUET_SUFFIXES):
        return "parquet"
    if lowered.endswith(JSON_SUFFIXES):
        return "jsonl"
    if fs.get_file_info(path).type == pafs.FileType.Directory:
        return "parquet"
    return "text"


def parse_line(number: int, line: str, defaults: RequestDefaults, json_only: bool) -> Source | None:
    """One line's Source, or None for a blank line (and, in text, a comment)."""
    content = line.strip()
    if not content or (not json_only and content.startswith("#")):
        return None
    try:
        if json_only or content.startswith("{"):
            try:
                row = json.loads(content)
            except json.JSONDecodeError as e:
                raise RequestError(f"malformed JSON: {e.msg} at column {e.colno}") from None
            if not isinstance(row, dict):
                raise RequestError("a JSON line must be an object")
            request = request_from_mapping(row, defaults)
        else:
            request = request_from_mapping({"prompt": content}, defaults)
    except RequestError as e:
        return Source(number, line, None, str(e))
    return Source(number, line, request, None)


def read_sources(uri: str, defaults: RequestDefaults,
                 filesystem: pafs.FileSystem | None = None) -> list[Source]:
    fs, path = resolve(uri, filesystem)
    kind = kind_of(path, fs)
    if kind == "parquet":
        return rows_to_sources(pq.read_table(path, filesystem=fs), defaults)
    with fs.open_input_stream(path) as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RequestError(f"{uri}: not UTF-8 (byte offset {e.start})") from None
    out = []
    for number, line in enumerate(text.split("\n"), start=1):
        source = parse_line(number, line.rstrip("\r"), defaults, kind == "jsonl")
        if source is not None:
            out.append(source)
    return out


def rows_to_sources(table: pa.Table, defaults: RequestDefaults) -> list[Source]:
    """A table's rows (columns named as the fields) as Sources."""
    out = []
    for number, row in enumerate(table.to_pylist(), start=1):
        text = json.dumps(row, default=str, ensure_ascii=False)
        try:
            out.append(Source(number, text, request_from_mapping(row, defaults), None))
        except RequestError as e:
            out.append(Source(number, text, None, str(e)))
    return out


def sources_from_prompts(prompts: Sequence[str | Mapping[str, Any]],
                         defaults: RequestDefaults) -> list[Source]:
    """Sources of prompts given in Python (strings, or dicts of fields)."""
    out = []
    for number, item in enumerate(prompts, start=1):
        row: dict[str, Any] = {"prompt": item} if isinstance(item, str) else dict(item)
        text = item if isinstance(item, str) else json.dumps(item, default=str)
        try:
            out.append(Source(number, text, request_from_mapping(row, defaults), None))
        except RequestError as e:
            out.append(Source(number, text, None, str(e)))
    return out
