"""The actor of the pool: map_batches(MeshWorker, ...) in pipeline.py.

Each actor reaches one cube3d-server (its own, started in __init__, or a fleet's address) and
turns a block of to-do rows (manifest.TODO_SCHEMA) into manifest rows (manifest.SCHEMA): every
request of the block is sent at once (up to max_in_flight), so that the server's own batching
fills its buckets, and each answer's file is written as it comes (output.write_once). A request
that fails with a code worth retrying is tried again with back-off, up to max_attempts; one whose
file is already there (a batch retried after its actor died) is not sent, and its row is made
from the file. When the actor's own server has died (a crash, a device fault's exit 70) it is
started again, up to max_server_restarts times.
"""
from __future__ import annotations

import os
import random
import socket
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import grpc
import pyarrow as pa

from . import meshfiles, rpc
from .manifest import PERMANENT_CODES, SCHEMA, request_of
from .output import OutputLocation
from .requests import MeshRequest
from .server import LocalServer, ServerSpec


@dataclass(frozen=True)
class WorkerSettings:
    server: ServerSpec
    output: OutputLocation
    run_id: str
    max_in_flight: int = 16
    max_attempts: int = 3
    timeout_s: float = 600.0
    priority: str | None = None       # "batch" or "interactive" (None: the server's default)
    expected_digest: str | None = None  # the weights the folder's meshes were made with
    max_server_restarts: int = 3
    backoff_s: float = 0.5            # first retry's delay, doubling, with jitter


class ModelMismatch(RuntimeError):
    """The server's weights are not those the output folder's meshes were made with."""


def _ms(start: float) -> float:
    return (time.monotonic() - start) * 1000.0


