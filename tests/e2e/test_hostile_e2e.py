"""cube3d-server against hostile clients, end to end, on loopback: what a slow, idle, greedy,
stalled or lying client costs the server and the other clients. Each scenario runs against a
server of its own (the settings it needs), measures the same request unloaded first, then under
the hostile load, and checks what the front doors promise (include/cube3d/server/http/
http_server.h, include/cube3d/server/grpc/grpc_options.h, the http: and grpc: sections of
models/demo-server.yaml):

  1. 300 connections dripping a request head (one header line every 2 s) are each closed at
     http.header_timeout_ms, while /healthz and a generate stay within 2x of unloaded;
  2. 10,000 idle connections are held (the server's RSS per connection is reported) while a
     generate stays within 1 s of unloaded;
  3. connections beyond http.max_connections_per_client from one address are refused at once,
     while another address is served and the admitted ones still work;
  4. a client that never reads its event stream and one that never reads its answers are cut by
     http.write_timeout_ms, without slowing other clients' decoding (TPOT);
  5. HTTP/1.1 framing: pipelining, HTTP/1.0, chunked bodies, 100-continue, HEAD, and the
     refusals (400, 413, 414, 431) with the JSON error body and the connection closed;
  6. request smuggling and header laxness (CL+TE, two Content-Lengths, control bytes in a value,
     obsolete line folding) refused; a lower-case auth scheme accepted;
  7. 2,000 gRPC calls that never send their message hold no threads, are refused (oldest first,
     grpc.max_calls_awaiting_message) or cancelled (limits.request_read_timeout_ms), and are
     counted as their clients saw them, while normal calls go on;
  8. gRPC connections are closed at grpc.max_connection_age_ms (+ grace), a client that pings
     too often is sent away (GOAWAY), and one that connects and never sends HTTP/2's preface is
     closed at grpc.handshake_timeout_ms, while later calls succeed over new connections.

Run by ctest (test e2e.hostile, RUN_SERIAL) or by hand from this folder:

    cd tests/e2e && CUBE3D_BIN_DIR=$PWD/../../build/bin CUBE3D_SOURCE_DIR=$PWD/../.. \\
        python3 -m unittest -v test_hostile_e2e

(absolute paths: the server is started with the source folder as its working directory). It
takes about a minute on 2 cores (two with another process hogging a core).

Measurements (latencies unloaded and loaded, counts, RSS per idle connection, thread counts,
times to close) are collected per scenario, printed as a table to stderr at the end, and written
as JSON to the file CUBE3D_HOSTILE_REPORT names, if set. With CUBE3D_HOSTILE_MEASURE_ONLY=1 every
scenario runs and records what it saw but asserts nothing (what would have failed is recorded as
`would_fail`): the same suite measures an older server build ("before" numbers). Such a build may
not know the http.* and grpc.* keys: its --set overrides and config sections it refuses at start
are dropped (and recorded as `dropped_settings`), and a scenario that errors is recorded and
skipped. An old build may need CUBE3D_CLIP_VOCAB (its CLIP vocabulary) in the environment.

Bounded: loopback only, every wait has a deadline, every socket is closed in a finally block,
every server is stopped (SIGTERM, then SIGKILL) at its class's end. The machine this runs on
may have 2 cores, shared by the server, its model and this client: latency bounds have a small
absolute floor (FLOOR_S) on top of the ratio.
"""
import asyncio
import collections
import contextlib
import errno
import json
import os
import re
import resource
import selectors
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
import traceback
import unittest

import grpc
import grpc.aio
import yaml

import server_process as e2e
from server_process import (HOST, RES, SERVER_BIN, SOURCE, KeyedServerTestCase, ServerProcess,
                            ServerTestCase, make_request, metric_value, rpc_code)

MEASURE_ONLY = os.environ.get("CUBE3D_HOSTILE_MEASURE_ONLY") == "1"
REPORT_PATH = os.environ.get("CUBE3D_HOSTILE_REPORT")

GENERATE = "/v1/meshes:generate"
STREAM = "/v1/meshes:generateStream"
GENERATE_METHOD = "/cube3d.v1.MeshService/GenerateMesh"
# On a 2-core machine the server's model, its I/O threads and this client share the CPUs: a
# loaded request may lose a scheduling quantum or two to the hostile clients' own work (this
# process's selector loop, the kernel's accepts) however well the server isolates them. The
# latency bounds are ratio * unloaded + FLOOR_S.
FLOOR_S = 0.3
# One probe under load. An old server may never answer it: measure-only runs wait less, to
# bound the run (a probe that takes 10 s is a hung one for these numbers).
LOADED_TIMEOUT_S = 10 if MEASURE_ONLY else 30
SECOND_ADDRESS = "127.0.0.2"  # another client on loopback (all of 127/8 is the loopback device)

REPORT = {"server_bin": SERVER_BIN, "measure_only": MEASURE_ONLY, "scenarios": {}}
_suite_start = None


def setUpModule():
    global _suite_start
    _suite_start = time.monotonic()
    # 10,000 idle connections need 10,000 descriptors here (the server raises its own limit).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    REPORT["rlimit_nofile"] = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    e2e.setUpModule()


def tearDownModule():
    REPORT["suite_seconds"] = round(time.monotonic() - _suite_start, 1)
    try:
        write_report()
    finally:
        e2e.tearDownModule()


def write_report():
    lines = [f"\n===== hostile clients: {SERVER_BIN}"
             f"{' (measure only)' if MEASURE_ONLY else ''}, {REPORT['suite_seconds']} s ====="]
    for scenario, values in REPORT["scenarios"].items():
        lines.append(f"-- {scenario}")
        for key, value in values.items():
            text = json.dumps(value, default=str)
            lines.append(f"   {key:<38} {text if len(text) <= 100 else text[:97] + '...'}")
    sys.stderr.write("\n".join(lines) + "\n")
    if REPORT_PATH:
        with open(REPORT_PATH, "w") as f:
            json.dump(REPORT, f, indent=2, default=str)
            f.write("\n")


# --- measuring ---------------------------------------------------------------------------------

def median(values):
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 4) if values else None


def timed(fn):
    """(seconds, fn()) ; (None, error text) when it raises (a probe an old server never
    answers)."""
    start = time.monotonic()
    try:
        value = fn()
    except Exception as e:  # noqa: BLE001: a probe's failure is a measurement here
        return None, f"{type(e).__name__}: {e}"
    return time.monotonic() - start, value


def within(loaded, unloaded, ratio):
    """Whether a loaded median is within ratio x the unloaded one, plus FLOOR_S."""
    return loaded is not None and unloaded is not None and loaded <= ratio * unloaded + FLOOR_S


def proc_status(pid, field):
    """A number from /proc/<pid>/status (VmRSS in bytes, Threads), None when gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    parts = line.split()
                    return int(parts[1]) * (1024 if parts[-1] == "kB" else 1)
    except OSError:
        return None
    return None


def established_client_ports(server_port):
    """Local ports of this machine's ESTABLISHED connections to server_port (the client ends;
    the server's own ends have server_port as their local port). gRPC's client sockets are IPv6
    ones with v4-mapped addresses: they are in /proc/net/tcp6."""
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    local, remote, state = fields[1], fields[2], fields[3]
                    if state == "01" and int(remote.split(":")[1], 16) == server_port:
                        ports.add(int(local.split(":")[1], 16))
        except FileNotFoundError:  # no IPv6
            pass
    return ports


# --- raw HTTP ----------------------------------------------------------------------------------

def post_bytes(path, body, headers=(), version="1.1"):
    """A POST request with a JSON body, exactly as it goes on the wire."""
    payload = json.dumps(body).encode()
    head = [f"POST {path} HTTP/{version}", f"Host: {HOST}", "Content-Type: application/json",
            f"Content-Length: {len(payload)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + payload


def get_bytes(path, method="GET", headers=()):
    return ("\r\n".join([f"{method} {path} HTTP/1.1", f"Host: {HOST}", *headers]) +
            "\r\n\r\n").encode()


def chunked(payload, sizes):
    """payload as a chunked body, in chunks of the given sizes (the rest in one more)."""
    out, at = b"", 0
    for size in list(sizes) + [len(payload)]:
        piece = payload[at:at + size]
        if piece:
            out += f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
        at += len(piece)
    return out + b"0\r\n\r\n"


class Incomplete(Exception):
    """The bytes ended in the middle of a response."""


def parse_response(data, head_only=False):
    """One HTTP/1.1 response off the front of data: ((status, headers, body), rest). headers
    has lower-case names (repeated ones joined with ", "). A body without length runs to the
    end of data. Raises Incomplete when data ends first."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        raise Incomplete("no end of head")
    lines = data[:end].decode("latin-1").split("\r\n")
    m = re.match(r"HTTP/1\.[01] (\d{3})", lines[0])
    if not m:
        raise AssertionError(f"not a status line: {lines[0]!r}")
    status = int(m.group(1))
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        headers[name] = f"{headers[name]}, {value.strip()}" if name in headers else value.strip()
    rest = data[end + 4:]
    if head_only or 100 <= status < 200 or status in (204, 304):
        return (status, headers, b""), rest
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while True:
            eol = rest.find(b"\r\n")
            if eol < 0:
                raise Incomplete("in a chunk size")
            size = int(rest[:eol].split(b";")[0], 16)
            if len(rest) < eol + 2 + size + 2:
                raise Incomplete(f"in a chunk of {size} bytes")
            body += rest[eol + 2:eol + 2 + size]
            rest = rest[eol + 2 + size + 2:]
            if size == 0:
                return (status, headers, body), rest
    if "content-length" in headers:
        length = int(headers["content-length"])
        if len(rest) < length:
            raise Incomplete(f"{len(rest)} of {length} body bytes")
        return (status, headers, rest[:length]), rest[length:]
    return (status, headers, rest), b""


