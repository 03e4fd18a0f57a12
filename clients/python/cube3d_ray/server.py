"""One cube3d-server beside an actor: started from a binary and a config on a free loopback port
(picked by binding port 0, then handed to the server; when another process takes it first, the
server says so and exits, and it is started again on another), with its metrics and HTTP
listeners off, and waited for until its health says SERVING.

The server dies with its actor: it is started with the parent-death signal (Linux
PR_SET_PDEATHSIG) set to SIGKILL from a thread that lives as long as the actor's process (the
signal follows the thread that forked), so an actor that Ray kills, or that crashes, takes its
server with it and leaves no process behind.
"""
from __future__ import annotations

import ctypes
import os
import queue
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from .rpc import health, open_channel

# What the server logs when its port was taken between the pick and its bind.
PORT_CLASH_MARKERS = ("cannot listen", "Address already in use", "uses the port of")
PR_SET_PDEATHSIG = 1
LOG_TAIL_BYTES = 6000


@dataclass(frozen=True)
class ServerSpec:
    """How an actor reaches a cube3d-server: its own (binary + config, started beside it), or a
    fleet's address (a gRPC target: host:port, a comma-separated list, or dns:///name:port)."""
    binary: str | None = None
    config: str | None = None
    address: str | None = None
    args: tuple[str, ...] = ()           # more server flags (e.g. --set batching.batch_buckets=..)
    env: tuple[tuple[str, str], ...] = ()  # more environment variables for the server
    log_dir: str | None = None           # the servers' logs (default: a temp folder)
    startup_timeout_s: float = 900.0     # loading and warming the model up
    api_key: str | None = None           # sent as `authorization: Bearer ...` (a fleet's key)
    ca_file: str | None = None           # TLS roots for a fleet (None: plaintext)

    def __post_init__(self) -> None:
        if (self.address is None) == (self.binary is None):
            raise ValueError("give a server binary and config (each actor starts one), or the "
                             "address of running servers, not both")
        if self.binary is not None and self.config is None:
            raise ValueError("a server binary needs its config (--config)")

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.api_key}"),) if self.api_key else ()

    def root_certificates(self) -> bytes | None:
        if self.ca_file is None:
            return None
        with open(self.ca_file, "rb") as f:
            return f.read()


def _set_parent_death_signal() -> None:
    """In the child, before exec: SIGKILL when the thread that forked it ends."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the actor's own clean-up still stops it
        pass


class _Spawner:
    """A thread that lives as long as the process and forks the servers (see the module's
    docstring)."""

    _lock = threading.Lock()
    _instance: _Spawner | None = None

    def __init__(self) -> None:
        self._requests: queue.Queue[tuple[Callable[[], Any], queue.Queue[Any]]] = queue.Queue()
        threading.Thread(target=self._loop, name="cube3d-server-spawner", daemon=True).start()

    @classmethod
    def get(cls) -> _Spawner:
        with cls._lock:
            if cls._instance is None:
                cls._instance = _Spawner()
            return cls._instance

    def _loop(self) -> None:
        while True:
            make, answer = self._requests.get()
            try:
                answer.put((True, make()))
            except BaseException as e:  # handed to the caller
                answer.put((False, e))

    def run(self, make: Callable[[], Any]) -> Any:
        answer: queue.Queue[Any] = queue.Queue()
        self._requests.put((make, answer))
        ok, value = answer.get()
        if not ok:
            raise value
        return value


@dataclass
class LocalServer:
    """A cube3d-server process started for this actor (start(), stop(), restart())."""
    spec: ServerSpec
    process: subprocess.Popen[bytes] | None = None
    port: int | None = None
    log_path: str | None = None
    starts: int = 0
    _channel: grpc.Channel | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, attempts: int = 5) -> str:
        """Starts the server and waits until it serves; its address. RuntimeError with its log
        when it exits (other than for a port another process took) or does not serve in time."""
        for attempt in range(attempts):
            try:
                return self._start_once()
            except _PortTaken:
                if attempt + 1 == attempts:
                    self.fail(f"found no free port in {attempts} tries")
        raise AssertionError("unreachable")

    def _start_once(self) -> str:
        assert self.spec.binary is not None and self.spec.config is not None
        log_dir = self.spec.log_dir or os.path.join(tempfile.gettempdir(), "cube3d-ray-logs")
        os.makedirs(log_dir, exist_ok=True)
        self.starts += 1
        self.log_path = os.path.join(
            log_dir, f"cube3d-server-{socket.gethostname()}-{os.getpid()}-{self.starts}.log")
        self.port = free_port()
        args = [self.spec.binary, "--config", self.spec.config,
                "--listen", f"127.0.0.1:{self.port}", "--metrics-listen", "",
                "--http-listen", "", *self.spec.args]
        env = {**os.environ, **dict(self.spec.env)}
        log_path = self.log_path

        def spawn() -> subprocess.Popen[bytes]:
            with open(log_path, "wb") as log:
                return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=env,
                                        preexec_fn=_set_parent_death_signal)

        self.process = _Spawner.get().run(spawn)
        self._channel = open_channel(self.address)
        deadline = time.monotonic() + self.spec.startup_timeout_s
        last = "?"
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                if any(marker in self.log() for marker in PORT_CLASH_MARKERS):
                    self.stop()
                    raise _PortTaken()
                self.fail(f"exited with status {self.process.returncode} before it served")
            last = health(self._channel, timeout=2.0)
            if last == "SERVING":
                return self.address
            if time.monotonic() > deadline:
                self.fail(f"not SERVING within {self.spec.startup_timeout_s:.0f} s (last: {last})")
            time.sleep(0.1)

    def fail(self, why: str) -> None:
        tail = self.log()[-LOG_TAIL_BYTES:]
        self.stop()
        raise RuntimeError(f"cube3d-server ({self.spec.binary} --config {self.spec.config}) "
                           f"{why}; its log ({self.log_path}) ends:\n{tail}")

    def log(self) -> str:
        if not self.log_path or not os.path.exists(self.log_path):
            return ""
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM (the server drains), then SIGKILL after grace_s."""
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)

    def restart(self) -> str:
        self.stop(grace_s=1.0)
        return self.start()


class _PortTaken(Exception):
    """Another process took the picked port first."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def server_args_for_threads(threads: int | None) -> Sequence[tuple[str, str]]:
    """The environment that bounds a server's threads to `threads` cores (None: the machine's)."""
    if threads is None:
        return ()
    return (("OMP_NUM_THREADS", str(threads)), ("MKL_NUM_THREADS", str(threads)))
