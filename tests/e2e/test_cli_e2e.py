"""The command-line conventions of every binary, end to end (issue 14):

  * --version on every binary: "<tool> <version> (<git revision>)", exit 0;
  * --opt=value as well as --opt value, and the last of a repeated option wins;
  * cube3d-server's CUBE3D_* variables (config file < environment < flags), seen through
    --print-config, and listed by --help;
  * cube3d-client as a tool people keep: --tls / --ca / --server-name against a TLS server, the
    default output file and where it went, a clear error for a URL given as --server, the reason
    of a failed write, progress without '\\r' when stderr is a pipe, what the server reports
    when a call fails UNAVAILABLE because it is still loading, and --wait-ready-ms, which waits
    out the load instead (and for a server that is down, says so when the wait is over).

Uses server_process's helpers (the TLS server process and its test case, the gRPC stubs). Run
by ctest (tests/CMakeLists.txt, test e2e.cli):

    CUBE3D_BIN_DIR=build/bin CUBE3D_SOURCE_DIR=. python3 -m unittest -v test_cli_e2e
"""
import os
import re
import subprocess
import tempfile
import time
import unittest

import server_process as e2e

BINARIES = ["cube3d-server", "cube3d-client", "cube3d-loadgen", "cube3d-generate",
            "cube3d-bench", "cube3d-tokenize"]
SERVER_ENV = ["CUBE3D_CONFIG", "CUBE3D_LISTEN", "CUBE3D_METRICS_LISTEN", "CUBE3D_HTTP_LISTEN",
              "CUBE3D_LOG_LEVEL"]
RUN_TIMEOUT_S = 120
# The demo model's T (tokens per shape): the last progress line shows it done.
TOKENS = e2e.TOKENS


def binary(name):
    return os.path.join(e2e.BIN_DIR, name)