class MeshWorker:
    def __init__(self, settings: WorkerSettings) -> None:
        self.settings = settings
        self.worker = f"{socket.gethostname()}:{os.getpid()}"
        self.server: LocalServer | None = None
        self._lock = threading.Lock()
        self._server_restarts = 0
        if settings.server.address is not None:
            target = settings.server.address
        else:
            self.server = LocalServer(settings.server)
            target = self.server.start()
        self._connect(target)
        self.pool = ThreadPoolExecutor(max_workers=max(1, settings.max_in_flight),
                                       thread_name_prefix="cube3d-call")
        settings.output.make()

    def _connect(self, target: str) -> None:
        self.channel = rpc.open_channel(target, self.settings.server.root_certificates())
        self.call = rpc.generate_mesh_call(self.channel)

    def __call__(self, batch: pa.Table) -> pa.Table:
        rows = batch.to_pylist()
        results = list(self.pool.map(self._one, rows))
        return pa.Table.from_pylist(results, schema=SCHEMA)

    # -- one request --------------------------------------------------------------------------

    def _row(self, todo: dict[str, Any], request: MeshRequest | None, model: str) -> dict[str, Any]:
        """A manifest row with the request's own fields (overwritten by the effective ones)."""
        fields = request.fields() if request is not None else {}
        return {
            "key": todo["key"], "file": todo["file"], "status": "error", "line": todo["line"],
            "prompt": fields.get("prompt"), "request": todo["request"],
            "seed": fields.get("seed"), "guidance_scale": fields.get("guidance_scale"),
            "top_p": fields.get("top_p"), "bounding_box": fields.get("bounding_box"),
            "resolution_base": fields.get("resolution_base"), "format": fields.get("format"),
            "target_face_count": fields.get("target_face_count"),
            "mesh_profile": fields.get("mesh_profile"), "model": model,
            "attempts": 0, "reused": False, "worker": self.worker,
            "run_id": self.settings.run_id,
        }

    def _one(self, todo: dict[str, Any]) -> dict[str, Any]:
        if todo["invalid"] is not None:
            row = self._row(todo, None, "")
            row.update(error_code="INVALID_ARGUMENT", error=todo["invalid"],
                       finished_at=datetime.now(timezone.utc))
            return row
        model, request = request_of(todo)
        row = self._row(todo, request, model)
        name = todo["file"]
        if self.settings.output.has(name):  # an earlier attempt of this batch wrote it
            return self._reused(row, name)
        start = time.monotonic()
        request_id = "ray-" + todo["key"][:40]
        message = rpc.to_proto(request, request_id, self.settings.priority)
        delay = self.settings.backoff_s
        for attempt in range(1, self.settings.max_attempts + 1):
            row["attempts"] = attempt
            try:
                response = self.call(message, timeout=self.settings.timeout_s,
                                     metadata=list(self.settings.server.metadata) or None)
            except grpc.RpcError as e:
                code = e.code().name
                row.update(error_code=code, error=e.details() or code)
                if code in PERMANENT_CODES or attempt == self.settings.max_attempts:
                    break
                if code == "UNAVAILABLE":
                    self._revive_server()
                time.sleep(delay * (0.5 + random.random() / 2))
                delay *= 2
                continue
            self._check_model(response)
            data = rpc.file_bytes(response)
            write_start = time.monotonic()
            wrote = self.settings.output.write_once(name, data)
            if not wrote:  # another attempt got there first: its file stands
                return self._reused(row, name)
            self._fill_ok(row, response, len(data))
            row.update(call_ms=(write_start - start) * 1000.0, write_ms=_ms(write_start))
            break
        row["finished_at"] = datetime.now(timezone.utc)
        if row["status"] != "ok" and row.get("call_ms") is None:
            row["call_ms"] = _ms(start)
        return row

    def _fill_ok(self, row: dict[str, Any], response: Any, size: int) -> None:
        e, t = response.effective, response.timings
        row.update(
            status="ok", error_code=None, error=None, bytes=size,
            vertices=response.vertex_count, faces=response.face_count,
            request_id=response.request_id, seed=e.seed,
            guidance_scale=e.guidance_scale,
            top_p=e.top_p if e.HasField("top_p") else None,
            bounding_box=[e.bounding_box.x, e.bounding_box.y, e.bounding_box.z]
            if e.HasField("bounding_box") else None,
            resolution_base=e.resolution_base, format=rpc.FORMAT_NAME.get(e.format, row["format"]),
            target_face_count=e.target_face_count if e.HasField("target_face_count") else None,
            mesh_profile=rpc.PROFILE_NAME.get(e.mesh_profile, row["mesh_profile"]),
            model_name=e.model, model_digest=e.weights_digest, server_version=e.server_version,
            queue_ms=t.queue_ms, text_encoding_ms=t.text_encoding_ms, prefill_ms=t.prefill_ms,
            decode_ms=t.decode_ms, mesh_ms=t.mesh_ms, server_ms=t.total_ms)

    def _reused(self, row: dict[str, Any], name: str) -> dict[str, Any]:
        data = self.settings.output.read(name)
        vertices, faces = meshfiles.counts(data, name.rsplit(".", 1)[1])
        row.update(status="ok", error_code=None, error=None, bytes=len(data), vertices=vertices,
                   faces=faces, reused=True, finished_at=datetime.now(timezone.utc))
        return row

    def _check_model(self, response: Any) -> None:
        expected = self.settings.expected_digest
        digest = response.effective.weights_digest
        if expected and digest and digest != expected:
            raise ModelMismatch(
                f"the server's model {response.effective.model!r} has weights digest {digest}, "
                f"but the meshes of {self.settings.output.path} under this model tag were made "
                f"with {expected}: write to another folder, or give another --model-tag")

    def _revive_server(self) -> None:
        """Starts this actor's own server again when it has died (not a fleet's)."""
        if self.server is None:
            return
        with self._lock:
            if self.server.alive():
                return
            self._server_restarts += 1
            if self._server_restarts > self.settings.max_server_restarts:
                raise RuntimeError(f"cube3d-server died {self._server_restarts} times; its "
                                   f"last log ({self.server.log_path}) ends:\n"
                                   f"{self.server.log()[-4000:]}")
            self.channel.close()
            self._connect(self.server.restart())

    def __del__(self) -> None:
        if self.server is not None:
            self.server.stop(grace_s=2.0)


__all__: Sequence[str] = ("MeshWorker", "WorkerSettings", "ModelMismatch")
