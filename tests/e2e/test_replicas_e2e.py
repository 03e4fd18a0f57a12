"""e2e.replicas: two replicas behind one client list survive a SIGKILL of one of them.

Two demo servers on loopback (A and B); cube3d-loadgen --server A,B sends an open loop of
requests (round robin over the replicas whose health is SERVING, each with a request_id of its
own). While A has a request running, A is killed with SIGKILL; a moment later it is started
again on the same ports. The calls A had in flight fail UNAVAILABLE at the client's end and are
tried again, on B; calls meanwhile go to B, also while the restarted A loads its model (its
health NOT_SERVING). The report must show every request answered OK, or DEADLINE_EXCEEDED by its
own deadline, none UNAVAILABLE and none tried more than twice, and say how many were retried;
the restarted A must take requests again.

Then cube3d-client --server A,B makes one mesh (the client's list and retries), and a request id
sent twice while the first runs is joined, not computed twice (the server's duplicate check).

Run: cd build && ctest -R e2e.replicas --output-on-failure
"""
import csv
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
import unittest

import server_process as e2e
from server_process import metric_value

setUpModule = e2e.setUpModule
tearDownModule = e2e.tearDownModule

LOADGEN_BIN = os.path.join(e2e.BIN_DIR, "cube3d-loadgen")
RATE = 6            # requests per second, on average
DURATION_S = 16     # of sending
DEADLINE_MS = 30000  # per request: long enough that a retry always fits
RES = 5             # resolution_base: a request takes a few hundred ms on 2 cores
RESTART_AFTER_S = 1.0  # from the kill to the restart


def clean_env():
    return {k: v for k, v in os.environ.items()
            if k.lower() not in ("http_proxy", "https_proxy", "grpc_proxy", "all_proxy")}


class Replica(e2e.ReplicaProcess):
    """A server that comes back on the ports it had (a pod restarted behind its Service)."""

    def requests_ok(self):
        return metric_value(self.metrics(), "cube3d_requests_total",
                            code="OK") or 0

    def running(self):
        try:
            return metric_value(self.metrics(), "cube3d_requests_running") or 0
        except Exception:  # noqa: BLE001: the process is being killed
            return 0


class ReplicasTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # Undone by class cleanups: after the tests, or when a start fails.
        cls.tmp = tempfile.TemporaryDirectory(prefix="cube3d-replicas-e2e-")
        cls.addClassCleanup(cls.tmp.cleanup)
        cls.a = Replica([], cls.tmp.name)
        cls.b = Replica([], cls.tmp.name)
        for replica in (cls.a, cls.b):
            cls.addClassCleanup(replica.kill)
        cls.a.start()
        cls.b.start()

    def servers(self):
        return f"{e2e.HOST}:{self.a.port},{e2e.HOST}:{self.b.port}"

    def dump_logs(self):
        for name, server in (("A", self.a), ("B", self.b)):
            print(f"\n----- replica {name} log -----\n{server.log_tail()}")

    def test_a_replica_killed_mid_run_costs_no_request(self):
        report_path = os.path.join(self.tmp.name, "report.json")
        csv_path = os.path.join(self.tmp.name, "requests.csv")
        loadgen = subprocess.Popen(
            [LOADGEN_BIN, "--server", self.servers(), "--rate", str(RATE),
             "--duration", str(DURATION_S), "--deadline-ms", str(DEADLINE_MS),
             "--resolution-base", str(RES), "--json", report_path,
             "--per-request-csv", csv_path],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(),
            stdin=subprocess.DEVNULL)
        events = {}

        def chaos():
            # Once A is busy (a request past its queue), after a few seconds of load.
            time.sleep(4)
            deadline = time.monotonic() + 8
            busy = False
            while time.monotonic() < deadline and not busy:
                busy = self.a.running() >= 1
                if not busy:
                    time.sleep(0.01)
            # Frozen at once (SIGSTOP), so that the request just seen running cannot finish
            # between the look and the kill; then SIGKILL: no drain, connections reset.
            self.a.proc.send_signal(signal.SIGSTOP)
            events["a_running_at_kill"] = int(busy)
            self.a.proc.kill()
            self.a.proc.wait(timeout=30)
            events["killed_at"] = time.monotonic()
            time.sleep(RESTART_AFTER_S)
            self.a.restart()
            events["restarted_at"] = time.monotonic()

        thread = threading.Thread(target=chaos)
        started = time.monotonic()
        thread.start()
        out, err = loadgen.communicate(timeout=DURATION_S + DEADLINE_MS / 1000 + 120)
        thread.join(timeout=120)
        try:
            self.assertEqual(loadgen.returncode, 0, f"cube3d-loadgen: {err}\n{out}")
            with open(report_path) as f:
                report = json.load(f)
            with open(csv_path) as f:
                rows = list(csv.DictReader(f))
            requests = report["requests"]
            print(f"\n[replicas] sent {requests['sent']}, ok {requests['ok']}, errors "
                  f"{requests['errors']}, retried {requests['retried']} "
                  f"({requests['extra_attempts']} more attempts); A running at the kill "
                  f"{events.get('a_running_at_kill')}, killed at "
                  f"{events.get('killed_at', 0) - started:.1f} s, back at "
                  f"{events.get('restarted_at', 0) - started:.1f} s; A served "
                  f"{self.a.requests_ok()} after its restart")
            self.assertIn("restarted_at", events, "the chaos thread did not finish")
            self.assertGreaterEqual(events["a_running_at_kill"], 1,
                                    "A had no request running when it was killed")
            self.assertNotIn("UNAVAILABLE", requests["errors"], requests)
            self.assertEqual(set(requests["errors"]) - {"DEADLINE_EXCEEDED"}, set(), requests)
            self.assertEqual(requests["sent"], requests["ok"] +
                             requests["errors"].get("DEADLINE_EXCEEDED", 0))
            self.assertGreaterEqual(requests["sent"], RATE * DURATION_S // 2)
            # The calls A had in flight were tried again (on B).
            self.assertGreaterEqual(requests["retried"], 1, requests)
            self.assertEqual(requests["retried"],
                             sum(1 for r in rows if int(r["attempts"]) > 1))
            # A retry goes to a replica that can answer: B while A is down, and not A while
            # it loads its model again (the channel watches each replica's health), so no
            # request needed a third attempt.
            self.assertEqual([r for r in rows if int(r["attempts"]) > 2], [])
            # Each answered by its own deadline (the client's clock, with a little slack).
            late = [r for r in rows if float(r["e2e_ms"]) > DEADLINE_MS + 1000]
            self.assertEqual(late, [])
            # The restarted A took its share again (round robin reconnects to it).
            self.assertGreaterEqual(self.a.requests_ok(), 1,
                                    "the restarted replica never served a request")
        except AssertionError:
            self.dump_logs()
            raise

    def test_the_client_takes_a_list_and_a_duplicate_id_joins_the_running_work(self):
        out_path = os.path.join(self.tmp.name, "chair.glb")
        run = subprocess.run(
            [e2e.CLIENT_BIN, "--server", self.servers(), "--prompt", "a replicated chair",
             "--resolution-base", str(RES), "--out", out_path, "--no-progress"],
            capture_output=True, text=True, timeout=120, env=clean_env(),
            stdin=subprocess.DEVNULL)
        self.assertEqual(run.returncode, 0, run.stderr)
        with open(out_path, "rb") as f:
            self.assertEqual(f.read(4), b"glTF")
        # An id of its own, made by the client: its retries are the same request.
        self.assertRegex(run.stdout, r"\(request [0-9a-f]{32}, bucket \d+\)")

        # One id sent twice at once to one replica: one computation, two answers.
        stub = self.b.stub()
        request = e2e.make_request("a twice-sent lamp", resolution_base=6, request_id="dup-1")
        before = metric_value(self.b.metrics(), "cube3d_cache_requests_total",
                              result="coalesced") or 0
        results = {}

        def call(name):
            results[name] = stub.GenerateMesh(request, timeout=120)

        first = threading.Thread(target=call, args=("first",))
        first.start()
        time.sleep(0.05)
        call("second")
        first.join(timeout=120)
        self.assertEqual(results["first"].encoded, results["second"].encoded)
        statuses = sorted(e2e.pb.CacheStatus.Name(r.cache_status) for r in results.values())
        after = metric_value(self.b.metrics(), "cube3d_cache_requests_total",
                             result="coalesced") or 0
        self.assertEqual(after - before, 1, statuses)
        self.assertIn("CACHE_STATUS_COALESCED", statuses)

        # The id reused for another request while the first runs: ALREADY_EXISTS.
        slow = e2e.make_request("a slow tower", resolution_base=7, request_id="dup-2")
        other = e2e.make_request("another tower", resolution_base=RES, request_id="dup-2")
        future = stub.GenerateMesh.future(slow, timeout=120)
        time.sleep(0.3)
        code, details = e2e.rpc_code(lambda: stub.GenerateMesh(other, timeout=30))
        self.assertEqual(code, e2e.grpc.StatusCode.ALREADY_EXISTS, details)
        self.assertIn("request_id 'dup-2'", details)
        self.assertTrue(future.result().encoded)


if __name__ == "__main__":
    unittest.main()