def clean_env(**extra):
    """The environment without proxies (loopback only) and without the server's CUBE3D_*
    variables, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if k.lower() not in ("http_proxy", "https_proxy", "grpc_proxy", "all_proxy")
           and k not in SERVER_ENV}
    env.update(extra)
    return env


def run(name, *args, env=None, cwd=None, timeout=RUN_TIMEOUT_S):
    return subprocess.run([binary(name), *args], capture_output=True, text=True, timeout=timeout,
                          env=env if env is not None else clean_env(), cwd=cwd or e2e.SOURCE,
                          stdin=subprocess.DEVNULL)


def project_version():
    with open(os.path.join(e2e.SOURCE, "CMakeLists.txt")) as f:
        m = re.search(r"project\([^)]*VERSION\s+([0-9.]+)", f.read())
    return m.group(1)


def parse_printed_config(text):
    """--print-config's YAML -> {"dotted.key": "value"}: the scalars, quotes removed. Two levels
    are all the config has; no YAML package needed."""
    values, section = {}, None
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        nested = line[0] == " "
        key, _, value = line.strip().partition(":")
        value = value.strip()
        if not nested:
            section = key if value == "" else None
        name = f"{section}.{key}" if nested else key
        if value:
            values[name] = value.strip('"')
    return values


def setUpModule():
    missing = [name for name in BINARIES if not os.access(binary(name), os.X_OK)]
    if missing:
        raise RuntimeError(f"missing in CUBE3D_BIN_DIR={e2e.BIN_DIR}: {', '.join(missing)} "
                           "(build every target)")
    e2e.setUpModule()  # the gRPC stubs the server helpers use (health checks)


def tearDownModule():
    e2e.tearDownModule()


class VersionTest(unittest.TestCase):
    def test_every_binary(self):
        version = project_version()
        revisions = set()
        for name in BINARIES:
            with self.subTest(binary=name):
                proc = run(name, "--version")
                self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
                m = re.fullmatch(rf"{re.escape(name)} (\S+) \((\S+)\)\n", proc.stdout)
                self.assertIsNotNone(m, repr(proc.stdout))
                self.assertEqual(m.group(1), version)
                revisions.add(m.group(2))
                self.assertEqual(proc.stderr, "")
        self.assertEqual(len(revisions), 1, revisions)  # one build, one revision
        revision = revisions.pop()
        described = subprocess.run(["git", "describe", "--always"], cwd=e2e.SOURCE,
                                   capture_output=True, text=True)
        if described.returncode == 0:
            # Built from this checkout (maybe at an earlier commit): a revision, never "unknown".
            self.assertRegex(revision, r"^[0-9A-Za-z._-]+$")
            self.assertNotEqual(revision, "unknown")

    def test_version_beats_missing_required_options(self):
        # No --config, no --prompt: --version needs neither.
        for name in ("cube3d-server", "cube3d-client", "cube3d-generate"):
            with self.subTest(binary=name):
                self.assertEqual(run(name, "--version").returncode, 0)


class ServerFlagsTest(unittest.TestCase):
    """cube3d-server's flags and CUBE3D_* variables, through --print-config."""

    def print_config(self, *args, **env):
        proc = run("cube3d-server", *args, "--print-config", env=clean_env(**env))
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        return parse_printed_config(proc.stdout)

    def test_equals_form(self):
        config = self.print_config("--config=models/demo-server.yaml", "--listen=127.0.0.1:7001",
                                   "--set=batching.max_queue_delay_ms=7")
        self.assertEqual(config["listen"], "127.0.0.1:7001")
        self.assertEqual(config["batching.max_queue_delay_ms"], "7")

    def test_the_last_listen_wins(self):
        config = self.print_config("--config", e2e.DEMO_CONFIG, "--listen", "127.0.0.1:7001",
                                   "--listen=127.0.0.1:7002")
        self.assertEqual(config["listen"], "127.0.0.1:7002")

    def test_environment_over_file_and_flags_over_environment(self):
        file_config = self.print_config("--config", e2e.DEMO_CONFIG)
        env = {"CUBE3D_LISTEN": "127.0.0.1:7101", "CUBE3D_METRICS_LISTEN": "127.0.0.1:7102",
               "CUBE3D_LOG_LEVEL": "debug", "CUBE3D_LOG_FORMAT": "json"}
        from_env = self.print_config("--config", e2e.DEMO_CONFIG, **env)
        self.assertNotEqual(file_config["listen"], "127.0.0.1:7101")
        self.assertEqual(from_env["listen"], "127.0.0.1:7101")
        self.assertEqual(from_env["metrics_listen"], "127.0.0.1:7102")
        self.assertEqual(from_env["logging.level"], "debug")
        self.assertEqual(from_env["logging.format"], "json")
        flagged = self.print_config("--config", e2e.DEMO_CONFIG, "--listen", "127.0.0.1:7201",
                                    "--log-level=warn", "--log-format", "text", **env)
        self.assertEqual(flagged["listen"], "127.0.0.1:7201")
        self.assertEqual(flagged["logging.level"], "warn")
        self.assertEqual(flagged["logging.format"], "text")
        self.assertEqual(flagged["metrics_listen"], "127.0.0.1:7102")  # no flag: still the env

    def test_config_from_the_environment(self):
        config = self.print_config(CUBE3D_CONFIG=e2e.DEMO_CONFIG)
        self.assertIn("listen", config)
        proc = run("cube3d-server", "--print-config")
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn("--config is required", proc.stderr)
        self.assertIn("CUBE3D_CONFIG", proc.stderr)

    def test_http_listen(self):
        config = self.print_config("--config", e2e.DEMO_CONFIG,
                                   CUBE3D_HTTP_LISTEN="127.0.0.1:7301")
        self.assertEqual(config["http_listen"], "127.0.0.1:7301")
        config = self.print_config("--config", e2e.DEMO_CONFIG, "--http-listen=127.0.0.1:7302",
                                   CUBE3D_HTTP_LISTEN="127.0.0.1:7301")
        self.assertEqual(config["http_listen"], "127.0.0.1:7302")

    def test_help_names_the_variables(self):
        proc = run("cube3d-server", "--help")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        for flag, variable in (("--config", "CUBE3D_CONFIG"), ("--listen", "CUBE3D_LISTEN"),
                               ("--metrics-listen", "CUBE3D_METRICS_LISTEN"),
                               ("--http-listen", "CUBE3D_HTTP_LISTEN"),
                               ("--log-level", "CUBE3D_LOG_LEVEL")):
            # The option's entry: its line and the wrapped lines under it.
            entry = re.search(rf"^  {re.escape(flag)} .*(?:\n {{20,}}\S.*)*", proc.stdout,
                              re.M)
            self.assertIsNotNone(entry, proc.stdout)
            self.assertIn(f"[env: {variable}]", entry.group(0), proc.stdout)
        self.assertIn("--version", proc.stdout)

    def test_errors_name_the_option(self):
        proc = run("cube3d-server", "--config", e2e.DEMO_CONFIG, "--lisen", "x")
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn("unknown option '--lisen' (did you mean --listen?)", proc.stderr)
        proc = run("cube3d-server", "--config", e2e.DEMO_CONFIG, "--print-config=maybe")
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn("--print-config", proc.stderr)