class RawConnection:
    """A client connection that sends exactly the bytes it is given and parses what comes back
    by hand (http.client would fix up, or refuse, what the tests send on purpose)."""

    def __init__(self, port, source=None, timeout=10, rcvbuf=None):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            if rcvbuf is not None:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            if source is not None:
                self.sock.bind((source, 0))
            self.sock.settimeout(timeout)
            self.sock.connect((HOST, port))
        except BaseException:
            self.sock.close()
            raise
        self.buffer = b""
        self.eof = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.sock.close()

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self):
        try:
            chunk = self.sock.recv(1 << 16)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.eof = True
            return False
        self.buffer += chunk
        return True

    def response(self, head_only=False):
        """The next response: (status, headers, body); EOFError when the connection ends
        first."""
        while True:
            try:
                parsed, self.buffer = parse_response(self.buffer, head_only)
                if "content-length" in parsed[1] or parsed[1].get("transfer-encoding") or \
                        head_only or parsed[0] < 200 or self.eof:
                    return parsed
            except Incomplete:
                pass
            if not self._fill():
                if self.buffer:
                    parsed, self.buffer = parse_response(self.buffer, head_only)
                    return parsed
                raise EOFError("the connection closed before a response")

    def closed_by_server(self, timeout=5):
        """Whether the server closes the connection (EOF or reset) within `timeout` with nothing
        more sent: True, False (still open), or the unexpected bytes."""
        self.sock.settimeout(timeout)
        try:
            chunk = self.sock.recv(1 << 16)
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False
        return True if not chunk else self.buffer + chunk

    def drain(self, timeout=30):
        """Everything the connection still delivers until its end: (bytes, how it ended:
        "eof", "reset" or "timeout")."""
        deadline = time.monotonic() + timeout
        data = self.buffer
        self.buffer = b""
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(1 << 20)
            except ConnectionResetError:
                return data, "reset"
            except socket.timeout:
                break
            if not chunk:
                return data, "eof"
            data += chunk
        return data, "timeout"


class SocketSet:
    """Many client sockets, opened fast and all closed at the end (with a reset: no TIME_WAIT
    left on this side for 10,000 of them)."""

    def __init__(self):
        self.sockets = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close_all()

    def close_all(self):
        linger = struct.pack("ii", 1, 0)
        for s in self.sockets:
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
            except OSError:
                pass
            s.close()
        self.sockets = []

    def open(self, port, n, source=None, batch=1000, timeout=60):
        """Opens n connections with non-blocking connects, `batch` at a time (the listen
        backlog's size), waiting for each batch to be established; returns the new sockets."""
        opened = []
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            while len(opened) < n:
                pending = 0
                for _ in range(min(batch, n - len(opened))):
                    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    self.sockets.append(s)
                    opened.append(s)
                    s.setblocking(False)
                    if source is not None:
                        s.bind((source, 0))
                    err = s.connect_ex((HOST, port))
                    if err not in (0, errno.EINPROGRESS):
                        raise OSError(err, f"connect: {os.strerror(err)}")
                    sel.register(s, selectors.EVENT_WRITE)
                    pending += 1
                while pending:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(f"{len(opened) - pending} of {n} connections "
                                           f"established within {timeout} s")
                    for key, _ in sel.select(timeout=left):
                        err = key.fileobj.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                        if err:
                            raise OSError(err, f"connect: {os.strerror(err)}")
                        sel.unregister(key.fileobj)
                        pending -= 1
        return opened


def error_body(body):
    """The JSON error body's error object ({code, status, message})."""
    return json.loads(body)["error"]


# --- measure-only compatibility with older builds ----------------------------------------------

UNKNOWN_KEY = re.compile(r"(command-line override|\S+): unknown key ([A-Za-z0-9_.]+)")


def compatible_server(args, tmp_dir, attempts=12):
    """(args, config, dropped): the --set overrides and config sections this server binary
    knows, found by asking it (--print-config) and dropping what it names as unknown."""
    args, config, dropped = list(args), e2e.DEMO_CONFIG, []
    for _ in range(attempts):
        proc = subprocess.run([SERVER_BIN, "--config", config, *args, "--print-config"],
                              capture_output=True, text=True, timeout=60, cwd=SOURCE,
                              stdin=subprocess.DEVNULL)
        m = UNKNOWN_KEY.search(proc.stderr)
        if proc.returncode == 0 or not m:
            break
        key = m.group(2)
        dropped.append(key)
        if m.group(1) == "command-line override":
            args = without_override(args, key)
        else:
            config = config_without(config, key, tmp_dir)
    return args, config, dropped


def without_override(args, key):
    """args without the `--set key=...` pairs."""
    kept, i = [], 0
    while i < len(args):
        if args[i] == "--set" and i + 1 < len(args) and args[i + 1].split("=", 1)[0] == key:
            i += 2
            continue
        kept.append(args[i])
        i += 1
    return kept


