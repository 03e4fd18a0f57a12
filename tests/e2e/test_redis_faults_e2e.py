"""e2e.redis_faults: the job store through a Redis that stalls, dies and fails over.

Two demo servers, A and B, with jobs.store: redis and a short lease (jobs.lease_ms 1500), over
Redis processes of the test's own (the suite skips, saying so, without Debian's redis-server):

  1. stall: Redis is frozen (SIGSTOP) for twice a lease while jobs run on A and B, and submits
     with an Idempotency-Key come in meanwhile: every job accepted ends SUCCEEDED once, no job is
     run again (takeovers 0, cube3d_job_takeovers_total 0), the submits refused during the stall
     (503) leave no job behind, and their retries with the same keys make one job each;
  2. crash: Redis with an append-only file (appendfsync always) is killed (SIGKILL) and started
     again: no job a client was given is lost, and they all end SUCCEEDED;
  3. failover: a primary, two replicas and three sentinels (down-after 1000 ms); the servers reach
     Redis through redis.sentinels with jobs.durable_replicas 1. The primary is killed: submits
     are accepted again within down-after + 5 s, on the new primary, with no restart; no job
     accepted before the kill is lost, and none is run again, though each was long-polled on
     the replica running it across the failover (the subscriber's reconnect must not stop a
     run);
  4. SCRIPT FLUSH, six times while jobs run, are long-polled and come in: no submit refused, no
     job lost or run again (the scripts Redis no longer holds are sent again in full).

The figures (stall and failover costs) are printed and, with CUBE3D_FAULTS_JSON=path, written
there (bench/results/ keeps a run's). Run:

    cd tests/e2e && CUBE3D_BIN_DIR=../../build/bin CUBE3D_SOURCE_DIR=../.. \\
        python3 -m unittest -v test_redis_faults_e2e
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid

import server_process as e2e
from redis_process import HAVE_REDIS, REDIS_SERVER, SKIP_REASON, RedisProcess, resp
from server_process import metric_value

setUpModule = e2e.setUpModule
tearDownModule = e2e.tearDownModule

LEASE_MS = 1500
JOBS = "/v1/jobs"
RES = 6  # a second or two of work: jobs are running when the fault comes
OPEN = ("JOB_STATE_QUEUED", "JOB_STATE_RUNNING")
DOWN_AFTER_MS = 1000
MASTER = "cube3d-primary"


class Replica(e2e.ReplicaProcess):
    def json(self, method, path, body=None, headers=None, timeout=30):
        status, headers, data = self.http(method, path, body, headers, timeout=timeout)
        return status, headers, json.loads(data) if data else None


@unittest.skipUnless(HAVE_REDIS, SKIP_REASON)
class RedisFaultsTest(unittest.TestCase):
    figures = {}

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="cube3d-redis-faults-")
        self.servers = []
        self.redises = []

    def tearDown(self):
        if any(error for _, error in self._outcome.result.errors + self._outcome.result.failures
               if _ is self):
            for server in self.servers:
                sys.stderr.write(f"\n----- {server.port} log -----\n{server.log_tail(60)}\n")
        for server in self.servers:
            server.kill()
        for redis in self.redises:
            redis.kill()
        self.tmp.cleanup()

    @classmethod
    def tearDownClass(cls):
        if not cls.figures:
            return
        print("\nfigures: " + json.dumps(cls.figures, sort_keys=True), file=sys.stderr)
        path = os.environ.get("CUBE3D_FAULTS_JSON")
        if path:
            version = subprocess.run([REDIS_SERVER, "--version"], capture_output=True,
                                     text=True).stdout.split()[2]
            record = {"command": "cd tests/e2e && CUBE3D_FAULTS_JSON=<path> python3 -m unittest "
                                 "test_redis_faults_e2e",
                      "redis": version, "cpus": os.cpu_count(),
                      "model": "demo (random weights)", "resolution_base": RES, **cls.figures}
            with open(path, "w") as f:
                json.dump(record, f, indent=2, sort_keys=True)
                f.write("\n")

    # -- helpers --

    def redis(self, name, extra=(), sentinel=False):
        process = RedisProcess(self.tmp.name, name, extra, sentinel)
        self.redises.append(process)
        process.start()
        return process

    def start_servers(self, redis_args, extra=()):
        args = [*redis_args,
                "--set", "jobs.store=redis", "--set", f"jobs.lease_ms={LEASE_MS}",
                "--set", "jobs.poll_after_ms=200", "--set", "redis.timeout_ms=1000",
                "--set", "redis.connect_timeout_ms=500", *extra]
        servers = [Replica(args, self.tmp.name, http=True) for _ in range(2)]
        for server in servers:
            self.servers.append(server)
            server.start()
        return servers

    def submit(self, server, prompt, key=None):
        headers = {"Idempotency-Key": key} if key else {}
        return server.json("POST", JOBS, {"prompt": prompt, "resolutionBase": RES}, headers)

    def accepted(self, server, prompt, key=None, timeout=30, expect=(200, 202)):
        """Submits until accepted (202, or 200 for the job a key already has; `expect` narrows
        it) while the answers are 503 (Redis coming back); the job's id."""
        deadline = time.monotonic() + timeout
        while True:
            status, _, job = self.submit(server, prompt, key)
            if status != 503:
                self.assertIn(status, (expect,) if isinstance(expect, int) else expect, job)
                return job["id"]
            self.assertEqual(status, 503, job)
            self.assertLess(time.monotonic(), deadline, f"never accepted: {job}")
            time.sleep(0.1)

    def ended(self, server, job_id, timeout=120):
        deadline = time.monotonic() + timeout
        while True:
            status, _, job = server.json("GET", f"{JOBS}/{job_id}?wait_ms=5000", timeout=35)
            if status == 200 and job["state"] not in OPEN:
                return job
            # A 503 while Redis comes back is an answer to retry; a 404 is a lost job.
            self.assertIn(status, (200, 503), job)
            self.assertLess(time.monotonic(), deadline, f"job {job_id} still open: {job}")
            if status == 503:
                time.sleep(0.1)

    def long_polls(self, pairs):
        """Long-polls each (server, job id) in a thread of its own until the job ends; joined by
        the returned function, which gives each job's last answer (or the exception)."""
        answers = {}

        def poll(server, job_id):
            try:
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline:
                    status, _, job = server.json("GET", f"{JOBS}/{job_id}?wait_ms=5000",
                                                 timeout=35)
                    answers[job_id] = (status, job)
                    if status == 200 and job["state"] not in OPEN:
                        return
                    if status not in (200, 503):
                        return
                    if status == 503:
                        time.sleep(0.1)
            except Exception as e:  # noqa: BLE001 (reported by the test's own thread)
                answers[job_id] = (None, repr(e))

        threads = [threading.Thread(target=poll, args=pair) for pair in pairs]
        for thread in threads:
            thread.start()

        def join():
            for thread in threads:
                thread.join(timeout=150)
            return answers
        return join

    def wait_running(self, server, ids, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = [server.json("GET", f"{JOBS}/{i}")[2]["state"] for i in ids]
            if "JOB_STATE_RUNNING" in states:
                return
            time.sleep(0.05)
        self.fail("no job ran")

    def takeovers(self):
        return sum(metric_value(s.metrics(), "cube3d_job_takeovers_total", outcome="rerun") or 0
                   for s in self.servers)

    def job_keys(self, port):
        listed = resp(port, "--scan", "--pattern", "cube3d:job:*")
        return set(line for line in listed.splitlines() if line)

    def all_succeeded_once(self, polled, ids, reader, redis_port):
        """The first four of `ids` were long-polled (`polled`: long_polls' answers) to SUCCEEDED;
        every one ends SUCCEEDED, read through `reader`, none run again; the Redis on
        `redis_port` holds exactly these jobs."""
        for job_id in ids[:4]:
            status, job = polled.get(job_id, (None, "no answer"))
            self.assertEqual(status, 200, job)
            self.assertEqual(job["state"], "JOB_STATE_SUCCEEDED", job)
        for job_id in ids:
            job = self.ended(reader, job_id)
            self.assertEqual(job["state"], "JOB_STATE_SUCCEEDED", job)
            self.assertEqual(job.get("takeovers", 0), 0, job)
        self.assertEqual(self.takeovers(), 0)
        self.assertEqual(self.job_keys(redis_port), {f"cube3d:job:{i}" for i in ids})

    # -- the faults --

    def test_1_a_stall_of_two_leases_redoes_no_work_and_makes_no_ghost(self):
        redis = self.redis("stall")
        a, b = self.start_servers(["--redis-url", f"redis://{e2e.HOST}:{redis.port}"])
        ids = [self.accepted(server, f"a stalled chair {n}")
               for n, server in enumerate((a, b, a, b))]
        self.wait_running(a, ids)
        redis.signal(signal.SIGSTOP)
        stalled = time.monotonic()
        refused_keys = []
        try:
            while time.monotonic() - stalled < 2 * LEASE_MS / 1000:
                key = str(uuid.uuid4())
                status, _, answer = self.submit(a, f"a submit in the stall {key}", key)
                self.assertIn(status, (202, 503), answer)
                if status == 503:
                    refused_keys.append(key)
                else:
                    ids.append(answer["id"])  # (Redis stopped after it answered)
                time.sleep(0.2)
        finally:
            redis.signal(signal.SIGCONT)
        resumed = time.monotonic()
        self.assertGreater(len(refused_keys), 0, "no submit came in during the stall")
        first_accept = None
        retried = []
        for key in refused_keys:
            retried.append(self.accepted(a, f"a submit in the stall {key}", key))
            if first_accept is None:
                first_accept = time.monotonic() - resumed
        # Each key once: a second retry of one answers the same job.
        self.assertEqual(self.accepted(b, f"a submit in the stall {refused_keys[0]}",
                                       refused_keys[0], expect=200), retried[0])
        for job_id in ids + retried:
            job = self.ended(b, job_id)
            self.assertEqual(job["state"], "JOB_STATE_SUCCEEDED", job)
            self.assertEqual(job.get("takeovers", 0), 0, job)
        self.assertEqual(self.takeovers(), 0)
        # No ghost: Redis holds exactly the jobs some client was given.
        self.assertEqual(self.job_keys(redis.port),
                         {f"cube3d:job:{i}" for i in ids + retried})
        self.figures["stall"] = {
            "stall_s": round(2 * LEASE_MS / 1000, 3), "lease_ms": LEASE_MS,
            "jobs_running_through_it": 4, "reruns": self.takeovers(), "ghost_jobs": 0,
            "submits_refused_503": len(refused_keys),
            "first_accepted_submit_after_resume_s": round(first_accept, 3)}

    def test_2_redis_killed_and_restarted_from_its_aof_loses_no_job(self):
        redis = self.redis("aof", ["--appendonly", "yes", "--appendfsync", "always"])
        a, b = self.start_servers(["--redis-url", f"redis://{e2e.HOST}:{redis.port}"])
        ids = [self.accepted(server, f"a crashed lamp {n}")
               for n, server in enumerate((a, b, a, b))]
        redis.kill()
        killed = time.monotonic()
        redis.start()
        redis.wait_loaded()
        ids.append(self.accepted(b, "a lamp after the crash"))
        back = time.monotonic() - killed
        for job_id in ids:
            job = self.ended(a, job_id)
            self.assertEqual(job["state"], "JOB_STATE_SUCCEEDED", job)
        self.figures["crash_with_aof"] = {"jobs_given": len(ids), "lost": 0,
                                          "first_accepted_submit_after_kill_s": round(back, 3)}

    def test_3_a_sentinel_failover_needs_no_restart_and_loses_no_job(self):
        primary = self.redis("primary")
        # Two replicas: the one promoted, and one that follows it, so that jobs.durable_replicas
        # 1 still has a replica to wait for after the failover.
        replicas = [self.redis(f"replica{n}", ["--replicaof", e2e.HOST, str(primary.port)])
                    for n in range(2)]
        sentinels = [self.redis(f"sentinel{n}", [
            "--sentinel", "monitor", MASTER, e2e.HOST, str(primary.port), "2",
            "--sentinel", "down-after-milliseconds", MASTER, str(DOWN_AFTER_MS),
            "--sentinel", "failover-timeout", MASTER, "5000"], sentinel=True)
                     for n in range(3)]
        # The replica streams (it acknowledges writes) before the servers need it to.
        deadline = time.monotonic() + 20
        while resp(primary.port, "WAIT", "2", "200") != "2":
            resp(primary.port, "SET", "probe", "1")
            self.assertLess(time.monotonic(), deadline, "the replica never streamed")
        redis_args = ["--redis-url", "redis://sentinels.invalid",
                      "--set", "redis.sentinels=" + ",".join(
                          f"{e2e.HOST}:{s.port}" for s in sentinels),
                      "--set", f"redis.master_name={MASTER}"]
        a, b = self.start_servers(redis_args, ["--set", "jobs.durable_replicas=1",
                                               "--set", "jobs.durable_timeout_ms=500"])
        takers = (a, b, a, b)
        ids = [self.accepted(server, f"a failed-over boat {n}") for n, server in enumerate(takers)]
        # Each job long-polled, across the failover, on the replica that took (and runs) it.
        joined = self.long_polls(list(zip(takers, ids)))
        time.sleep(0.2)  # the long-polls are waiting
        primary.kill()
        killed = time.monotonic()
        key = str(uuid.uuid4())
        ids.append(self.accepted(a, "a boat after the failover", key,
                                 timeout=DOWN_AFTER_MS / 1000 + 30))
        back = time.monotonic() - killed
        self.assertLess(back, DOWN_AFTER_MS / 1000 + 5)
        promoted = resp(sentinels[0].port, "SENTINEL", "get-master-addr-by-name",
                        MASTER).splitlines()[-1]
        self.assertIn(promoted, [str(r.port) for r in replicas])
        self.all_succeeded_once(joined(), ids, b, int(promoted))
        self.figures["sentinel_failover"] = {
            "down_after_ms": DOWN_AFTER_MS, "jobs_given_before": 4, "lost": 0,
            "long_polled_across_it": 4,
            "reruns": self.takeovers(),
            "first_accepted_submit_after_kill_s": round(back, 3)}

    def test_4_a_flushed_script_cache_costs_no_client_anything(self):
        # The connections send each script by its SHA-1 once it has run there; SCRIPT FLUSH
        # empties Redis' cache under them (as an operator, or a newer Redis' eviction, may). The
        # scripts answered NOSCRIPT did not run and are sent again in full: no answer changes.
        redis = self.redis("flush")
        a, b = self.start_servers(["--redis-url", f"redis://{e2e.HOST}:{redis.port}"])
        takers = (a, b, a, b)
        ids = [self.accepted(server, f"a flushed kite {n}") for n, server in enumerate(takers)]
        joined = self.long_polls(list(zip(takers, ids)))
        self.wait_running(a, ids)
        refused = 0
        for n in range(6):
            self.assertEqual(resp(redis.port, "SCRIPT", "FLUSH"), "OK")
            server = (a, b)[n % 2]
            status, _, job = self.submit(server, f"a kite after flush {n}")
            self.assertIn(status, (202, 503), job)
            if status == 503:
                refused += 1
            else:
                ids.append(job["id"])
            time.sleep(LEASE_MS / 1000 / 3)  # a renewal round between flushes
        self.assertEqual(refused, 0)
        self.all_succeeded_once(joined(), ids, b, redis.port)
        # The flushes did reach calls by SHA-1: Redis answered some NOSCRIPT (a failed call).
        stats = resp(redis.port, "INFO", "commandstats")
        match = re.search(r"cmdstat_evalsha:calls=\d+,.*failed_calls=(\d+)", stats)
        self.assertIsNotNone(match, stats)
        self.assertGreater(int(match.group(1)), 0, stats)
        self.figures["script_flush"] = {"flushes": 6, "jobs": len(ids), "refused_503": refused,
                                        "reruns": self.takeovers(),
                                        "evalsha_noscript": int(match.group(1))}


if __name__ == "__main__":
    unittest.main()