class ClientTest(unittest.TestCase):
    """cube3d-client's own errors: no server needed."""

    def test_url_as_server(self):
        for url in ("http://localhost:1", "https://localhost:1"):
            with self.subTest(url=url):
                proc = run("cube3d-client", "--server", url, "--prompt", "x", "--no-progress")
                self.assertEqual(proc.returncode, 2, proc.stderr)
                self.assertIn("gRPC takes HOST:PORT", proc.stderr)
                self.assertIn("use --tls for TLS", proc.stderr)

    def test_help_explains_server_and_output(self):
        proc = run("cube3d-client", "--help")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        for needle in ("HOST:PORT", "[IPV6]:PORT", "unix:PATH", "default mesh.glb", "--tls",
                       "--ca", "--server-name"):
            self.assertIn(needle, proc.stdout)

    def test_missing_output_folder_fails_before_connecting(self):
        # Port 1: nothing listens; the folder check comes first and names the reason.
        proc = run("cube3d-client", "--server", f"{e2e.HOST}:1", "--prompt", "x",
                   "--out", "/nonexistent-cube3d/mesh.glb", "--no-progress")
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertIn("/nonexistent-cube3d", proc.stderr)
        self.assertIn("No such file or directory", proc.stderr)

    def test_health_without_a_server_is_1(self):
        # --health (the images' HEALTHCHECK): no --prompt needed; nothing on port 1 is not
        # SERVING, exit 1, with the reason.
        proc = run("cube3d-client", "--health", "--server", f"{e2e.HOST}:1", "--timeout-ms", "2000")
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        self.assertIn("cube3d-client: health of cube3d.v1.MeshService at", proc.stderr)
        self.assertIn("UNAVAILABLE", proc.stderr)
        self.assertIn("--health", run("cube3d-client", "--help").stdout)

    def test_waiting_for_a_server_that_is_down_ends_with_why(self):
        started = time.monotonic()
        proc = run("cube3d-client", "--server", f"{e2e.HOST}:1", "--prompt", "x",
                   "--wait-ready-ms", "1000", "--no-progress", cwd=tempfile.gettempdir())
        self.assertEqual(proc.returncode, 3, proc.stdout + proc.stderr)
        self.assertIn(f"cube3d-client: waiting up to 1000 ms for {e2e.HOST}:1 to serve "
                      "cube3d.v1.MeshService", proc.stderr)
        self.assertIn(f"cube3d-client: UNAVAILABLE: no replica of {e2e.HOST}:1 reported SERVING "
                      "within --wait-ready-ms 1000", proc.stderr)
        self.assertIn(f"cube3d-client: {e2e.HOST}:1 does not answer: UNAVAILABLE: ", proc.stderr)
        self.assertGreaterEqual(time.monotonic() - started, 1.0)  # it did wait
        for bad, why in (("-5", "expected a non-negative integer"),
                         ("86400001", "at most 86400000 (a day)")):
            proc = run("cube3d-client", "--server", f"{e2e.HOST}:1", "--prompt", "x",
                       "--wait-ready-ms", bad)
            self.assertEqual(proc.returncode, 2, proc.stderr)
            self.assertIn("--wait-ready-ms", proc.stderr)
            self.assertIn(why, proc.stderr)


