"""cube3d-loadgen end to end: one real cube3d-server on the demo model (server_process's
helpers start and stop it), driven by cube3d-loadgen in a closed loop, an open loop, with an
impossible deadline and with a Zipf prompt mix against the server's result cache; the tests
read the --json report (and the --per-request-csv file). Run by
ctest (tests/CMakeLists.txt, test e2e.loadgen):

    CUBE3D_BIN_DIR=build/bin CUBE3D_SOURCE_DIR=. python3 -m unittest -v test_loadgen_e2e

Requests ask for resolution_base 4 (a 17^3 grid), so a run of six takes seconds on two cores.
"""
import csv
import json
import os
import subprocess
import tempfile
import unittest

import server_process as e2e

LOADGEN_BIN = os.path.join(e2e.BIN_DIR, "cube3d-loadgen")
RUN_TIMEOUT_S = 300  # one cube3d-loadgen run, generously (a loaded 2-core machine)


def setUpModule():
    if not os.access(LOADGEN_BIN, os.X_OK):
        raise RuntimeError(f"{LOADGEN_BIN} is missing: build the cube3d-loadgen target "
                           f"(CUBE3D_BIN_DIR={e2e.BIN_DIR})")
    e2e.setUpModule()  # the gRPC stubs the server helpers use (health checks)


def tearDownModule():
    e2e.tearDownModule()


def loadgen_env():
    """The environment without proxy settings: the server is on loopback."""
    return {k: v for k, v in os.environ.items()
            if k.lower() not in ("http_proxy", "https_proxy", "grpc_proxy", "all_proxy")}


def run_loadgen(*args):
    return subprocess.run([LOADGEN_BIN, *args], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, env=loadgen_env(), stdin=subprocess.DEVNULL)


class LoadgenTest(e2e.ServerTestCase):
    """One demo server for every run (the e2e.server defaults: dynamic batching), with the result
    cache on for the prompt-mix test, so each test sends requests of its own (its own --seed
    range, or its own prompts): a request another test sent would be a cache hit, with other
    latencies and perhaps no decoding event."""

    CACHE = True

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="cube3d-loadgen-e2e-")
        self.addCleanup(self.tmp.cleanup)

    def loadgen(self, *args, expect_rc=0):
        """Runs cube3d-loadgen against the server; returns (JSON report, per-request rows)."""
        json_path = os.path.join(self.tmp.name, "report.json")
        csv_path = os.path.join(self.tmp.name, "requests.csv")
        proc = run_loadgen("--server", self.server.address, "--resolution-base", str(e2e.RES),
                           "--json", json_path, "--per-request-csv", csv_path, *args)
        self.assertEqual(proc.returncode, expect_rc,
                         f"cube3d-loadgen {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}")
        self.assertIn("e2e_ms", proc.stdout)  # the table
        with open(json_path) as f:
            report = json.load(f)
        with open(csv_path, newline="") as f:
            rows = list(csv.DictReader(f))
        return report, rows

    def assert_latencies_consistent(self, report, rows, ok):
        lat = report["latency_ms"]
        for name in ("queue", "ttft", "e2e"):
            s = lat[name]
            self.assertEqual(s["count"], ok, name)
            self.assertLessEqual(s["p50"], s["p90"], name)
            self.assertLessEqual(s["p90"], s["p99"], name)
            self.assertLessEqual(s["p99"], s["max"], name)
            self.assertGreaterEqual(s["p50"], 0.0, name)
        # ttft <= e2e request by request, hence for every order statistic too.
        for key in ("p50", "p90", "p99", "max"):
            self.assertLessEqual(lat["ttft"][key], lat["e2e"][key], key)
        for row in rows:
            self.assertEqual(row["status"], "OK", row)
            self.assertLessEqual(float(row["ttft_ms"]), float(row["e2e_ms"]), row)
            self.assertGreaterEqual(float(row["queue_ms"]), 0.0, row)
        # The server's queue time is part of what the client waited.
        self.assertLessEqual(lat["queue"]["max"], lat["e2e"]["max"])

    def assert_config(self, report, **expected):
        """The report's config has these values."""
        for key, value in expected.items():
            self.assertEqual(report["config"][key], value)

    def assert_all_ok(self, report, rows, n):
        """n requests sent, every one answered OK, with consistent latencies."""
        self.assertEqual(report["requests"], {"sent": n, "ok": n, "failed": 0, "errors": {},
                          "retried": 0, "extra_attempts": 0})
        self.assert_latencies_consistent(report, rows, n)

    def test_closed_loop(self):
        report, rows = self.loadgen("--concurrency", "2", "--requests", "6", "--warmup", "1",
                                    "--seed", "1000")
        self.assert_config(report, mode="closed", concurrency=2, warmup=1,
                           server=self.server.address)
        self.assertEqual([int(r["index"]) for r in rows], list(range(6)))
        self.assert_all_ok(report, rows, 6)
        self.assertGreater(report["wall_s"], 0)
        self.assertAlmostEqual(report["throughput_ok_rps"], 6 / report["wall_s"], places=6)
        self.assertIn("linear", report["percentile_method"])

    def test_open_loop(self):
        report, rows = self.loadgen("--rate", "2", "--requests", "6", "--arrival-seed", "5",
                                    "--seed", "2000")
        self.assert_config(report, mode="open", rate_rps=2, arrival_seed=5)
        self.assert_all_ok(report, rows, 6)
        # Sent on the schedule, in order, whatever the server's answers took.
        offsets = [float(r["send_offset_s"]) for r in rows]
        self.assertEqual(offsets, sorted(offsets))
        self.assertGreater(report["offered_rps"], 0)

    def test_impossible_deadline_counts_deadline_exceeded(self):
        report, rows = self.loadgen("--concurrency", "2", "--requests", "4", "--deadline-ms", "1",
                                    "--seed", "3000")
        self.assertEqual(report["requests"],
                         {"sent": 4, "ok": 0, "failed": 4, "errors": {"DEADLINE_EXCEEDED": 4},
                          "retried": 0, "extra_attempts": 0})
        self.assertEqual([r["status"] for r in rows], ["DEADLINE_EXCEEDED"] * 4)
        self.assertEqual(report["latency_ms"]["e2e"]["count"], 0)
        self.assertIsNone(report["latency_ms"]["e2e"]["p50"])
        self.assertEqual(report["throughput_ok_rps"], 0)
        # The server shrugs the abandoned requests off.
        self.assertEqual(self.server.health(), "SERVING")

    def test_zipf_mix_counts_cache_statuses(self):
        # Needs the server's result cache (answers that carry cache_status). Six requests over
        # three prompts: each prompt drawn is computed once (a miss), every repeat is answered
        # from the cache or from the identical request in flight. The "#k" prompts are this
        # test's own, so no other test's requests are in the cache.
        report, rows = self.loadgen("--concurrency", "2", "--requests", "6",
                                    "--prompt-mix", "zipf:3", "--seed", "5")
        self.assertEqual(report["config"]["prompt_mix"],
                         {"spec": "zipf:3:1", "kind": "zipf", "distinct": 3, "exponent": 1.0,
                          "seed": 5})
        self.assertEqual(report["config"]["prompts"]["count"], 3)
        self.assertEqual(report["requests"]["ok"], 6)
        cache = report["cache_status"]
        self.assertEqual(sum(cache.values()), 6, cache)
        self.assertEqual(sorted(r["cache"] for r in rows),
                         sorted(k for k, n in cache.items() for _ in range(n)))
        # What the server must provide.
        self.assertEqual(cache["unknown"], 0, f"answers without a cache status: {cache}")
        self.assertEqual(cache["bypass"], 0, cache)
        self.assertGreaterEqual(cache["miss"], 1, cache)
        self.assertLessEqual(cache["miss"], 3, cache)
        self.assertEqual(cache["hit"] + cache["coalesced"], 6 - cache["miss"], cache)
        # --bypass-cache: computed afresh, whatever is cached.
        report, _ = self.loadgen("--concurrency", "1", "--requests", "2",
                                 "--prompt-mix", "zipf:3", "--seed", "5", "--bypass-cache")
        self.assertTrue(report["config"]["request"]["bypass_cache"])
        self.assertEqual(report["cache_status"],
                         {"hit": 0, "miss": 0, "coalesced": 0, "bypass": 2, "unknown": 0})


