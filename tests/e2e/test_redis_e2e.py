"""e2e.redis: jobs and the result cache shared by two replicas through a real Redis.

A redis-server of the test's own on a free loopback port (its files in a temp folder; the suite
skips, saying so, when Debian's redis-server is not installed), and two demo servers, A and B,
with jobs.store: redis, cache.redis: true and a short lease (jobs.lease_ms 1500):

  1. a job submitted to A is polled (long-poll) and fetched from B, over HTTP and gRPC;
  2. a job running on A is cancelled through B: its work stops on A;
  3. a prompt computed on A is a cache hit on B (X-Cache: hit), and the same prompt sent to both
     at once is computed once: B waits for A's claim and answers a hit;
  4. A is killed with SIGKILL while a job runs on it: B takes the job over when its lease lapses
     and finishes it (takeovers 1), within the lease and a computation;
  5. Redis is stopped: synchronous requests still answer (cache misses), job submits get 503
     naming Redis, /readyz says so while gRPC health stays SERVING, nothing waits past
     redis.timeout_ms; Redis back, jobs work again.

(3b. between them: each connection sends a script's text once, then EVALSHA, read off Redis'
INFO commandstats.)

The figures (lease, takeover time, a hit's latency through Redis, Redis' bytes per job and the
share of scripts sent by SHA-1) are printed. Run:

    cd tests/e2e && CUBE3D_BIN_DIR=../../build/bin CUBE3D_SOURCE_DIR=../.. \\
        python3 -m unittest -v test_redis_e2e
"""
import json
import re
import signal
import sys
import tempfile
import time
import unittest

import grpc

import server_process as e2e
from redis_process import HAVE_REDIS, SKIP_REASON, RedisProcess, resp
from server_process import make_request, metric_value

setUpModule = e2e.setUpModule
tearDownModule = e2e.tearDownModule

LEASE_MS = 1500
REDIS_TIMEOUT_MS = 1000
JOBS = "/v1/jobs"
GENERATE = "/v1/meshes:generate"
FLOW_RES = 5  # under a second of work
SLOW_RES = 8  # seconds of meshing: a job surely running when it is cancelled or its replica dies
# The takeover's job: still surely running when its replica is killed (64 times FLOW_RES' grid),
# and an eighth of SLOW_RES' meshing when it is run again from the start on the other replica.
TAKEOVER_RES = 7
OPEN = ("JOB_STATE_QUEUED", "JOB_STATE_RUNNING")


class Replica(e2e.ReplicaProcess):
    """A server that can come back on the ports it had (restart())."""

    def json(self, method, path, body=None, timeout=30):
        status, headers, data = self.http(method, path, body, timeout=timeout)
        return status, headers, json.loads(data) if data else None