def config_without(config, dotted_key, tmp_dir):
    """A copy of the server YAML without one (dotted) key; its model.config made absolute (a
    relative path in the file is relative to the file's folder)."""
    with open(config) as f:
        data = yaml.safe_load(f)
    *parents, last = dotted_key.split(".")
    node = data
    for p in parents:
        node = node[p]
    node.pop(last, None)
    model = data.get("model", {})
    if model.get("config") and not os.path.isabs(model["config"]):
        model["config"] = os.path.join(os.path.dirname(os.path.abspath(config)), model["config"])
    path = os.path.join(tmp_dir, f"compat-{len(os.listdir(tmp_dir))}.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(data, f)
    return path


# --- the scenarios' base -----------------------------------------------------------------------

class _Expect:
    """self.expect.assertX(...): the assertion; in measure-only mode a note of what it would
    have said, and the scenario goes on."""

    def __init__(self, test):
        self.test = test

    def __getattr__(self, name):
        check = getattr(self.test, name)

        def run(*args, **kwargs):
            try:
                check(*args, **kwargs)
            except AssertionError as e:
                if not MEASURE_ONLY:
                    raise
                self.test.report.setdefault("would_fail", []).append(str(e)[:300])
        return run


def tolerated(test):
    """In measure-only mode, a scenario that errors is recorded (and skipped), not failed."""
    def run(self):
        try:
            test(self)
        except unittest.SkipTest:
            raise
        except Exception as e:  # noqa: BLE001
            if not MEASURE_ONLY:
                raise
            self.report["error"] = f"{type(e).__name__}: {e}"[:500]
            self.report["error_at"] = traceback.format_exc(limit=3).splitlines()[-3:]
            raise unittest.SkipTest(f"measure-only: {type(e).__name__}: {e}")
    run.__name__ = test.__name__
    run.__doc__ = test.__doc__
    return run


class HostileTestCase(ServerTestCase):
    """One server with the HTTP gateway per scenario class (SERVER_ARGS); its measurements go
    to REPORT["scenarios"][SCENARIO]."""

    HTTP = True
    TMP_PREFIX = "cube3d-hostile-e2e-"
    SCENARIO = None

    @classmethod
    def make_server(cls, tmp_dir):
        args, config = list(cls.SERVER_ARGS), None
        if MEASURE_ONLY:
            args, config, dropped = compatible_server(args, tmp_dir)
            if dropped:
                REPORT["scenarios"][cls.SCENARIO]["dropped_settings"] = dropped
        return ServerProcess(args, tmp_dir, http=cls.HTTP, config=config)

    @classmethod
    def setUpClass(cls):
        REPORT["scenarios"].setdefault(cls.SCENARIO, {})
        try:
            super().setUpClass()
        except Exception as e:  # noqa: BLE001
            if not MEASURE_ONLY:
                raise
            REPORT["scenarios"][cls.SCENARIO]["error"] = f"start: {e}"[:500]
            raise unittest.SkipTest(f"measure-only: the server did not start: {e}")

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        except AssertionError as e:
            if not MEASURE_ONLY:
                raise
            REPORT["scenarios"][cls.SCENARIO]["stop_error"] = str(e).splitlines()[0][:300]

    def setUp(self):
        self.report = REPORT["scenarios"][self.SCENARIO]
        self.expect = _Expect(self)

    def record(self, **values):
        self.report.update(values)

    @contextlib.contextmanager
    def case(self, name):
        """A subTest; in measure-only mode one whose error is recorded (the scenario goes on)."""
        if not MEASURE_ONLY:
            with self.subTest(name):
                yield
            return
        try:
            yield
        except Exception as e:  # noqa: BLE001
            self.report.setdefault("case_errors", {})[name] = f"{type(e).__name__}: {e}"[:300]

    # -- probes --

    def samples(self):
        """A scrape of the metrics port (measure-only: [] when it fails, an old server under
        load)."""
        try:
            return self.server.metrics()
        except Exception:  # noqa: BLE001
            if not MEASURE_ONLY:
                raise
            return []

    def metric(self, name, **labels):
        return metric_value(self.samples(), name, **labels)

    def poll_metric(self, name, predicate, timeout, **labels):
        """Polls a metric until predicate(value) holds: (value, seconds waited); the last value
        at the deadline. A metric the server does not have (None) ends the wait early."""
        start = time.monotonic()
        value = None
        while True:
            value = self.metric(name, **labels)
            if value is not None and predicate(value):
                break
            if time.monotonic() - start > (min(timeout, 3) if value is None else timeout):
                break
            time.sleep(0.1)
        return value, round(time.monotonic() - start, 2)

    def request_counts(self):
        return collections.Counter({l["code"]: v for n, l, v in self.samples()
                                    if n == "cube3d_requests_total"})

    def settled_request_counts(self, before, calls, timeout_s=15):
        """request_counts() once `calls` more requests than `before` holds are counted. The
        server counts a request as its call completes, which can come just after the client has
        read the whole answer: a count taken at once may miss the last of them."""
        deadline = time.monotonic() + timeout_s
        while True:
            now = self.request_counts()
            if sum(now.values()) >= sum(before.values()) + calls or time.monotonic() > deadline:
                return now
            time.sleep(0.05)

    def http_generate(self, prompt="a small wooden chair", source=None,
                      timeout=LOADED_TIMEOUT_S, **fields):
        """A normal generate over HTTP (JSON, resolution 4): the parsed answer; raises unless
        200. From `source` (a loopback address) when given."""
        body = {"prompt": prompt, "resolutionBase": RES, **fields}
        with RawConnection(self.server.http_port, source=source, timeout=timeout) as conn:
            conn.send(post_bytes(GENERATE, body, ["Connection: close"]))
            status, _, payload = conn.response()
        if status != 200:
            raise AssertionError(f"generate answered {status}: {payload[:300]!r}")
        return json.loads(payload)

    def healthz(self, source=None, timeout=LOADED_TIMEOUT_S):
        with RawConnection(self.server.http_port, source=source, timeout=timeout) as conn:
            conn.send(get_bytes("/healthz", headers=["Connection: close"]))
            status, _, body = conn.response()
        if (status, body) != (200, b"ok\n"):
            raise AssertionError(f"/healthz answered {status} {body!r}")
        return body

    def latencies(self, fn, n):
        """fn() n times in a row: {"median_s", "all_s", "errors"}."""
        runs = [timed(fn) for _ in range(n)]
        seconds = [round(s, 4) for s, _ in runs if s is not None]
        errors = [v for s, v in runs if s is None]
        return {"median_s": median(seconds), "all_s": seconds, "errors": errors[:3]}

    def baseline(self, fn, n=3):
        """The unloaded latency of fn (after one warm-up call)."""
        timed(fn)
        return self.latencies(fn, n)


# --- 1. dripping request heads -----------------------------------------------------------------

def drip(conns, first_byte, interval, deadline):
    """Sends one header line every `interval` s on each open connection and watches them all
    (one selector, no thread per connection) until each is closed by the server or the
    deadline: {index: seconds from its first byte to the close}, {index: bytes it was sent}."""
    closed, received = {}, {}
    with selectors.DefaultSelector() as sel:
        for i, s in enumerate(conns):
            sel.register(s, selectors.EVENT_READ, i)
        next_drip, line = time.monotonic() + interval, 0
        while len(closed) < len(conns) and time.monotonic() < deadline:
            if time.monotonic() >= next_drip:
                line += 1
                for i, s in enumerate(conns):
                    if i not in closed:
                        try:
                            s.send(f"X-Drip-{line}: {line}\r\n".encode())
                        except OSError:
                            pass  # the server closed it: the read below sees it
                next_drip += interval
            wait = max(0.0, min(0.05, next_drip - time.monotonic()))
            for key, _ in sel.select(timeout=wait):
                i = key.data
                try:
                    data = key.fileobj.recv(4096)
                except BlockingIOError:
                    continue
                except ConnectionResetError:
                    data = b""
                if data:
                    received[i] = received.get(i, b"") + data
                    continue
                closed[i] = time.monotonic() - first_byte[i]
                sel.unregister(key.fileobj)
    return closed, received


class DrippingHeadersTest(HostileTestCase):
    SCENARIO = "1_dripping_headers"
    CONNECTIONS = 300
    HEADER_TIMEOUT_MS = 5000  # drips at 0, 2 and 4 s: the last one 1 s before the deadline
    DRIP_EVERY_S = 2.0
    CLOSE_MARGIN_S = 2.0
    SERVER_ARGS = ["--set", f"http.header_timeout_ms={HEADER_TIMEOUT_MS}",
                   "--set", "http.max_connections_per_client=1000"]

    @tolerated
    def test_dripping_heads_are_cut_at_the_header_timeout(self):
        health0 = self.baseline(self.healthz, 5)
        generate0 = self.baseline(self.http_generate)
        closed_before = self.metric("cube3d_http_connections_closed_total", listener="http",
                                    reason="header_timeout") or 0
        with SocketSet() as pool:
            conns = pool.open(self.server.http_port, self.CONNECTIONS)
            first_byte = []
            for s in conns:
                s.send(f"POST {GENERATE} HTTP/1.1\r\n".encode())
                first_byte.append(time.monotonic())
            result = {}
            dripper = threading.Thread(target=lambda: result.update(zip(
                ("closed", "received"),
                drip(conns, first_byte, self.DRIP_EVERY_S,
                     time.monotonic() + self.HEADER_TIMEOUT_MS / 1000 + 10))))
            dripper.start()
            try:
                # Probes all through the drip, until 1.5 s before the heads' deadline.
                health1, generate1 = self.latencies(self.healthz, 1), self.latencies(
                    self.http_generate, 1)
                while time.monotonic() - first_byte[-1] < self.HEADER_TIMEOUT_MS / 1000 - 1.5:
                    for probe, fn in ((health1, self.healthz), (generate1, self.http_generate)):
                        more = self.latencies(fn, 1)
                        probe["all_s"] += more["all_s"]
                        probe["errors"] += more["errors"]
                        probe["median_s"] = median(probe["all_s"])
                probes_done = time.monotonic() - first_byte[0]
            finally:
                dripper.join(self.HEADER_TIMEOUT_MS / 1000 + 30)
            closed, received = result.get("closed", {}), result.get("received", {})
        times = sorted(closed.values())
        closed_after, waited = self.poll_metric(
            "cube3d_http_connections_closed_total",
            lambda v: v - closed_before >= self.CONNECTIONS, 10, listener="http",
            reason="header_timeout")
        self.record(connections=self.CONNECTIONS, header_timeout_s=self.HEADER_TIMEOUT_MS / 1000,
                    healthz_unloaded=health0, healthz_loaded=health1,
                    generate_unloaded=generate0, generate_loaded=generate1,
                    probes_done_after_s=round(probes_done, 2),
                    closed_by_server=len(closed),
                    close_after_first_byte_s={"min": round(times[0], 3) if times else None,
                                              "median": median(times),
                                              "max": round(times[-1], 3) if times else None},
                    answered_before_close=len(received),
                    header_timeout_closes=None if closed_after is None
                    else closed_after - closed_before)

        self.expect.assertLess(probes_done, self.HEADER_TIMEOUT_MS / 1000,
                               "the probes ran past the drip (the test's own timing)")
        self.expect.assertFalse(health1["errors"] or generate1["errors"],
                                (health1["errors"], generate1["errors"]))
        self.expect.assertTrue(within(health1["median_s"], health0["median_s"], 2),
                               f"/healthz: {health1} loaded vs {health0} unloaded")
        self.expect.assertTrue(within(generate1["median_s"], generate0["median_s"], 2),
                               f"generate: {generate1} loaded vs {generate0} unloaded")
        self.expect.assertEqual(len(closed), self.CONNECTIONS,
                                "dripping connections the server never closed")
        if times:
            self.expect.assertGreaterEqual(times[0], self.HEADER_TIMEOUT_MS / 1000 - 0.2,
                                           "closed before the header timeout")
            self.expect.assertLessEqual(times[-1], self.HEADER_TIMEOUT_MS / 1000 +
                                        self.CLOSE_MARGIN_S, "closed late")
        self.expect.assertEqual(closed_after - closed_before if closed_after is not None
                                else None, self.CONNECTIONS,
                                f"cube3d_http_connections_closed_total{{reason=header_timeout}} "
                                f"after {waited} s")
        self.assert_still_serving()


# --- 2. idle connections -----------------------------------------------------------------------

class IdleConnectionsTest(HostileTestCase):
    SCENARIO = "2_idle_connections"
    CONNECTIONS = 10_000
    # The idle timeout outlasts the test; max_connections leaves room for the probes.
    SERVER_ARGS = ["--set", "http.idle_timeout_ms=600000",
                   "--set", "http.max_connections=11000",
                   "--set", "http.max_connections_per_client=11000"]

    @tolerated
    def test_ten_thousand_idle_connections_cost_memory_not_latency(self):
        pid = self.server.proc.pid
        generate0 = self.baseline(self.http_generate)
        rss0, threads0 = proc_status(pid, "VmRSS"), proc_status(pid, "Threads")
        with SocketSet() as pool:
            start = time.monotonic()
            conns = pool.open(self.server.http_port, self.CONNECTIONS)
            open_s = time.monotonic() - start
            gauge, accept_s = self.poll_metric("cube3d_http_connections",
                                               lambda v: v >= self.CONNECTIONS, 60,
                                               listener="http")
            time.sleep(0.5)  # the last accepts' allocations settle
            rss1, threads1 = proc_status(pid, "VmRSS"), proc_status(pid, "Threads")
            generate1 = self.latencies(self.http_generate, 3)
            # Still held: none of them was closed (or answered) by the server meanwhile.
            with selectors.DefaultSelector() as sel:
                for s in conns:
                    sel.register(s, selectors.EVENT_READ)
                readable = len(sel.select(timeout=0))
            pool.close_all()
        gauge_after, close_s = self.poll_metric("cube3d_http_connections", lambda v: v == 0, 30,
                                                listener="http")
        per_connection = (rss1 - rss0) / self.CONNECTIONS if rss0 and rss1 else None
        self.record(connections=self.CONNECTIONS, open_seconds=round(open_s, 2),
                    gauge_reached=gauge, accepted_within_s=accept_s,
                    generate_unloaded=generate0, generate_loaded=generate1,
                    rss_before_bytes=rss0, rss_held_bytes=rss1,
                    rss_per_connection_bytes=round(per_connection) if per_connection else None,
                    threads_before=threads0, threads_held=threads1,
                    closed_by_server_while_held=readable,
                    gauge_after_close=gauge_after, gauge_zero_within_s=close_s)
        sys.stderr.write(f"\n[hostile] server RSS per idle connection: {per_connection} bytes "
                         f"({rss0} -> {rss1} for {self.CONNECTIONS})\n")

        self.expect.assertGreaterEqual(gauge or 0, self.CONNECTIONS,
                                       "cube3d_http_connections{listener=http}")
        self.expect.assertEqual(readable, 0, "idle connections the server closed or wrote to")
        self.expect.assertFalse(generate1["errors"], generate1["errors"])
        self.expect.assertTrue(
            generate1["median_s"] is not None and generate0["median_s"] is not None and
            generate1["median_s"] <= generate0["median_s"] + 1 + FLOOR_S,
            f"generate: {generate1} loaded vs {generate0} unloaded")
        self.expect.assertEqual(gauge_after, 0, "connections still counted after they closed")
        self.assert_still_serving()


# --- 3. one address over its connection limit --------------------------------------------------

class PerClientLimitTest(HostileTestCase):
    SCENARIO = "3_per_client_limit"
    LIMIT = 16
    EXCESS = 8
    SERVER_ARGS = ["--set", f"http.max_connections_per_client={LIMIT}"]

    def refusal(self, pool):
        """Connects once more from 127.0.0.1: seconds until the server closes the connection
        (the reset may come before connect() returns), None when it stays open, "data" when
        the server sends something."""
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        pool.sockets.append(s)
        s.settimeout(3)
        start = time.monotonic()
        try:
            s.connect((HOST, self.server.http_port))
            data = s.recv(1024)
        except ConnectionResetError:
            data = b""
        except socket.timeout:
            return None
        return round(time.monotonic() - start, 3) if not data else "data"

    @tolerated
    def test_connections_beyond_the_per_client_limit_are_refused(self):
        generate0 = self.baseline(lambda: self.http_generate(source=SECOND_ADDRESS))
        # The baseline's connections (from the other address) are gone before the flood.
        self.poll_metric("cube3d_http_connections", lambda v: v == 0, 10, listener="http")
        refused_before = self.metric("cube3d_http_connections_refused_total", listener="http",
                                     reason="max_connections_per_client") or 0
        with SocketSet() as pool:
            admitted = pool.open(self.server.http_port, self.LIMIT)
            gauge, _ = self.poll_metric("cube3d_http_connections", lambda v: v >= self.LIMIT, 10,
                                        listener="http")
            refusals = [self.refusal(pool) for _ in range(self.EXCESS)]
            refused_after, _ = self.poll_metric(
                "cube3d_http_connections_refused_total",
                lambda v: v - refused_before >= self.EXCESS, 10, listener="http",
                reason="max_connections_per_client")
            generate1 = self.latencies(lambda: self.http_generate(source=SECOND_ADDRESS), 3)
            # The admitted connections still work (keep-alive, one request each).
            admitted_ok = 0
            for s in admitted:
                s.setblocking(True)
                s.settimeout(LOADED_TIMEOUT_S)
                try:
                    s.sendall(get_bytes("/healthz"))
                    data = b""
                    while b"ok\n" not in data:
                        chunk = s.recv(4096)
                        if not chunk:
                            break
                        data += chunk
                    admitted_ok += data.startswith(b"HTTP/1.1 200") and b"ok\n" in data
                except OSError:
                    pass
        self.record(limit=self.LIMIT, excess=self.EXCESS, gauge_with_admitted=gauge,
                    excess_closed_after_s=refusals,
                    refused_counted=None if refused_after is None
                    else refused_after - refused_before,
                    other_address_generate_unloaded=generate0,
                    other_address_generate_loaded=generate1, admitted_still_working=admitted_ok)

        self.expect.assertEqual(gauge, self.LIMIT, "cube3d_http_connections with the admitted")
        self.expect.assertTrue(all(isinstance(t, float) and t < 1 for t in refusals),
                               f"excess connections not closed at once: {refusals}")
        self.expect.assertEqual(refused_after - refused_before if refused_after is not None
                                else None, self.EXCESS,
                                "cube3d_http_connections_refused_total"
                                "{reason=max_connections_per_client}")
        self.expect.assertFalse(generate1["errors"], generate1["errors"])
        self.expect.assertTrue(within(generate1["median_s"], generate0["median_s"], 2),
                               f"another address: {generate1} vs {generate0} unloaded")
        self.expect.assertEqual(admitted_ok, self.LIMIT, "admitted connections that still work")


# --- 4. clients that never read ----------------------------------------------------------------

class StalledReadersTest(HostileTestCase):
    """What can be forced on loopback: the kernel buffers a stalled reader's answer can fill
    are the server's send buffer (autotuned up to net.ipv4.tcp_wmem's maximum, 4 MiB by
    default) plus the client's receive buffer (SO_RCVBUF set small before connect), about 4 MiB
    in all. A resolution-7 mesh as JSON with RAW arrays and no simplification is ~2.8 MB: it
    fits; a resolution-8 one (~12 MB) would not, but takes ~6 s of meshing alone on 2 cores. So
    each stalled client pipelines two resolution-7 requests and reads nothing: the first answer
    fills the buffers, the second's write stalls and the write timeout cuts the connection.

    What cannot be forced: a stream cut while its job still runs. A job's progress events (a
    few hundred bytes each, a handful per request) are written long before the buffers fill;
    the only write big enough to stall is the result event, and it is written after the job
    ended. So the stalled stream's job is normally done (OK) when the cut comes. The request
    counter counts what each client got: the first answer on each connection (written in full)
    with its job's code, the cut one CANCELLED whatever its job ended with."""

    SCENARIO = "4_stalled_readers"
    WRITE_TIMEOUT_MS = 2000
    BIG = {"resolutionBase": 7, "format": "MESH_FORMAT_RAW", "targetFaceCount": 2000000}
    SERVER_ARGS = ["--set", f"http.write_timeout_ms={WRITE_TIMEOUT_MS}"]

    def normal(self):
        """A normal generate: (seconds, TPOT ms)."""
        seconds, answer = timed(self.http_generate)
        if seconds is None:
            return None, None
        return seconds, answer["timings"]["tpotMs"]

    @tolerated
    def test_clients_that_never_read_are_cut_by_the_write_timeout(self):
        counts_start = self.request_counts()
        self.normal()
        unloaded = [self.normal() for _ in range(5)]
        closed_before = self.metric("cube3d_http_connections_closed_total", listener="http",
                                    reason="write_timeout") or 0
        counts_before = self.settled_request_counts(counts_start, 1 + len(unloaded))
        ids = {"unary": ["stalled-unary-1", "stalled-unary-2"],
               "stream": ["stalled-stream-1", "stalled-stream-2"]}
        loaded = []
        with RawConnection(self.server.http_port, rcvbuf=4096) as unary, \
                RawConnection(self.server.http_port, rcvbuf=4096) as stream:
            unary.send(b"".join(post_bytes(GENERATE, {"prompt": f"a big {rid}", "requestId": rid,
                                                      **self.BIG}) for rid in ids["unary"]))
            stream.send(b"".join(post_bytes(STREAM, {"prompt": f"a big {rid}", "requestId": rid,
                                                     **self.BIG}) for rid in ids["stream"]))
            start = time.monotonic()
            cut_s = None
            # Normal requests all along, until both stalled connections are cut (or 45 s);
            # those after every stalled job ended ran beside nothing but the stalled writes.
            while time.monotonic() - start < 45:
                jobs_done = all(self.outcomes(ids).values())
                loaded.append((*self.normal(), jobs_done))
                closed = self.metric("cube3d_http_connections_closed_total", listener="http",
                                     reason="write_timeout")
                if closed is not None and closed - closed_before >= 2:
                    cut_s = round(time.monotonic() - start, 2)
                    break
            # The sockets see the close once they take what the server's kernel still had.
            unary_data, unary_end = unary.drain(timeout=15)
            stream_data, stream_end = stream.drain(timeout=15)
        # Each stalled job's end (a job cut before it ran has none).
        deadline = time.monotonic() + 10
        while True:
            outcomes = self.outcomes(ids)
            if all(outcomes.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        ok_normal = sum(1 for s, *_ in unloaded + loaded if s is not None)
        expected = collections.Counter({"OK": ok_normal})
        # Counted as its client got it. The answers the socket holds whole (normally the
        # first: it fits the kernel's buffers) count what their job ended with; the one whose
        # write stalled and was cut counts CANCELLED whatever its job ended with; one after it
        # never ran (answers go out in order, one exchange at a time).
        received = {"unary": self.whole_responses(unary_data),
                    "stream": self.whole_responses(stream_data)}
        for name, rids in ids.items():
            for i, rid in enumerate(rids):
                if i < received[name]:
                    expected[outcomes[rid]] += 1
                elif i == received[name] and outcomes[rid]:
                    expected["CANCELLED"] += 1
        counts_after = self.request_counts()
        delta = {c: counts_after[c] - counts_before[c] for c in set(counts_after) |
                 set(counts_before) if counts_after[c] != counts_before[c]}
        # The unloaded ones counted before counts_before was taken: compare the loaded part.
        expected["OK"] -= sum(1 for s, _ in unloaded if s is not None)
        tpot0 = median([t for _, t in unloaded])
        tpot1 = median([t for _, t, _ in loaded])
        beside_stalled = [t for _, t, jobs_done in loaded if jobs_done and t is not None]
        tpot2 = median(beside_stalled)
        self.record(write_timeout_s=self.WRITE_TIMEOUT_MS / 1000,
                    cut_after_s=cut_s,
                    write_timeout_closes=(self.metric("cube3d_http_connections_closed_total",
                                                      listener="http", reason="write_timeout")
                                          or 0) - closed_before,
                    unary_bytes_received=len(unary_data), unary_end=unary_end,
                    stream_bytes_received=len(stream_data), stream_end=stream_end,
                    stalled_outcomes=outcomes, whole_answers_received=received,
                    normal_latency_unloaded_s=median([s for s, _ in unloaded]),
                    normal_latency_loaded_s=median([s for s, _, _ in loaded]),
                    normal_requests_meanwhile=len(loaded),
                    normal_failed_meanwhile=sum(1 for s, _, _ in loaded if s is None),
                    tpot_ms_unloaded=tpot0, tpot_ms_loaded=tpot1,
                    tpot_ms_beside_stalled_writes_only=tpot2,
                    requests_beside_stalled_writes_only=len(beside_stalled),
                    request_count_delta=delta, request_count_expected=dict(expected))

        self.expect.assertIsNotNone(cut_s, "the stalled connections were not both cut by "
                                    "http.write_timeout_ms within 45 s")
        for name, data, end in (("unary", unary_data, unary_end),
                                ("stream", stream_data, stream_end)):
            self.expect.assertIn(end, ("eof", "reset"), f"the {name} socket never saw a close")
            self.expect.assertTrue(self.truncated(data), f"the {name} answers were not cut: "
                                   f"{len(data)} bytes")
        self.expect.assertEqual(sum(1 for s, _, _ in loaded if s is None), 0,
                                "normal requests failed meanwhile")
        for rid, code in outcomes.items():
            if code is not None:
                self.expect.assertIn(code, ("OK", "CANCELLED"), rid)
        self.expect.assertEqual(delta, {c: v for c, v in expected.items() if v},
                                "cube3d_requests_total deltas vs the outcomes seen")
        # Generous while the stalled jobs mesh (2 threads on the 2 cores decoding runs on);
        # once they are done, the stalled writes alone must cost the decoding nothing.
        self.expect.assertTrue(tpot1 is not None and tpot0 is not None and
                               tpot1 <= 3 * tpot0 + 1.0,
                               f"TPOT {tpot1} ms loaded vs {tpot0} ms unloaded")
        self.expect.assertGreaterEqual(len(beside_stalled), 3, "too few requests in the stall "
                                       "(the test's own timing)")
        self.expect.assertTrue(tpot2 is not None and tpot0 is not None and
                               tpot2 <= 2 * tpot0 + 0.5,
                               f"TPOT {tpot2} ms beside the stalled writes vs {tpot0} ms "
                               "unloaded")

    def outcomes(self, ids):
        """{request id: the code its log line ends with, None before it ended}."""
        log = self.server.log()
        found = {}
        for rid in ids["unary"] + ids["stream"]:
            m = re.search(rf"request {rid} ([A-Z_]+) \(http\)", log)
            found[rid] = m.group(1) if m else None
        return found

    @staticmethod
    def whole_responses(data):
        """How many whole responses the bytes begin with."""
        count = 0
        try:
            while data:
                _, data = parse_response(data)
                count += 1
        except Incomplete:
            pass
        return count

    @staticmethod
    def truncated(data):
        """Whether the bytes end inside a response (the cut), after zero or more whole ones."""
        try:
            while data:
                _, data = parse_response(data)
        except Incomplete:
            return True
        return False


# --- 5. HTTP/1.1 framing -----------------------------------------------------------------------

class Http11Test(HostileTestCase):
    SCENARIO = "5_http11"
    MAX_MESSAGE_BYTES = 1 << 20
    SERVER_ARGS = ["--set", f"limits.max_message_bytes={MAX_MESSAGE_BYTES}",
                   "--set", "http.header_timeout_ms=3000"]
    CHAIR = {"prompt": "a pipelined chair", "resolutionBase": RES}

    def conn(self):
        return RawConnection(self.server.http_port, timeout=LOADED_TIMEOUT_S)

    def refused(self, request, status, case):
        """Sends `request`; expects `status` with the JSON error body, then the close."""
        with self.case(case), self.conn() as c:
            try:
                c.send(request)
            except (BrokenPipeError, ConnectionResetError):
                pass  # refused before the whole request was sent: the answer is still there
            got_status, headers, body = c.response()
            closed = c.closed_by_server(5)
            self.report.setdefault("refusals", {})[case] = got_status
            self.expect.assertEqual(got_status, status, f"{case}: {body[:200]!r}")
            if got_status == status:
                self.expect.assertEqual(headers.get("content-type"), "application/json", case)
                error = error_body(body)
                self.expect.assertEqual(error["code"], status, case)
                self.expect.assertTrue(error["message"], case)
                self.expect.assertEqual(headers.get("connection", "").lower(), "close", case)
            self.expect.assertIs(closed, True, f"{case}: the connection was not closed")

    @tolerated
    def test_http11_framing_against_the_real_server(self):
        generate0 = self.baseline(self.http_generate)
        self.record(generate_unloaded=generate0)
        payload = json.dumps(self.CHAIR).encode()

        with self.case("pipelined: two generates and /healthz in one send"):
            with self.conn() as c:
                c.send(post_bytes(GENERATE, {**self.CHAIR, "requestId": "pipe-1"}) +
                       post_bytes(GENERATE, {**self.CHAIR, "requestId": "pipe-2"}) +
                       get_bytes("/healthz"))
                answers = [c.response() for _ in range(3)]
            order = [h.get("x-request-id") or b.decode(errors="replace")
                     for _, h, b in answers]
            self.record(pipelined=[s for s, _, _ in answers], pipelined_order=order)
            self.expect.assertEqual([s for s, _, _ in answers], [200, 200, 200])
            self.expect.assertEqual(order, ["pipe-1", "pipe-2", "ok\n"])

        with self.case("HTTP/1.0: answered, then closed"):
            with self.conn() as c:
                c.send(b"GET /healthz HTTP/1.0\r\n\r\n")
                status, headers, body = c.response()
                closed = c.closed_by_server(5)
            self.record(http10=[status, headers.get("connection"), closed is True])
            self.expect.assertEqual((status, body), (200, b"ok\n"))
            self.expect.assertIs(closed, True, "an HTTP/1.0 connection was kept")

        with self.case("a chunked request body"):
            with self.conn() as c:
                c.send(f"POST {GENERATE} HTTP/1.1\r\nHost: {HOST}\r\n"
                       "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                       .encode() + chunked(payload, [1, 7, 20]))
                status, _, body = c.response()
            self.record(chunked_body=status)
            self.expect.assertEqual(status, 200, body[:200])
            if status == 200:
                self.expect.assertGreater(json.loads(body)["faceCount"], 0)

        with self.case("Expect: 100-continue"):
            with self.conn() as c:
                c.send(f"POST {GENERATE} HTTP/1.1\r\nHost: {HOST}\r\n"
                       f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
                       "Expect: 100-continue\r\n\r\n".encode())
                c.sock.settimeout(5)
                interim = c.response()[0]  # before the body is sent
                c.sock.settimeout(LOADED_TIMEOUT_S)
                c.send(payload)
                final = c.response()[0]
            self.record(expect_continue=[interim, final])
            self.expect.assertEqual([interim, final], [100, 200])

        with self.case("HEAD /healthz: the headers, no body"):
            with self.conn() as c:
                c.send(get_bytes("/healthz", "HEAD") + get_bytes("/healthz"))
                head_status, head_headers, _ = c.response(head_only=True)
                # Had the HEAD answer carried a body, it would be read as the next status line.
                status, _, body = c.response()
            self.record(head=[head_status, head_headers.get("content-length"), status])
            self.expect.assertEqual(head_status, 200)
            self.expect.assertEqual((status, body), (200, b"ok\n"))

        # Each refusal is a case of its own.
        self.refused(b"NOT A REQUEST LINE\r\n\r\n", 400, "malformed request line")
        self.refused(b"GET /healthz HTTP/1.1 extra\r\n\r\n", 400, "request line, 4 parts")
        self.refused(get_bytes("/healthz", headers=["Bad Header Line"]), 400,
                     "header without a colon")
        self.refused(get_bytes("/healthz", headers=["Bad Name: x"]), 400,
                     "header name with a space")
        self.refused(get_bytes("/" + "a" * 9000), 414, "request line over 8192")
        self.refused(get_bytes("/healthz", headers=[f"X-Big-{i}: {'v' * 1000}"
                                                    for i in range(20)]),
                     431, "head over 16384 bytes")
        self.refused(get_bytes("/healthz", headers=[f"X-N-{i}: v" for i in range(150)]), 431,
                     "150 header fields")
        self.refused(f"POST {GENERATE} HTTP/1.1\r\nHost: {HOST}\r\n"
                     "Content-Type: application/json\r\n"
                     f"Content-Length: {2 * self.MAX_MESSAGE_BYTES}\r\n\r\n".encode(), 413,
                     "Content-Length over limits.max_message_bytes")
        self.refused(f"POST {GENERATE} HTTP/1.1\r\nHost: {HOST}\r\n"
                     "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                     .encode() + chunked(b" " * (self.MAX_MESSAGE_BYTES + 4096), [65536]),
                     413, "chunked body over limits.max_message_bytes")

        generate1 = self.latencies(self.http_generate, 3)
        self.record(generate_after=generate1)
        self.expect.assertFalse(generate1["errors"], "not serving after the refusals")
        self.assert_still_serving()


# --- 6. request smuggling and header laxness ---------------------------------------------------

class SmugglingTest(HostileTestCase, KeyedServerTestCase):
    SCENARIO = "6_smuggling"
    KEY = "hostile-test-key-0123456789abcdef"
    KEYS = [("hostile", KEY, {})]
    SERVER_ARGS = ["--set", "http.header_timeout_ms=3000"]

    def exchange(self, request):
        """Sends `request` on a new connection: (every response it gets until the close, whether
        the server closed the connection)."""
        answers = []
        with RawConnection(self.server.http_port, timeout=LOADED_TIMEOUT_S) as c:
            try:
                c.send(request)
            except (BrokenPipeError, ConnectionResetError):
                pass
            while True:
                try:
                    answers.append(c.response())
                except EOFError:
                    break
                except socket.timeout:
                    return answers, False
                if answers[-1][0] != 200 or len(answers) > 3:
                    break
            closed = c.closed_by_server(5) if not c.eof else True
        return answers, closed is True

    def generate_head(self, fields, body_len=None):
        head = [f"POST {GENERATE} HTTP/1.1", f"Host: {HOST}", "Content-Type: application/json",
                *fields]
        if body_len is not None:
            head.append(f"Content-Length: {body_len}")
        return ("\r\n".join(head) + "\r\n\r\n").encode()

    def smuggle(self, case, request, status=400):
        with self.case(case):
            answers, closed = self.exchange(request)
            statuses = [s for s, _, _ in answers]
            self.report.setdefault("answers", {})[case] = statuses
            self.expect.assertEqual(statuses, [status], f"{case}: exactly one refusal")
            if answers and answers[0][0] == 400:
                self.expect.assertEqual(error_body(answers[0][2])["status"], "INVALID_ARGUMENT",
                                        case)
            self.expect.assertTrue(closed, f"{case}: the connection was not closed")

    @tolerated
    def test_smuggling_and_lax_headers_are_refused(self):
        auth = f"Authorization: Bearer {self.KEY}"
        body = json.dumps({"prompt": "a smuggled chair", "resolutionBase": RES}).encode()
        # What a front proxy reading the other framing would take for a second request.
        hidden = get_bytes("/healthz")
        as_chunks = chunked(body, []) + hidden

        generate0 = self.baseline(lambda: self.keyed(auth))
        self.record(generate_unloaded=generate0)
        answers, _ = self.exchange(self.generate_head([], len(body)) + body)
        self.report.setdefault("answers", {})["no key"] = [s for s, _, _ in answers]
        self.expect.assertEqual([s for s, _, _ in answers], [401], "keys are not enforced")

        self.smuggle("Content-Length then Transfer-Encoding",
                     self.generate_head([auth, f"Content-Length: {len(as_chunks)}",
                                         "Transfer-Encoding: chunked"]) + as_chunks)
        self.smuggle("Transfer-Encoding then Content-Length",
                     self.generate_head([auth, "Transfer-Encoding: chunked",
                                         f"Content-Length: {len(body)}"]) + as_chunks)
        self.smuggle("two Content-Length fields",
                     self.generate_head([auth, f"Content-Length: {len(body)}"], len(body)) +
                     body + hidden)
        self.smuggle("two different Content-Length fields",
                     self.generate_head([auth, "Content-Length: 0"], len(body)) + body)
        for byte in (b"\x00", b"\x01", b"\x7f"):
            self.smuggle(f"{byte!r} in the key",
                         self.generate_head([auth.encode().decode() + byte.decode() + "junk"],
                                            len(body)) + body)
        self.smuggle("obsolete line folding",
                     self.generate_head(["X-Folded: first", "  continued", auth], len(body)) +
                     body)
        self.smuggle("folded Authorization",
                     self.generate_head(["Authorization: Bearer", f" {self.KEY}"], len(body)) +
                     body)

        lower, _ = timed(lambda: self.keyed(f"Authorization: bearer {self.KEY}"))
        self.record(lowercase_bearer_accepted=lower is not None)
        self.expect.assertIsNotNone(lower, "`bearer` (RFC 9110: case-insensitive) refused")
        generate1 = self.latencies(lambda: self.keyed(auth), 3)
        self.record(generate_after=generate1)
        self.expect.assertFalse(generate1["errors"], "not serving after the smuggling")

    def keyed(self, auth):
        body = {"prompt": "a keyed chair", "resolutionBase": RES}
        with RawConnection(self.server.http_port, timeout=LOADED_TIMEOUT_S) as c:
            c.send(post_bytes(GENERATE, body, [auth, "Connection: close"]))
            status, _, payload = c.response()
        if status != 200:
            raise AssertionError(f"generate with {auth[:22]}...: {status} {payload[:200]!r}")
        return payload


# --- 7. gRPC calls that never send their message -----------------------------------------------

class StalledGrpcCalls:
    """`calls` GenerateMesh calls over `channels` connections (each its own, not gRPC's shared
    subchannel), each opened and never sent a message, on an asyncio loop in a thread of its
    own (no thread per call). results: the status code names the clients saw."""

    def __init__(self, address, calls, channels, timeout):
        self.address, self.calls, self.channels, self.timeout = address, calls, channels, timeout
        self.results = []
        self.error = None
        self.opened = threading.Event()
        self.loop = None
        self.stop = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self.thread.start()
        if not self.opened.wait(60):
            raise TimeoutError("the stalled calls were not opened within 60 s")
        if self.error:
            raise self.error
        return self

    def __exit__(self, *exc):
        if self.thread.is_alive() and self.loop is not None:
            self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(self.timeout + 30)

    def wait(self, timeout):
        self.thread.join(timeout)
        return not self.thread.is_alive()

    def finished(self):
        return len(self.results)

    def _run(self):
        try:
            asyncio.run(self._main())
        except BaseException as e:  # noqa: BLE001
            self.error = e
            self.opened.set()

    async def _one(self, channel):
        call = channel.stream_unary(GENERATE_METHOD, request_serializer=None,
                                    response_deserializer=None)(timeout=self.timeout)
        try:
            await call
            code = "OK"
        except grpc.aio.AioRpcError as e:
            code = e.code().name
        except asyncio.CancelledError:
            code = "CLIENT_STOPPED"
        self.results.append(code)

    async def _main(self):
        self.loop = asyncio.get_running_loop()
        self.stop = asyncio.Event()
        channels = [grpc.aio.insecure_channel(
            self.address, options=e2e.CHANNEL_OPTIONS + [("grpc.use_local_subchannel_pool", 1),
                                                         ("cube3d.hostile.channel", i)])
            for i in range(self.channels)]
        try:
            for channel in channels:
                await asyncio.wait_for(channel.channel_ready(), 30)
            tasks = [asyncio.create_task(self._one(channels[i % self.channels]))
                     for i in range(self.calls)]
            await asyncio.sleep(0)
            self.opened.set()
            stopper = asyncio.create_task(self.stop.wait())
            await asyncio.wait([asyncio.gather(*tasks), stopper],
                               return_when=asyncio.FIRST_COMPLETED)
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            stopper.cancel()
        finally:
            for channel in channels:
                await channel.close()


class ThreadSampler:
    """Samples a process's thread count every 0.1 s while in use: the highest seen."""

    def __init__(self, pid):
        self.pid = pid
        self.highest = proc_status(pid, "Threads") or 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.done.wait(0.1):
            self.highest = max(self.highest, proc_status(self.pid, "Threads") or 0)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join(5)


class StalledGrpcCallsTest(HostileTestCase):
    SCENARIO = "7_stalled_grpc_calls"
    CALLS = 2000
    CHANNELS = 25  # 80 calls each, under max_concurrent_streams (100 per connection)
    MAX_AWAITING = 1024  # grpc.max_calls_awaiting_message's default
    READ_TIMEOUT_MS = 8000
    MAX_THREADS = 300
    HTTP = False
    SERVER_ARGS = ["--set", "grpc.max_threads=256",
                   "--set", f"limits.request_read_timeout_ms={READ_TIMEOUT_MS}"]

    def grpc_generate(self):
        return self.server.stub().GenerateMesh(make_request("a normal gRPC chair"),
                                               timeout=LOADED_TIMEOUT_S)

    @tolerated
    def test_stalled_calls_hold_no_threads_and_are_counted(self):
        pid = self.server.proc.pid
        counts_start = self.request_counts()
        generate0 = self.baseline(self.grpc_generate)
        threads0 = proc_status(pid, "Threads")
        # The baseline's calls: its warm-up and its runs.
        counts_before = self.settled_request_counts(counts_start, 1 + len(generate0["all_s"]) +
                                                    len(generate0["errors"]))
        with ThreadSampler(pid) as sampler, \
                StalledGrpcCalls(self.server.address, self.CALLS, self.CHANNELS,
                                 timeout=self.READ_TIMEOUT_MS / 1000 + 30) as stalled:
            # Every call is at the server once the oldest beyond the bound have been refused
            # (an old server refuses none: then after 10 s).
            start = time.monotonic()
            while stalled.finished() < self.CALLS - self.MAX_AWAITING and \
                    time.monotonic() - start < 10:
                time.sleep(0.05)
            all_open_s = round(time.monotonic() - start, 2)
            threads_open = proc_status(pid, "Threads")
            generate1 = self.latencies(self.grpc_generate, 3)
            ended = stalled.wait(self.READ_TIMEOUT_MS / 1000 + 30)
            ended_s = round(time.monotonic() - start, 2)
        seen = collections.Counter(stalled.results)
        # What all clients saw: the stalled calls and the normal ones (the baseline's before
        # counts_before).
        seen_all = seen + collections.Counter({"OK": len(generate1["all_s"])})
        failed_normal = len(generate1["errors"])
        delta = {}
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            now = self.request_counts()
            delta = {c: now[c] - counts_before[c] for c in set(now) | set(counts_before)
                     if now[c] != counts_before[c]}
            if delta == dict(seen_all) and not failed_normal:
                break
            time.sleep(0.2)
        self.record(calls=self.CALLS, channels=self.CHANNELS, all_at_server_after_s=all_open_s,
                    ended=ended, all_ended_after_s=ended_s,
                    threads_before=threads0, threads_while_open=threads_open,
                    threads_highest=sampler.highest,
                    generate_unloaded=generate0, generate_loaded=generate1,
                    stalled_codes=dict(seen), request_count_delta=delta)

        self.expect.assertTrue(ended, "stalled calls still open after the read timeout")
        self.expect.assertEqual(sum(seen.values()), self.CALLS)
        self.expect.assertLessEqual(set(seen), {"RESOURCE_EXHAUSTED", "CANCELLED"}, dict(seen))
        self.expect.assertGreaterEqual(seen["RESOURCE_EXHAUSTED"], self.CALLS - self.MAX_AWAITING,
                                       "the oldest beyond grpc.max_calls_awaiting_message")
        self.expect.assertLess(sampler.highest, self.MAX_THREADS, "server threads")
        self.expect.assertFalse(generate1["errors"], generate1["errors"])
        self.expect.assertTrue(within(generate1["median_s"], generate0["median_s"], 2),
                               f"gRPC generate: {generate1} loaded vs {generate0} unloaded")
        self.expect.assertEqual(delta, dict(seen_all),
                                "cube3d_requests_total deltas vs what the clients saw")
        self.assert_still_serving()


# --- 8. gRPC connection lifetime ---------------------------------------------------------------

class GrpcConnectionWatch:
    """A channel of its own (its own TCP connection) and the connection it is on, watched in
    /proc/net/tcp."""

    def __init__(self, server, options=()):
        self.server = server
        self.channel = grpc.insecure_channel(
            server.address, options=e2e.CHANNEL_OPTIONS + [("grpc.use_local_subchannel_pool", 1),
                                                           *options])
        self.health = e2e.health_grpc.HealthStub(self.channel)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.channel.close()

    def check(self):
        return rpc_code(lambda: self.health.Check(e2e.health_pb.HealthCheckRequest(),
                                                  timeout=5))[0]

    def connect(self):
        """Connects (a call) and returns the local port of the new connection (`others`: the
        connections to the server that were there before)."""
        others = self.others = established_client_ports(self.server.port)
        code = self.check()
        if code != grpc.StatusCode.OK:
            raise AssertionError(f"the first call: {code}")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            mine = established_client_ports(self.server.port) - others
            if len(mine) == 1:
                return mine.pop()
            time.sleep(0.02)
        raise AssertionError(f"no single new connection to port {self.server.port}")

    def wait_gone(self, port, timeout, busy):
        """Seconds until the connection from `port` is no longer established (None: still there
        after `timeout`), calling every 0.25 s meanwhile when busy: [codes of those calls]."""
        start = time.monotonic()
        codes = []
        while time.monotonic() - start < timeout:
            if port not in established_client_ports(self.server.port):
                return round(time.monotonic() - start, 2), codes
            if busy:
                codes.append(self.check().name)
            time.sleep(0.25 if busy else 0.05)
        return None, codes


class GrpcConnectionAgeTest(HostileTestCase):
    """A connection's age ends it in one of two ways: a client with no call open closes the
    connection itself on the server's GOAWAY (at the age); one with a call still open keeps it
    until the server closes it at the age plus the grace."""

    SCENARIO = "8_grpc_connection_age"
    AGE_MS = 2000
    GRACE_MS = 1000
    IDLE_MS = 60000  # far longer: what closes the connections here is their age
    HTTP = False
    SERVER_ARGS = ["--set", f"grpc.max_connection_age_ms={AGE_MS}",
                   "--set", f"grpc.max_connection_age_grace_ms={GRACE_MS}",
                   "--set", f"grpc.max_connection_idle_ms={IDLE_MS}"]

    @tolerated
    def test_connections_are_closed_at_their_age(self):
        generate0 = self.baseline(lambda: self.server.stub().GenerateMesh(make_request(),
                                                                           timeout=30))
        age, grace = self.AGE_MS / 1000, self.GRACE_MS / 1000
        limit = age * 1.1 + grace + 2  # gRPC's +-10% jitter, and a margin
        with GrpcConnectionWatch(self.server) as busy:
            first = busy.connect()
            connected = time.monotonic()
            # Calls all along (never idle, never a call open for long).
            gone_after, codes = busy.wait_gone(first, limit + 5, busy=True)
            open_s = round(time.monotonic() - connected, 2)
            # A later call, over a new connection of the channel's: the busy calls made it
            # during the grace period already.
            later = busy.check()
            second = sorted(established_client_ports(self.server.port) - busy.others - {first})
        with GrpcConnectionWatch(self.server) as holder:
            port = holder.connect()
            release = threading.Event()

            def nothing():
                release.wait(60)
                return
                yield  # a request stream that sends nothing until released

            # A call open across the grace (it never sends its message; the read timeout is
            # the default 30 s): the server must close the connection under it.
            held = holder.channel.stream_unary(GENERATE_METHOD, request_serializer=None,
                                               response_deserializer=None).future(
                nothing(), timeout=60)
            try:
                held_gone_after, _ = holder.wait_gone(port, limit + 5, busy=False)
                held_code = rpc_code(lambda: held.result(timeout=10))[0]
            except grpc.FutureTimeoutError:
                held_code = None
            finally:
                release.set()
                held.cancel()
        self.record(age_s=age, grace_s=grace, limit_s=round(limit, 2),
                    busy_closed_after_s=gone_after, calls_meanwhile=collections.Counter(codes),
                    later_call=later.name, new_connections=second,
                    held_closed_after_s=held_gone_after,
                    held_call=held_code.name if held_code else None,
                    generate_unloaded=generate0)

        self.expect.assertIsNotNone(gone_after, f"the connection was still open after {open_s} s")
        if gone_after is not None:
            self.expect.assertGreaterEqual(gone_after, age * 0.9 - 0.3, "closed before its age")
            self.expect.assertLessEqual(gone_after, limit, "closed late")
        self.expect.assertEqual(later, grpc.StatusCode.OK, "a call after the close")
        self.expect.assertTrue(second, "no new connection for the later calls")
        self.expect.assertEqual(set(codes), {"OK"}, "calls failed while the connection aged out")
        self.expect.assertIsNotNone(held_gone_after, "a connection with a call open was never "
                                    "closed")
        if held_gone_after is not None:
            self.expect.assertGreaterEqual(held_gone_after, age * 0.9 + grace - 0.3,
                                           "a connection with a call open closed before the "
                                           "grace ended")
            self.expect.assertLessEqual(held_gone_after, limit, "closed late")
        self.expect.assertNotIn(held_code, (None, grpc.StatusCode.OK),
                                "the call open across the grace did not end")


class GrpcPingFloodTest(HostileTestCase):
    SCENARIO = "8b_grpc_ping_flood"
    HTTP = False
    # The ping defaults: min_client_ping_interval_ms 10000, max_ping_strikes 2. A short handshake
    # deadline, for the silent connections' test (gRPC's own default held one for 120 s).
    HANDSHAKE_MS = 1500
    SERVER_ARGS = ["--set", f"grpc.handshake_timeout_ms={HANDSHAKE_MS}"]

    @tolerated
    def test_a_connection_that_never_speaks_is_closed_at_the_handshake_timeout(self):
        limit = self.HANDSHAKE_MS / 1000
        closed_after = []
        # Nothing at all, and half of HTTP/2's preface then nothing.
        for first_bytes in (b"", b"PRI * HTTP/2.0\r\n"):
            sock = socket.create_connection((HOST, self.server.port), timeout=limit + 10)
            start = time.monotonic()
            try:
                if first_bytes:
                    sock.sendall(first_bytes)
                while sock.recv(65536):  # the server's SETTINGS, if it sends any, then the close
                    pass
            except (socket.timeout, ConnectionResetError):
                pass
            finally:
                sock.close()
            closed_after.append(round(time.monotonic() - start, 2))
        later = rpc_code(lambda: self.server.stub().GenerateMesh(make_request(), timeout=30))[0]
        self.record(handshake_timeout_s=limit, silent_connections_closed_after_s=closed_after,
                    call_after_silent_connections=later.name)
        for after in closed_after:
            self.expect.assertLessEqual(after, limit + 3, "a silent connection outlived "
                                        "grpc.handshake_timeout_ms")
            self.expect.assertGreaterEqual(after, limit * 0.8, "closed before the deadline")
        self.expect.assertEqual(later, grpc.StatusCode.OK, "a call after the silent connections")
    PINGS = [("grpc.keepalive_time_ms", 1000), ("grpc.keepalive_timeout_ms", 5000),
             ("grpc.keepalive_permit_without_calls", 1), ("grpc.http2.max_pings_without_data", 0)]

    @tolerated
    def test_a_client_that_pings_too_often_is_sent_away(self):
        with GrpcConnectionWatch(self.server, self.PINGS) as pinger, \
                GrpcConnectionWatch(self.server) as polite:
            polite_port = polite.connect()
            port = pinger.connect()
            # A ping a second: the third strike (about 3 s in) closes it; 15 s at most.
            gone_after, _ = pinger.wait_gone(port, 15, busy=False)
            polite_still_there = polite_port in established_client_ports(self.server.port)
            later = pinger.check()
        self.record(closed_after_s=gone_after, later_call=later.name,
                    polite_connection_kept=polite_still_there)

        self.expect.assertIsNotNone(gone_after, "a client pinging every second was never sent "
                                    "away")
        self.expect.assertTrue(polite_still_there, "a polite client's connection was closed too")
        self.expect.assertEqual(later, grpc.StatusCode.OK, "a call after the GOAWAY")


if __name__ == "__main__":
    unittest.main()