class LoadgenCliTest(unittest.TestCase):
    """Exit codes without a server: 2 for usage errors, 1 when nothing answers."""

    def test_usage_errors_exit_2(self):
        with tempfile.TemporaryDirectory() as tmp:
            empty = os.path.join(tmp, "empty.txt")
            with open(empty, "w") as f:
                f.write("\n  \n")
            cases = [
                ([], "--concurrency"),  # no load shape (and no bound)
                (["--concurrency", "2"], "--requests"),
                (["--rate", "1", "--concurrency", "2", "--requests", "1"], "--rate"),
                (["--rate", "0", "--requests", "1"], "--rate"),
                (["--concurrency", "1", "--requests", "1", "--prompts", empty], empty),
                (["--concurrency", "1", "--requests", "1", "--prompts",
                  os.path.join(tmp, "missing.txt")], "missing.txt"),
                (["--concurrency", "1", "--requests", "1", "--format", "stl"], "--format"),
                (["--concurrency", "1", "--requests", "1", "--prompt-mix", "zipf:0"],
                 "--prompt-mix"),
                (["--concurrency", "1", "--requests", "1", "--prompt-mix", "zipf:x"],
                 "--prompt-mix"),
                (["--concurrency", "1", "--requests", "1", "--prompt-mix", "uniform:3"],
                 "--prompt-mix"),
                (["--bogus"], "--bogus"),
            ]
            for args, named in cases:
                with self.subTest(args=args):
                    proc = run_loadgen(*args)
                    self.assertEqual(proc.returncode, 2, proc.stderr)
                    self.assertIn(named, proc.stderr)

    def test_help_exits_0(self):
        proc = run_loadgen("--help")
        self.assertEqual(proc.returncode, 0)
        for flag in ("--rate", "--concurrency", "--requests", "--duration", "--warmup",
                     "--deadline-ms", "--json", "--per-request-csv", "--prompt-mix",
                     "--bypass-cache"):
            self.assertIn(flag, proc.stdout)

    def test_unreachable_server_exits_1(self):
        dead_port = e2e.free_ports(1)[0]
        with tempfile.TemporaryDirectory() as tmp:
            json_path = os.path.join(tmp, "report.json")
            proc = run_loadgen("--server", f"{e2e.HOST}:{dead_port}", "--concurrency", "2",
                               "--requests", "3", "--json", json_path)
            self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
            self.assertIn(f"{e2e.HOST}:{dead_port} is unreachable over grpc, or not serving "
                          "(still loading its model, or draining: cube3d-client --health shows "
                          "it)", proc.stderr)
            with open(json_path) as f:
                report = json.load(f)
            self.assertEqual(report["requests"]["errors"], {"UNAVAILABLE": 3})


if __name__ == "__main__":
    unittest.main()