class ClientAgainstTlsServerTest(e2e.ServerTestCase):
    """One TLS demo server; its certificate names only DNS:localhost (no IP), so connecting by
    IP needs --server-name localhost."""

    TMP_PREFIX = "cube3d-cli-e2e-"

    @classmethod
    def make_server(cls, tmp_dir):
        cls.cert = os.path.join(tmp_dir, "cert.pem")
        key = os.path.join(tmp_dir, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                        "-keyout", key, "-out", cls.cert, "-days", "1", "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=DNS:localhost"],
                       check=True, capture_output=True, timeout=60)
        # Its own health checks go over TLS, checking the name localhost.
        return e2e.TlsServerProcess(cls.cert, key, tmp_dir)

    def setUp(self):
        self.work = tempfile.TemporaryDirectory(prefix="cube3d-cli-client-")
        self.addCleanup(self.work.cleanup)

    def client(self, *args):
        return run("cube3d-client", "--server", self.server.address, "--prompt", "a lamp",
                   "--resolution-base=4", "--timeout-ms", "120000", *args, cwd=self.work.name)

    def assert_ok(self, proc):
        self.assertEqual(proc.returncode, 0, f"{proc.stdout}\n{proc.stderr}\nserver log:\n"
                                             f"{self.server.log_tail(40)}")

    def test_tls_with_ca_and_server_name_and_the_default_output(self):
        proc = self.client("--tls", "--ca", self.cert, "--server-name", "localhost")
        self.assert_ok(proc)
        written = os.path.join(self.work.name, "mesh.glb")  # the default --out
        self.assertTrue(os.path.getsize(written) > 0)
        self.assertIn(f"wrote {written} (", proc.stdout)
        self.assertRegex(proc.stdout, r"\d+ vertices, \d+ faces \(request \w+, bucket \d+\)")
        # stderr is a pipe: plain progress lines, no '\r', ending with every token done.
        self.assertNotIn("\r", proc.stderr)
        self.assertIn("progress:", proc.stderr)
        self.assertIn(f"{TOKENS}/{TOKENS}", proc.stderr)
        self.assertLess(proc.stderr.count("\n"), 20, proc.stderr)  # lines, not a flood

    def test_ca_implies_tls_and_the_name_must_match(self):
        out = os.path.join(self.work.name, "by-ca.obj")
        proc = self.client("--ca=" + self.cert, "--server-name=localhost", "--out", out,
                           "--no-progress")
        self.assert_ok(proc)
        self.assertTrue(os.path.exists(out))
        self.assertEqual(proc.stderr, "")  # --no-progress: nothing on stderr
        # By IP, without --server-name: the certificate (DNS:localhost only) does not match.
        proc = self.client("--ca", self.cert, "--out", out, "--no-progress",
                           "--timeout-ms", "10000")
        self.assertEqual(proc.returncode, 3, proc.stdout + proc.stderr)
        self.assertRegex(proc.stderr, r"cube3d-client: (UNAVAILABLE|DEADLINE_EXCEEDED):")

    def test_plaintext_client_fails_against_tls(self):
        proc = self.client("--no-progress", "--timeout-ms", "10000")
        self.assertEqual(proc.returncode, 3, proc.stdout + proc.stderr)

    def test_failed_write_says_why(self):
        if not os.path.exists("/dev/full"):
            self.skipTest("no /dev/full")
        full = os.path.join(self.work.name, "full.glb")
        os.symlink("/dev/full", full)  # every write: ENOSPC
        proc = self.client("--tls", "--ca", self.cert, "--server-name", "localhost",
                           "--out", full, "--no-progress")
        self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
        self.assertIn(f"cannot write {full}: No space left on device", proc.stderr)

    def test_health_is_0_when_serving_and_1_without_tls(self):
        proc = run("cube3d-client", "--health", "--server", self.server.address, "--ca",
                   self.cert, "--server-name", "localhost", cwd=self.work.name)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertEqual(proc.stdout.strip(),
                         f"cube3d.v1.MeshService at {self.server.address}: SERVING")
        proc = run("cube3d-client", "--health", "--server", self.server.address,
                   "--timeout-ms", "3000", cwd=self.work.name)
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        self.assertRegex(proc.stderr, r"health of .*: (UNAVAILABLE|DEADLINE_EXCEEDED)")