@unittest.skipUnless(HAVE_REDIS, SKIP_REASON)
class RedisReplicasTest(unittest.TestCase):
    figures = {}

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="cube3d-redis-e2e-")
        cls.redis = RedisProcess(cls.tmp.name, extra=("--appendonly", "no"))
        cls.redis.start()
        args = ["--redis-url", cls.redis.url,
                "--set", "jobs.store=redis", "--set", "cache.redis=true",
                "--set", f"jobs.lease_ms={LEASE_MS}", "--set", "jobs.max_takeovers=2",
                "--set", "jobs.poll_after_ms=200",
                "--set", f"redis.timeout_ms={REDIS_TIMEOUT_MS}",
                "--set", "redis.connect_timeout_ms=500"]
        cls.a = Replica(args, cls.tmp.name, http=True, cache=True)
        cls.b = Replica(args, cls.tmp.name, http=True, cache=True)
        try:
            cls.a.start()
            cls.b.start()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        for server in (getattr(cls, "a", None), getattr(cls, "b", None)):
            if server is not None:
                server.kill()
        cls.redis.stop()
        if cls.figures:
            print("\nfigures: " + json.dumps(cls.figures, sort_keys=True), file=sys.stderr)
        cls.tmp.cleanup()

    def run(self, result=None):
        before = len(result.failures) + len(result.errors) if result else 0
        outcome = super().run(result)
        if result is not None and len(result.failures) + len(result.errors) > before:
            for name, server in (("A", self.a), ("B", self.b)):
                sys.stderr.write(f"\n----- replica {name} log -----\n{server.log_tail(80)}\n")
        return outcome

    # -- helpers --

    def submit(self, server, prompt, res=FLOW_RES):
        status, headers, job = server.json("POST", JOBS, {"prompt": prompt,
                                                          "resolutionBase": res})
        self.assertEqual(status, 202, job)
        self.assertEqual(headers["Location"], f"{JOBS}/{job['id']}")
        return job["id"]

    def job(self, server, job_id, wait_ms=0):
        status, _, job = server.json("GET", f"{JOBS}/{job_id}?wait_ms={wait_ms}",
                                     timeout=wait_ms / 1000 + 30)
        self.assertEqual(status, 200, job)
        return job

    def wait_ended(self, server, job_id, timeout=120):
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(server, job_id, wait_ms=5000)
            if job["state"] not in OPEN:
                return job
            self.assertLess(time.monotonic(), deadline, f"job {job_id} still open: {job}")

    def wait_running(self, server, job_id, timeout=60):
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(server, job_id)
            self.assertIn(job["state"], OPEN, job)
            if job["state"] == "JOB_STATE_RUNNING":
                return job
            self.assertLess(time.monotonic(), deadline, f"job {job_id} never ran")
            time.sleep(0.05)

    # -- the tests, in order --

    def test_1_submit_to_a_poll_and_fetch_from_b(self):
        job_id = self.submit(self.a, "a wooden chair, replicated")
        first = self.job(self.b, job_id)  # B knows it at once
        self.assertIn(first["state"], OPEN + ("JOB_STATE_SUCCEEDED",))
        done = self.wait_ended(self.b, job_id)
        self.assertEqual(done["state"], "JOB_STATE_SUCCEEDED", done)
        status, headers, data = self.b.http("GET", f"{JOBS}/{job_id}/mesh")
        self.assertEqual(status, 200)
        self.assertEqual(headers["Content-Type"], "model/gltf-binary")
        self.assertEqual(data[:4], b"glTF")
        # gRPC: submitted to B, read on A.
        submitted = self.b.stub().SubmitMeshJob(make_request("a stone bench", resolution_base=4),
                                                timeout=30)
        job = self.a.stub().GetMeshJob(e2e.pb.GetMeshJobRequest(id=submitted.id, wait_ms=20000),
                                       timeout=60)
        while job.state in (e2e.pb.JOB_STATE_QUEUED, e2e.pb.JOB_STATE_RUNNING):
            job = self.a.stub().GetMeshJob(
                e2e.pb.GetMeshJobRequest(id=submitted.id, wait_ms=20000), timeout=60)
        self.assertEqual(job.state, e2e.pb.JOB_STATE_SUCCEEDED, job)
        self.assertEqual(job.result.encoded[:4], b"glTF")

    def test_2_cancel_through_b_stops_the_work_on_a(self):
        job_id = self.submit(self.a, "a tall cabinet to cancel", res=SLOW_RES)
        self.wait_running(self.b, job_id)
        started = time.monotonic()
        status, _, answer = self.b.json("DELETE", f"{JOBS}/{job_id}")
        self.assertEqual(status, 200, answer)
        done = self.wait_ended(self.b, job_id, timeout=30)
        self.figures["cancel_through_other_replica_s"] = round(time.monotonic() - started, 3)
        self.assertEqual(done["state"], "JOB_STATE_CANCELLED", done)
        self.assertIn("cancelled by its client", done["error"]["message"])
        # A ran it and stopped it: its own count of cancelled requests went up.
        self.assertGreaterEqual(
            metric_value(self.a.metrics(), "cube3d_requests_total", code="CANCELLED") or 0, 1)
        self.assertLess(time.monotonic() - started, 10)

    def test_3_a_prompt_computed_on_a_is_a_hit_on_b(self):
        body = {"prompt": "a brass lantern, shared", "resolutionBase": FLOW_RES}
        accept = {"Accept": "model/gltf-binary"}
        status, headers, first = self.a.http("POST", GENERATE, body, accept)
        self.assertEqual(status, 200)
        self.assertEqual(headers["X-Cache"], "miss")
        started = time.monotonic()
        status, headers, second = self.b.http("POST", GENERATE, body, accept)
        hit_s = time.monotonic() - started
        self.assertEqual(status, 200)
        self.assertEqual(headers["X-Cache"], "hit")
        self.assertEqual(e2e.mesh_without_request_id(first), e2e.mesh_without_request_id(second))
        self.figures["hit_through_redis_ms"] = round(hit_s * 1000, 1)
        self.figures["hit_mesh_bytes"] = len(second)
        self.assertGreaterEqual(
            metric_value(self.b.metrics(), "cube3d_cache_redis_lookups_total", result="hit"), 1)

        # The same new prompt to both at once: A computes, B waits for A's claim, then hits.
        # (Counted from here: on a loaded machine the first hit above may have waited too, for
        # A's store of its result to land.)
        waited_hits = metric_value(self.b.metrics(), "cube3d_cache_redis_waits_total",
                                   result="hit") or 0
        body = {"prompt": "a copper kettle, claimed", "resolutionBase": SLOW_RES}
        answers = {}

        def send(name, server):
            answers[name] = server.http("POST", GENERATE, body, accept)

        import threading
        first = threading.Thread(target=send, args=("a", self.a))
        first.start()
        time.sleep(0.5)  # A has looked up, missed and claimed
        second = threading.Thread(target=send, args=("b", self.b))
        second.start()
        first.join(120)
        second.join(120)
        self.assertEqual(answers["a"][0], 200)
        self.assertEqual(answers["b"][0], 200)
        self.assertEqual(answers["a"][1]["X-Cache"], "miss")
        self.assertEqual(answers["b"][1]["X-Cache"], "hit")
        self.assertEqual(metric_value(self.b.metrics(), "cube3d_cache_redis_waits_total",
                                      result="hit"), waited_hits + 1)

    def redis_counts(self):
        """Redis' count of EVAL and EVALSHA calls, and of the bytes it has read."""
        stats = resp(self.redis.port, "INFO", "commandstats") + resp(self.redis.port, "INFO",
                                                                      "stats")

        def field(pattern):
            match = re.search(pattern, stats)
            return int(match.group(1)) if match else 0
        return (field(r"cmdstat_eval:calls=(\d+)"), field(r"cmdstat_evalsha:calls=(\d+)"),
                field(r"total_net_input_bytes:(\d+)"))

    def test_3b_a_script_crosses_the_wire_once_per_connection(self):
        # Each connection sends a script in full the first time it runs it there, then by its
        # SHA-1. So, whatever ran before, these jobs cost at most one EVAL per connection and
        # script (2 replicas x 2 lanes x 14 scripts); with the text every time they would cost
        # about 20 a job and as many for the renewal rounds.
        jobs = 5
        eval_before, sha_before, bytes_before = self.redis_counts()
        for i in range(jobs):
            job_id = self.submit(self.a, f"a stool by its hash, {i}")
            self.assertEqual(self.wait_ended(self.b, job_id)["state"], "JOB_STATE_SUCCEEDED")
            status, _, _ = self.b.http("GET", f"{JOBS}/{job_id}/mesh")
            self.assertEqual(status, 200)
        eval_after, sha_after, bytes_after = self.redis_counts()
        self.assertLessEqual(eval_after - eval_before, 2 * 2 * 14)
        self.assertGreaterEqual(sha_after - sha_before, jobs * 10)
        self.figures["redis_bytes_per_job"] = (bytes_after - bytes_before) // jobs
        self.figures["redis_evalsha_share"] = round(
            (sha_after - sha_before) / max(1, sha_after - sha_before + eval_after - eval_before), 3)

    def test_4_a_replica_killed_mid_job_costs_no_job(self):
        job_id = self.submit(self.a, "a sailing boat on a dead replica", res=TAKEOVER_RES)
        self.wait_running(self.b, job_id)
        self.a.proc.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        self.a.proc.wait(timeout=30)
        taken = None
        while time.monotonic() - killed < 60:
            job = self.job(self.b, job_id)
            if job.get("takeovers", 0) >= 1 or job["state"] not in OPEN:
                taken = time.monotonic() - killed
                break
            time.sleep(0.05)
        self.assertIsNotNone(taken, "no replica took the job over")
        done = self.wait_ended(self.b, job_id)
        finished = time.monotonic() - killed
        self.assertEqual(done["state"], "JOB_STATE_SUCCEEDED", done)
        self.assertEqual(done.get("takeovers"), 1, done)
        self.figures["lease_ms"] = LEASE_MS
        self.figures["takeover_after_kill_s"] = round(taken, 3)
        self.figures["job_done_after_kill_s"] = round(finished, 3)
        # A lease, a renewal period, and slack for a loaded machine.
        self.assertLess(taken, LEASE_MS / 1000 * 4 + 2)
        self.assertGreaterEqual(
            metric_value(self.b.metrics(), "cube3d_job_takeovers_total", outcome="rerun"), 1)
        self.a.restart()

    def test_5_redis_stopped_sync_serves_jobs_refuse_nothing_hangs(self):
        self.redis.stop()
        try:
            started = time.monotonic()
            status, headers, data = self.a.http(
                "POST", GENERATE, {"prompt": "a teapot while redis is away",
                                   "resolutionBase": 4}, {"Accept": "model/gltf-binary"},
                timeout=60)
            self.assertEqual(status, 200, data)
            self.assertEqual(headers["X-Cache"], "miss")
            self.assertEqual(data[:4], b"glTF")
            for server in (self.a, self.b):
                started = time.monotonic()
                status, _, answer = server.json("POST", JOBS, {"prompt": "a job without redis",
                                                               "resolutionBase": 4})
                took = time.monotonic() - started
                self.assertEqual(status, 503, answer)
                self.assertEqual(answer["error"]["status"], "UNAVAILABLE")
                self.assertIn("redis", answer["error"]["message"].lower())
                self.assertLess(took, REDIS_TIMEOUT_MS / 1000 * 3 + 2)
                code, details = e2e.rpc_code(lambda: server.stub().SubmitMeshJob(
                    make_request("a grpc job without redis"), timeout=30))
                self.assertEqual(code, grpc.StatusCode.UNAVAILABLE, details)
            status, _, answer = self.b.json("GET", f"{JOBS}/{'0' * 40}")
            self.assertEqual(status, 503, answer)
            deadline = time.monotonic() + 15
            while True:
                status, _, body = self.a.http("GET", "/readyz")
                if status == 503:
                    break
                self.assertLess(time.monotonic(), deadline, "/readyz never said so")
                time.sleep(0.1)
            self.assertIn(b"Redis", body)
            self.assertEqual(self.a.health(service="cube3d.v1.MeshService"), "SERVING")
            self.assertEqual(metric_value(self.a.metrics(), "cube3d_redis_up"), 0)
        finally:
            self.redis.start()
        deadline = time.monotonic() + 30
        while self.a.http("GET", "/readyz")[0] != 200:
            self.assertLess(time.monotonic(), deadline, "/readyz never recovered")
            time.sleep(0.2)
        job_id = self.submit(self.a, "a job with redis back", res=4)
        self.assertEqual(self.wait_ended(self.b, job_id)["state"], "JOB_STATE_SUCCEEDED")


if __name__ == "__main__":
    unittest.main()
