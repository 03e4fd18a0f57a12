"""What every e2e suite needs to run cube3d-server: a server process on free loopback ports
(gRPC, metrics, and the HTTP/JSON gateway when asked for), started and waited for until it
serves, retried on new ports when another process took one first, and stopped with SIGTERM; the
base TestCase classes (one server per class, its log printed when a test fails, SIGTERM and exit
code 0 expected at teardown); the gRPC stubs, generated at test time with grpc_tools.protoc by
setUpModule; and the request and metrics helpers the suites share.

A suite imports it from its own folder (ctest runs the suites with WORKING_DIRECTORY tests/e2e,
as one does by hand) and calls setUpModule / tearDownModule from its own:

    import server_process as e2e
    setUpModule = e2e.setUpModule
    tearDownModule = e2e.tearDownModule

The generated modules (pb, pb_grpc, health_pb, health_grpc, refl_pb) are this module's globals,
set by setUpModule: read them as e2e.pb and so on, at run time, never with `from ... import`.
"""
import hashlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

import grpc
from grpc_tools import protoc

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("CUBE3D_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
BIN_DIR = os.environ.get("CUBE3D_BIN_DIR") or os.path.join(SOURCE, "build", "bin")
SERVER_BIN = os.path.join(BIN_DIR, "cube3d-server")
CLIENT_BIN = os.path.join(BIN_DIR, "cube3d-client")
DEMO_CONFIG = os.path.join(SOURCE, "models", "demo-server.yaml")

HOST = "127.0.0.1"
TOKENS = 64              # the demo model's shape tokens per mesh (num_encoder_latents)
VOCAB = 256              # the demo model's codebook size
RES = 4                  # cheap meshing: a 17^3 grid
STARTUP_TIMEOUT_S = 180  # model load (random weights) + warm-up on a loaded 2-core machine
STOP_TIMEOUT_S = 90      # SIGTERM to exit: drain grace is 30 s, plus gRPC shutdown
RPC_TIMEOUT_S = 120      # one request, generously
LOG_TAIL_LINES = 200

# Loopback only, and never through a proxy from the environment.
CHANNEL_OPTIONS = [("grpc.enable_http_proxy", 0), ("grpc.max_receive_message_length", -1)]

# What the server logs when one of its ports is not to be had: another process took it between
# free_ports() and the server's bind, or (ports picked apart) it equals another of the server's.
# start() then tries new ports.
PORT_CLASH_MARKERS = ("cannot listen", "Address already in use", "uses the port of")

JSON_HEADERS = {"Content-Type": "application/json"}

# --- protos generated at test time ------------------------------------------------------------

# grpcio-health-checking and grpcio-reflection are not installed; these are the subsets of the
# standard protos the tests need. The proto packages (hence the method paths on the wire) are
# the standard ones; the file names differ so that the generated modules do not shadow `grpc`.
HEALTH_PROTO = """
syntax = "proto3";
package grpc.health.v1;
message HealthCheckRequest { string service = 1; }
message HealthCheckResponse {
  enum ServingStatus { UNKNOWN = 0; SERVING = 1; NOT_SERVING = 2; SERVICE_UNKNOWN = 3; }
  ServingStatus status = 1;
}
service Health { rpc Check(HealthCheckRequest) returns (HealthCheckResponse); }
"""

REFLECTION_PROTO = """
syntax = "proto3";
package grpc.reflection.v1alpha;
message ServerReflectionRequest {
  string host = 1;
  oneof message_request { string file_containing_symbol = 4; string list_services = 7; }
}
message FileDescriptorResponse { repeated bytes file_descriptor_proto = 1; }
message ServiceResponse { string name = 1; }
message ListServiceResponse { repeated ServiceResponse service = 1; }
message ErrorResponse { int32 error_code = 1; string error_message = 2; }
message ServerReflectionResponse {
  string valid_host = 1;
  oneof message_response {
    FileDescriptorResponse file_descriptor_response = 4;
    ListServiceResponse list_services_response = 6;
    ErrorResponse error_response = 7;
  }
}
service ServerReflection {
  rpc ServerReflectionInfo(stream ServerReflectionRequest)
      returns (stream ServerReflectionResponse);
}
"""

pb = pb_grpc = health_pb = health_grpc = refl_pb = None
_gen_dir = None


def _protoc(include_dir, out_dir, proto):
    args = ["grpc_tools.protoc", f"-I{include_dir}", f"--python_out={out_dir}",
            f"--grpc_python_out={out_dir}", proto]
    if protoc.main(args) != 0:
        raise RuntimeError(f"grpc_tools.protoc failed for {proto}")


def setUpModule():
    global pb, pb_grpc, health_pb, health_grpc, refl_pb, _gen_dir
    for binary in (SERVER_BIN, CLIENT_BIN):
        if not os.access(binary, os.X_OK):
            raise RuntimeError(f"{binary} is missing: build the cube3d-server and cube3d-client "
                               f"targets (CUBE3D_BIN_DIR={BIN_DIR})")
    _gen_dir = tempfile.TemporaryDirectory(prefix="cube3d-e2e-stubs-")
    root = _gen_dir.name
    protos = os.path.join(root, "protos")
    out = os.path.join(root, "gen")
    os.makedirs(protos)
    os.makedirs(out)
    for name, text in (("cube3d_e2e_health.proto", HEALTH_PROTO),
                       ("cube3d_e2e_reflection.proto", REFLECTION_PROTO)):
        with open(os.path.join(protos, name), "w") as f:
            f.write(text)
        _protoc(protos, out, name)
    _protoc(os.path.join(SOURCE, "proto"), out, "cube3d/v1/mesh_service.proto")
    sys.path.insert(0, out)
    from cube3d.v1 import mesh_service_pb2, mesh_service_pb2_grpc  # noqa: E402
    import cube3d_e2e_health_pb2
    import cube3d_e2e_health_pb2_grpc
    import cube3d_e2e_reflection_pb2
    pb, pb_grpc = mesh_service_pb2, mesh_service_pb2_grpc
    health_pb, health_grpc = cube3d_e2e_health_pb2, cube3d_e2e_health_pb2_grpc
    refl_pb = cube3d_e2e_reflection_pb2


def tearDownModule():
    if _gen_dir is not None:
        _gen_dir.cleanup()


# --- helpers -----------------------------------------------------------------------------------

def free_ports(n):
    """n distinct free loopback ports (bound together, then released)."""
    sockets = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((HOST, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def make_request(prompt="a small wooden chair", **fields):
    """A GenerateMeshRequest; resolution_base defaults to RES (cheap meshing)."""
    fields.setdefault("resolution_base", RES)
    return pb.GenerateMeshRequest(prompt=prompt, **fields)


def mesh_without_request_id(data):
    """A mesh file's bytes with its provenance's request_id taken out, to compare the meshes of two
    requests (each file records the id of the request that computed it): a GLB as its JSON chunk
    without asset.extras.request_id (re-serialized, keys sorted) and its binary chunk; an OBJ or
    PLY without the request_id header line."""
    if data[:4] == b"glTF":
        import struct
        json_length = struct.unpack_from("<I", data, 12)[0]
        document = json.loads(data[20:20 + json_length])
        document.get("asset", {}).get("extras", {}).pop("request_id", None)
        return json.dumps(document, sort_keys=True).encode() + data[20 + json_length:]
    return re.sub(rb"(?m)^(# |comment )request_id: .*\n", b"", data)


def bearer(secret):
    """gRPC metadata carrying an API key."""
    return (("authorization", f"Bearer {secret}"),)


def auth(secret):
    """HTTP headers carrying an API key."""
    return {"Authorization": f"Bearer {secret}"}


def rpc_code(fn):
    """Runs fn(); returns (grpc.StatusCode, details or result)."""
    try:
        return grpc.StatusCode.OK, fn()
    except grpc.RpcError as e:
        return e.code(), e.details() or ""


def parse_metrics(text):
    """Prometheus text format -> [(name, {label: value}, float)]."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)", line)
        if not m:
            raise AssertionError(f"unparsable metrics line: {line!r}")
        labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        samples.append((m.group(1), labels, float(m.group(3))))
    return samples


def metric_value(samples, name, **labels):
    """Sum of the samples called `name` whose labels include `labels`; None when there are none."""
    values = [v for n, l, v in samples
              if n == name and all(l.get(k) == want for k, want in labels.items())]
    return sum(values) if values else None


def poll_metrics(scrape, predicate, timeout):
    """Calls scrape() (parsed samples) every 0.2 s until predicate(samples) holds or `timeout`
    seconds have passed: (whether it held, the last samples)."""
    deadline = time.monotonic() + timeout
    samples = []
    while time.monotonic() < deadline:
        samples = scrape()
        if predicate(samples):
            return True, samples
        time.sleep(0.2)
    return False, samples


def http_call(port, method, path, body=None, headers=None, timeout=RPC_TIMEOUT_S):
    """One request on its own connection: (status, headers, body bytes). A dict body is sent as
    JSON."""
    headers = dict(headers or {})
    if isinstance(body, dict):
        body = json.dumps(body)
        headers = {**JSON_HEADERS, **headers}
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.headers, response.read()
    finally:
        conn.close()


def keys_yaml(entries):
    """An auth.api_keys_file for [(name, secret, {extra fields})]."""
    lines = ["keys:"]
    for name, secret, extra in entries:
        lines.append(f"  - name: {name}")
        lines.append(f"    sha256: {hashlib.sha256(secret.encode()).hexdigest()}")
        for k, v in extra.items():
            lines.append(f"    {k}: {v}")
    return "\n".join(lines) + "\n"


def write_slow_model(folder, n_embd=768, n_layer=8):
    """models/demo.yaml made wider (random weights still), so that the server takes a while to
    load it (the defaults: about a second), written to FOLDER/slow.yaml; returns its path."""
    with open(os.path.join(SOURCE, "models", "demo.yaml")) as f:
        model_yaml = f.read()
    for key, value in (("n_embd", str(n_embd)), ("n_layer", str(n_layer)), ("width", "512"),
                       ("num_decoder_layers", "8")):
        model_yaml = re.sub(rf"(\n\s+{key}:)\s*\S+", rf"\1 {value}", model_yaml)
    model_path = os.path.join(folder, "slow.yaml")
    with open(model_path, "w") as f:
        f.write(model_yaml)
    return model_path


# --- the server process ------------------------------------------------------------------------

class ServerProcess:
    """One cube3d-server with the demo config on free loopback ports, logging to a temp file.

    extra_args go after the ports (flags and --set overrides: the last of each wins). With
    http=True the HTTP/JSON gateway listens too, on a port picked with the others (http_port).
    channel_options are added to CHANNEL_OPTIONS for the process's own channel. config is the
    server YAML (None: DEMO_CONFIG). cache=False (the default) turns the result cache off, so
    that identical requests are computed (the suites of batching, determinism and load count
    computations); the cache's own suites pass cache=True.
    """

    def __init__(self, extra_args, log_dir, http=False, channel_options=(), config=None,
                 cache=False):
        self.extra_args = list(extra_args)
        self.cache = cache
        self.config = config
        self.log_dir = log_dir
        self.http_enabled = http
        self.channel_options = CHANNEL_OPTIONS + list(channel_options)
        self.proc = None
        self.channel = None
        self.log_path = None
        self.port = self.metrics_port = self.http_port = None
        self.returncode = None

    # -- lifecycle --

    def start(self, attempts=3):
        """Starts the server and waits for health SERVING; retries on a port clash."""
        for attempt in range(attempts):
            self.launch(attempt)
            try:
                self.wait_serving()
                return
            except AssertionError:
                clash = self.port_clash()
                self.kill()
                if not clash or attempt + 1 == attempts:
                    raise

    def launch(self, attempt=0):
        """Starts the process on new free ports and opens the channel, without waiting for it to
        serve (start() waits; tests of start-up watch it themselves)."""
        ports = free_ports(3 if self.http_enabled else 2)
        self.port, self.metrics_port = ports[0], ports[1]
        self.http_port = ports[2] if self.http_enabled else None
        self.spawn(f"server-{self.port}-{attempt}.log")

    def spawn(self, log_name):
        """Starts the process on the ports picked (port, metrics_port, http_port), logging to
        log_dir/log_name, and opens the channel."""
        self.log_path = os.path.join(self.log_dir, log_name)
        args = [SERVER_BIN, "--config", self.config or DEMO_CONFIG,
                "--listen", f"{HOST}:{self.port}",
                "--metrics-listen", f"{HOST}:{self.metrics_port}"]
        if self.http_enabled:
            args += ["--http-listen", f"{HOST}:{self.http_port}"]
        args += ["--log-level", "info"]
        if not self.cache:
            args += ["--set", "cache.enabled=false"]
        args += self.extra_args
        self.returncode = None
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=SOURCE)
        self.close_channel()
        self.channel = self.open_channel()

    def open_channel(self):
        """The channel to the gRPC port that health() and stub() use."""
        return grpc.insecure_channel(self.address, options=self.channel_options)

    def port_clash(self):
        """Whether the log says that one of the ports could not be had."""
        log = self.log()
        return any(marker in log for marker in PORT_CLASH_MARKERS)

    def wait_serving(self, timeout=STARTUP_TIMEOUT_S):
        health = health_grpc.HealthStub(self.channel)
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"cube3d-server exited with {self.proc.returncode} before "
                                     f"serving:\n{self.log_tail()}")
            try:
                status = health.Check(health_pb.HealthCheckRequest(), timeout=2).status
                last = health_pb.HealthCheckResponse.ServingStatus.Name(status)
                if status == health_pb.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError as e:
                last = e.code().name
            time.sleep(0.1)
        raise AssertionError(f"cube3d-server not SERVING after {timeout} s (last: {last}):\n"
                             f"{self.log_tail()}")

    def terminate(self):
        """Sends SIGTERM (the drain), without waiting."""
        self.proc.send_signal(signal.SIGTERM)

    def wait_exit(self, timeout=STOP_TIMEOUT_S):
        """Waits for the process; kills it with SIGKILL and fails after `timeout`."""
        try:
            self.returncode = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"cube3d-server did not exit within {timeout} s of SIGTERM "
                                 f"(killed):\n{self.log_tail()}")
        finally:
            self.close_channel()
        return self.returncode

    def stop(self):
        """SIGTERM and wait; asserts exit code 0."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.terminate()
        rc = self.wait_exit()
        if rc != 0:
            raise AssertionError(f"cube3d-server exited with {rc} after SIGTERM:\n"
                                 f"{self.log_tail()}")

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        self.close_channel()

    def close_channel(self):
        if self.channel is not None:
            self.channel.close()
            self.channel = None

    # -- access --

    @property
    def address(self):
        return f"{HOST}:{self.port}"

    def stub(self):
        return pb_grpc.MeshServiceStub(self.channel)

    def health(self, timeout=5, service=""):
        """The health status name of `service` ("" = the server), or the RPC error's code name."""
        try:
            status = health_grpc.HealthStub(self.channel).Check(
                health_pb.HealthCheckRequest(service=service), timeout=timeout).status
            return health_pb.HealthCheckResponse.ServingStatus.Name(status)
        except grpc.RpcError as e:
            return e.code().name

    def http_get(self, path, timeout=10):
        """GET on the metrics port: (status, body text); an HTTP error status raises."""
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"http://{HOST}:{self.metrics_port}{path}", timeout=timeout) as r:
            return r.status, r.read().decode()

    def metrics(self):
        """A scrape of the metrics port, parsed."""
        status, body = self.http_get("/metrics")
        if status != 200:
            raise AssertionError(f"/metrics answered {status}")
        return parse_metrics(body)

    def http(self, method, path, body=None, headers=None, timeout=RPC_TIMEOUT_S):
        """A request to the HTTP gateway (http=True): (status, headers, body bytes)."""
        return http_call(self.http_port, method, path, body, headers, timeout)

    def http_metrics(self):
        """A scrape of the HTTP gateway's /metrics, parsed."""
        status, _, body = self.http("GET", "/metrics", timeout=10)
        if status != 200:
            raise AssertionError(f"/metrics answered {status}")
        return parse_metrics(body.decode())

    def log(self):
        if not self.log_path or not os.path.exists(self.log_path):
            return ""
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def log_tail(self, lines=LOG_TAIL_LINES):
        text = self.log().splitlines()
        return "\n".join(text[-lines:])


class ReplicaProcess(ServerProcess):
    """A server that can come back on the ports it had (restart(): a pod restarted behind its
    Service)."""

    def launch(self, attempt=0):
        if self.port is None:
            return super().launch(attempt)
        self.spawn(f"server-{self.port}-restart.log")

    def restart(self):
        """Starts the process again on the same ports and waits for SERVING (a port the killed
        process held may take a moment to bind: retried)."""
        for _ in range(10):
            self.launch()
            try:
                self.wait_serving()
                return
            except AssertionError:
                if not self.port_clash():
                    raise
                self.kill()
                time.sleep(0.5)
        raise AssertionError("the replica could not have its ports back")


class TlsServerProcess(ServerProcess):
    """A ServerProcess whose gRPC port speaks TLS only (tls.cert_file, tls.key_file): its own
    channel, hence its health checks, goes over TLS too, expecting the certificate to name
    `server_name` (connecting by IP to a certificate for localhost). With client_ca the server
    asks for client certificates (mutual TLS); client_cert and client_key are what the channel
    presents then."""

    def __init__(self, cert, key, log_dir, extra_args=(), http=False, client_ca=None,
                 client_cert=None, client_key=None, server_name="localhost", channel_options=()):
        tls_args = ["--set", f"tls.cert_file={cert}", "--set", f"tls.key_file={key}"]
        if client_ca is not None:
            tls_args += ["--set", f"tls.client_ca_file={client_ca}"]
        super().__init__(tls_args + list(extra_args), log_dir, http=http,
                         channel_options=[("grpc.ssl_target_name_override", server_name),
                                          *channel_options])
        self.cert = cert
        self.client_cert = client_cert
        self.client_key = client_key

    def open_channel(self):
        def read(path):
            if path is None:
                return None
            with open(path, "rb") as f:
                return f.read()

        credentials = grpc.ssl_channel_credentials(
            root_certificates=read(self.cert), private_key=read(self.client_key),
            certificate_chain=read(self.client_cert))
        return grpc.secure_channel(self.address, credentials, options=self.channel_options)


# --- test cases with one server per class ------------------------------------------------------

class ServerTestCase(unittest.TestCase):
    """Starts one server for the class (SERVER_ARGS; the HTTP gateway too when HTTP), stops it
    with SIGTERM, expects exit 0. make_server() makes it: override it for another kind."""

    SERVER_ARGS = []
    HTTP = False
    CACHE = False  # the result cache (ServerProcess's cache)
    TMP_PREFIX = "cube3d-e2e-"
    server = None

    @classmethod
    def make_server(cls, tmp_dir):
        """The class's server, not started yet; it logs to (and may keep files in) tmp_dir."""
        return ServerProcess(cls.SERVER_ARGS, tmp_dir, http=cls.HTTP, cache=cls.CACHE)

    @classmethod
    def setUpClass(cls):
        # What a class starts is undone by class cleanups (addClassCleanup), which unittest runs
        # after tearDownClass and also when setUpClass fails, here or in a subclass's part after
        # super().setUpClass(): a subclass registers its own (a second server, a browser) the
        # same way and needs no try/except of its own.
        cls._tmp = tempfile.TemporaryDirectory(prefix=cls.TMP_PREFIX)
        cls.addClassCleanup(cls._tmp.cleanup)
        cls.ok_requests = 0
        cls._count_lock = threading.Lock()
        cls.server = cls.make_server(cls._tmp.name)
        cls.addClassCleanup(cls.server.kill)
        cls.server.start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def run(self, result=None):
        # Print the server's log when this test fails or errors.
        before = len(result.failures) + len(result.errors) if result else 0
        outcome = super().run(result)
        if result is not None and len(result.failures) + len(result.errors) > before \
                and self.server is not None:
            sys.stderr.write(f"\n----- cube3d-server log ({self.id()}) -----\n"
                             f"{self.server.log_tail()}\n----- end of log -----\n")
        return outcome

    # -- request helpers --

    def count_ok(self, n=1):
        with self._count_lock:
            type(self).ok_requests += n

    def generate(self, request, timeout=RPC_TIMEOUT_S):
        response = self.server.stub().GenerateMesh(request, timeout=timeout)
        self.count_ok()
        return response

    def generate_all(self, requests, timeout=RPC_TIMEOUT_S):
        """Sends every request at once (futures); returns [(code, response or details)]."""
        stub = self.server.stub()
        futures = [stub.GenerateMesh.future(r, timeout=timeout) for r in requests]
        outcomes = []
        for f in futures:
            try:
                outcomes.append((grpc.StatusCode.OK, f.result(timeout=timeout + 30)))
                self.count_ok()
            except grpc.RpcError as e:
                outcomes.append((e.code(), e.details() or ""))
        return outcomes

    def assert_mesh(self, response, fmt=None):
        fmt = pb.MESH_FORMAT_GLB if fmt is None else fmt
        self.assertEqual(response.format, fmt)
        self.assertGreater(response.vertex_count, 0)
        self.assertGreater(response.face_count, 0)
        if fmt == pb.MESH_FORMAT_RAW:
            self.assertEqual(len(response.raw.vertices), 3 * response.vertex_count)
            self.assertEqual(len(response.raw.indices), 3 * response.face_count)
        else:
            self.assertGreater(len(response.encoded), 0)
        if fmt == pb.MESH_FORMAT_GLB:
            self.assertEqual(response.encoded[:4], b"glTF")

    def assert_still_serving(self):
        self.assertEqual(self.server.health(), "SERVING")
        self.assert_mesh(self.generate(make_request("a mug, after the trouble")))

    def scrape_metrics(self):
        """The scrape wait_for_metrics polls: the server's metrics port."""
        return self.server.metrics()

    def wait_for_metrics(self, predicate, what, timeout=30, explain=None):
        """Polls /metrics until predicate(samples) holds. explain(samples), when given, says
        what differed: it ends the failure's message (the part of a long CI log kept)."""
        held, samples = poll_metrics(self.scrape_metrics, predicate, timeout)
        if held:
            return samples
        self.fail(f"metrics never showed {what} within {timeout} s; last scrape:\n" +
                  "\n".join(f"{n}{l} {v}" for n, l, v in samples if n.startswith("cube3d_")) +
                  (f"\n{explain(samples)}" if explain else ""))


class KeyedServerTestCase(ServerTestCase):
    """A ServerTestCase whose server requires the API keys KEYS (auth.api_keys_file in a temp
    folder, `keys_dir`, at `keys_path`), and refuses the prompts DENYLIST names when set."""

    KEYS = []
    # The text of a policy.prompt_denylist_file for the server (at `denylist_path`, beside the
    # keys); None: no prompt policy.
    DENYLIST = None

    @classmethod
    def setUpClass(cls):
        cls.keys_dir = tempfile.TemporaryDirectory(prefix="cube3d-e2e-keys-")
        cls.addClassCleanup(cls.keys_dir.cleanup)
        cls.keys_path = os.path.join(cls.keys_dir.name, "keys.yaml")
        with open(cls.keys_path, "w") as f:
            f.write(keys_yaml(cls.KEYS))
        cls.SERVER_ARGS = cls.SERVER_ARGS + ["--set", f"auth.api_keys_file={cls.keys_path}"]
        if cls.DENYLIST is not None:
            cls.denylist_path = os.path.join(cls.keys_dir.name, "denylist.txt")
            with open(cls.denylist_path, "w") as f:
                f.write(cls.DENYLIST)
            cls.SERVER_ARGS = cls.SERVER_ARGS + [
                "--set", f"policy.prompt_denylist_file={cls.denylist_path}"]
        super().setUpClass()