class ClientAgainstALoadingServerTest(unittest.TestCase):
    """A server that listens but still loads its model: the client's channel sends no call to a
    replica that is not SERVING, so gRPC's own words ("backend unhealthy") would be all a user
    saw; the client asks the server's health and says what it reports, and what to do. With
    --wait-ready-ms it waits out the load instead."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="cube3d-cli-e2e-")
        self.addCleanup(self.tmp.cleanup)

    def loading_server(self, n_embd, n_layer):
        """A server of write_slow_model(n_embd, n_layer), launched and seen NOT_SERVING."""
        model_path = e2e.write_slow_model(self.tmp.name, n_embd=n_embd, n_layer=n_layer)
        # Reconnect quickly: the default backoff (1 s) could sleep through the load.
        server = e2e.ServerProcess(["--set", f"model.config={model_path}"], self.tmp.name,
                                   channel_options=[("grpc.initial_reconnect_backoff_ms", 20),
                                                    ("grpc.min_reconnect_backoff_ms", 20),
                                                    ("grpc.max_reconnect_backoff_ms", 50)])
        server.launch()
        self.addCleanup(server.kill)
        deadline = time.monotonic() + e2e.STARTUP_TIMEOUT_S
        while server.health(timeout=1) != "NOT_SERVING":
            self.assertIsNone(server.proc.poll(), server.log_tail())
            self.assertLess(time.monotonic(), deadline, "never NOT_SERVING while loading")
            time.sleep(0.02)
        return server

    def test_unavailable_says_the_server_is_not_serving_yet(self):
        # Wider than test_server_e2e's loading model (a minute and more here), so that the
        # client's call is done well within the load.
        server = self.loading_server(n_embd=1536, n_layer=16)
        proc = run("cube3d-client", "--server", server.address, "--prompt", "a lamp",
                   "--out", os.path.join(self.tmp.name, "lamp.glb"), "--max-attempts", "1",
                   "--no-progress")
        self.assertNotEqual(proc.returncode, 0,
                            "the model loaded before the client's call: make the test's model "
                            "wider")
        self.assertEqual(proc.returncode, 3, proc.stdout + proc.stderr)
        self.assertIn("cube3d-client: UNAVAILABLE: ", proc.stderr)
        self.assertIn(f"cube3d-client: {server.address} reports NOT_SERVING for "
                      "cube3d.v1.MeshService: it is still loading its model, draining, or out "
                      "after a device fault; cube3d-client --health exits 0 once it serves",
                      proc.stderr)

    def test_wait_ready_waits_out_the_load(self):
        # A few seconds of loading here; then a quick generation.
        server = self.loading_server(n_embd=1024, n_layer=8)
        # --health with a wait shorter than the load: what it reports, exit 1.
        proc = run("cube3d-client", "--health", "--server", server.address,
                   "--wait-ready-ms", "100")
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        self.assertIn(f"health of cube3d.v1.MeshService at {server.address}: NOT_SERVING",
                      proc.stderr)
        # A call with a wait longer than the load: it waits, says so, then generates.
        out_path = os.path.join(self.tmp.name, "lamp.glb")
        proc = run("cube3d-client", "--server", server.address, "--prompt", "a lamp",
                   "--resolution-base", "4", "--out", out_path, "--max-attempts", "1",
                   "--wait-ready-ms", "300000", "--no-progress",
                   timeout=e2e.STARTUP_TIMEOUT_S + RUN_TIMEOUT_S)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn(f"cube3d-client: waiting up to 300000 ms for {server.address} to serve "
                      "cube3d.v1.MeshService", proc.stderr,
                      "the model loaded before the client's call: make the test's model wider")
        with open(out_path, "rb") as f:
            self.assertEqual(f.read(4), b"glTF")
        # Serving now: --health with a wait answers at once, and says nothing of waiting.
        proc = run("cube3d-client", "--health", "--server", server.address,
                   "--wait-ready-ms", "300000")
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertNotIn("waiting", proc.stderr)
        self.assertIn("SERVING", proc.stdout)


if __name__ == "__main__":
    unittest.main()
