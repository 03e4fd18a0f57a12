"""Jobs end to end (SubmitMeshJob / GetMeshJob / CancelMeshJob over gRPC, POST /v1/jobs,
GET /v1/jobs/{id}[/mesh], DELETE /v1/jobs/{id} over HTTP): submit, poll and long-poll, the mesh
equal to the synchronous answer's, cancellation that stops the work, jobs private to their API
key, bad ids and invalid requests refused at submit, the per-key limit of open jobs, expiry after
jobs.result_ttl_s, the long-poll cap jobs.max_wait_ms, ids from an earlier server run, and the
job metrics. Run by ctest (e2e.jobs):

    CUBE3D_BIN_DIR=build/bin CUBE3D_SOURCE_DIR=. python3 -m unittest -v test_jobs_e2e

Uses server_process's helpers; the demo model on the CPU, resolution 4 unless a test needs a
job that stays open for a while (resolution 8: seconds of meshing, cancelled long before it
ends). Every wait is bounded; the server's log is printed when a test fails.
"""
import json
import os
import time
import unittest

import grpc
import pygltflib
from google.protobuf import json_format

import server_process as e2e
from server_process import (RES, KeyedServerTestCase, ServerTestCase, auth, bearer,
                            make_request, metric_value, rpc_code)

JOBS = "/v1/jobs"
GENERATE = "/v1/meshes:generate"
FLOW_RES = 5   # under a second of work: a job that is usually still open when first polled
SLOW_RES = 8   # seconds of meshing: a job surely open when it is cancelled
ID_RE = r"^[0-9a-f]{40}$"
TAG_DIGITS = 8  # a job id's first digits: the server run's tag

setUpModule = e2e.setUpModule
tearDownModule = e2e.tearDownModule


def cpu_seconds(pid):
    """User + system CPU time of a process so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def other_id(job_id):
    """An id of this server run (same tag) that no job has: the random part changed."""
    rest = job_id[TAG_DIGITS:]
    flipped = "".join("0123456789abcdef"[(int(c, 16) + 1) % 16] for c in rest)
    return job_id[:TAG_DIGITS] + flipped


def parse_glb(data):
    return pygltflib.GLTF2.load_from_bytes(data)


class JobsTestCase(ServerTestCase):
    """Helpers shared by the job suites (gRPC and HTTP); the server has the HTTP gateway and the
    result cache."""

    HTTP = True
    CACHE = True
    TMP_PREFIX = "cube3d-jobs-e2e-"
    OPEN = ()  # set in setUpClass: the open states

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.OPEN = (e2e.pb.JOB_STATE_QUEUED, e2e.pb.JOB_STATE_RUNNING)

    # -- gRPC --

    def submit(self, request, key=None, timeout=30):
        md = bearer(key) if key else None
        return self.server.stub().SubmitMeshJob(request, timeout=timeout, metadata=md)

    def get_job(self, job_id, key=None, wait_ms=0, timeout=60):
        md = bearer(key) if key else None
        return self.server.stub().GetMeshJob(e2e.pb.GetMeshJobRequest(id=job_id, wait_ms=wait_ms),
                                             timeout=timeout, metadata=md)

    def cancel_job(self, job_id, key=None, timeout=30):
        md = bearer(key) if key else None
        return self.server.stub().CancelMeshJob(e2e.pb.CancelMeshJobRequest(id=job_id),
                                                timeout=timeout, metadata=md)

    def wait_job(self, job_id, key=None, timeout=120):
        """Long-polls until the job ends; returns it."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.get_job(job_id, key, wait_ms=10000, timeout=40)
            if job.state not in self.OPEN:
                return job
            self.assertLess(time.monotonic(), deadline, f"job {job_id} still open: {job}")

    def wait_stage(self, job_id, key, stage, timeout=60):
        """Polls until the open job's progress has reached `stage`."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.get_job(job_id, key)
            self.assertIn(job.state, self.OPEN, f"the job ended before {stage}: {job}")
            if job.progress.stage >= stage:
                return job
            self.assertLess(time.monotonic(), deadline, f"job {job_id} never reached {stage}")
            time.sleep(0.05)

    # -- HTTP --

    def http_json(self, method, path, body=None, key=None, headers=None):
        """(status, headers, parsed JSON body) of a gateway request."""
        status, out_headers, data = self.server.http(method, path, body,
                                                     {**(auth(key) if key else {}),
                                                      **(headers or {})})
        self.assertEqual(out_headers["Content-Type"], "application/json", data)
        return status, out_headers, json.loads(data)

    def http_job(self, answer, status=200):
        """The MeshJob of a JSON answer with `status`."""
        got, headers, data = answer
        self.assertEqual(got, status, data)
        return json_format.ParseDict(data, e2e.pb.MeshJob())

    def assert_http_error(self, answer, http_status, grpc_status):
        status, _, data = answer
        self.assertEqual(status, http_status, data)
        error = data["error"]
        self.assertEqual(error["code"], http_status)
        self.assertEqual(error["status"], grpc_status)
        self.assertTrue(error["message"])
        return error["message"]

    def assert_job_not_found(self, job_id, code, details, why):
        """(code, details), a gRPC lookup's answer for job_id, is NOT_FOUND naming the id and
        `why`; the gateway's GET answers 404 with the same message."""
        self.assertEqual(code, grpc.StatusCode.NOT_FOUND, details)
        self.assertIn(job_id, details)
        self.assertIn(why, details)
        message = self.assert_http_error(self.http_json("GET", f"{JOBS}/{job_id}"), 404,
                                         "NOT_FOUND")
        self.assertEqual(message, details)

    # -- metrics --

    def job_counts(self):
        samples = self.server.metrics()
        states = {s: metric_value(samples, "cube3d_jobs", state=s) or 0
                  for s in ("queued", "running", "succeeded", "failed", "cancelled")}
        submitted = {o: metric_value(samples, "cube3d_jobs_submitted_total", outcome=o) or 0
                     for o in ("accepted", "refused")}
        cancelled = metric_value(samples, "cube3d_requests_total", code="CANCELLED") or 0
        return states, submitted, cancelled

    def settled_job_counts(self, timeout=30):
        """job_counts() once no job is open: a test's baseline. The gauges follow the store a
        moment after its answers (a long-poll may see SUCCEEDED before cube3d_jobs does), so an
        earlier test's last job may still read as running."""
        deadline = time.monotonic() + timeout
        while True:
            states, submitted, cancelled = self.job_counts()
            if states["queued"] == 0 and states["running"] == 0:
                return states, submitted, cancelled
            self.assertLess(time.monotonic(), deadline, f"jobs still open: {states}")
            time.sleep(0.05)

    def wait_job_counts(self, predicate, what, timeout=30):
        """Polls the job metrics until predicate(states, submitted) holds; returns them."""
        deadline = time.monotonic() + timeout
        while True:
            states, submitted, _ = self.job_counts()
            if predicate(states, submitted):
                return states, submitted
            self.assertLess(time.monotonic(), deadline,
                            f"the job metrics never showed {what}: {states} {submitted}")
            time.sleep(0.1)

    def wait_idle(self, timeout=15, share=0.3):
        """Waits for a half-second window in which the server used under `share` of a core (the
        work of a cancelled job stopped); returns the seconds waited."""
        start = time.monotonic()
        used = None
        while time.monotonic() - start < timeout:
            before, t0 = cpu_seconds(self.server.proc.pid), time.monotonic()
            time.sleep(0.5)
            used = (cpu_seconds(self.server.proc.pid) - before) / (time.monotonic() - t0)
            if used < share:
                return time.monotonic() - start
        self.fail(f"the server kept {used:.2f} of a core busy for {timeout} s after the cancel: "
                  f"the cancelled job's work goes on")


class JobsTest(KeyedServerTestCase, JobsTestCase):
    """One server with three API keys and the gateway; at most 3 open jobs per key."""

    KEYS = [("studio-a", "key-a", {}), ("studio-b", "key-b", {}), ("studio-c", "key-c", {})]
    SERVER_ARGS = ["--set", "jobs.max_jobs_per_key=3"]

    def test_grpc_submit_poll_long_poll_and_the_mesh_equals_the_synchronous_one(self):
        states0, submitted0, _ = self.settled_job_counts()
        request = make_request("a job over grpc", resolution_base=FLOW_RES, seed=7,
                               request_id="job-grpc-1")
        job = self.submit(request, "key-a")
        self.assertRegex(job.id, ID_RE)
        self.assertEqual(job.request_id, "job-grpc-1")
        self.assertGreater(job.created_unix_ms, 0)
        self.assertLessEqual(abs(job.created_unix_ms - time.time() * 1000), 60000)
        self.assertIn(job.state, self.OPEN + (e2e.pb.JOB_STATE_SUCCEEDED,))
        if job.state in self.OPEN:
            self.assertGreater(job.poll_after_ms, 0)
            self.assertEqual(job.finished_unix_ms, 0)
            self.assertFalse(job.HasField("result"))

        # A plain poll answers at once, whatever the state.
        start = time.monotonic()
        polled = self.get_job(job.id, "key-a")
        self.assertLess(time.monotonic() - start, 5)
        self.assertEqual(polled.id, job.id)
        if polled.state in self.OPEN:
            self.assertGreater(polled.poll_after_ms, 0)

        # One long-poll sees the end (the job takes about a second; wait_ms allows 30).
        start = time.monotonic()
        done = self.get_job(job.id, "key-a", wait_ms=30000)
        self.assertLess(time.monotonic() - start, 25, "the long-poll did not answer at the end")
        self.assertEqual(e2e.pb.JobState.Name(done.state), "JOB_STATE_SUCCEEDED", done.error)
        self.assertFalse(done.HasField("error"))
        self.assertGreaterEqual(done.finished_unix_ms, done.created_unix_ms)
        self.assertGreater(done.expires_unix_ms, done.finished_unix_ms)
        self.assertEqual(done.progress.stage if done.HasField("progress") else e2e.pb.STAGE_DONE,
                         e2e.pb.STAGE_DONE)
        result = done.result
        self.assert_mesh(result)
        self.assertEqual(result.request_id, "job-grpc-1")
        self.assertEqual(result.cache_status, e2e.pb.CACHE_STATUS_MISS)
        gltf = parse_glb(result.encoded)
        self.assertGreater(len(gltf.meshes), 0)
        self.assertEqual(gltf.asset.extras["request_id"], "job-grpc-1")
        # A finished job answers a long-poll at once.
        start = time.monotonic()
        self.assertEqual(self.get_job(job.id, "key-a", wait_ms=30000).state, done.state)
        self.assertLess(time.monotonic() - start, 5)

        # The synchronous call, computed afresh with the same request id: the same bytes.
        sync = self.server.stub().GenerateMesh(
            make_request("a job over grpc", resolution_base=FLOW_RES, seed=7,
                         request_id="job-grpc-1", bypass_cache=True),
            timeout=120, metadata=bearer("key-a"))
        self.assertEqual(sync.cache_status, e2e.pb.CACHE_STATUS_BYPASS)
        self.assertEqual(sync.encoded, result.encoded)
        self.assertEqual((sync.face_count, sync.vertex_count),
                         (result.face_count, result.vertex_count))

        states1, submitted1 = self.wait_job_counts(
            lambda states, submitted: states["succeeded"] >= states0["succeeded"] + 1,
            "cube3d_jobs{state=\"succeeded\"} up by 1")
        self.assertEqual(submitted1["accepted"], submitted0["accepted"] + 1)
        self.assertEqual(submitted1["refused"], submitted0["refused"])
        self.assertEqual(states1["succeeded"], states0["succeeded"] + 1)

    def test_http_submit_poll_long_poll_and_fetch_the_file(self):
        states0, submitted0, _ = self.settled_job_counts()
        body = {"prompt": "a job over http", "resolutionBase": FLOW_RES, "seed": "11",
                "requestId": "job-http-1"}
        answer = self.http_json("POST", JOBS, body, "key-a")
        job = self.http_job(answer, 202)
        headers = answer[1]
        self.assertRegex(job.id, ID_RE)
        self.assertEqual(headers["Location"], f"{JOBS}/{job.id}")
        self.assertGreaterEqual(int(headers["Retry-After"]), 1)
        self.assertEqual(headers["X-Request-Id"], "job-http-1")
        self.assertEqual(job.request_id, "job-http-1")
        self.assertIn("state", answer[2])  # every field, defaults included

        # A plain poll; the file while the job is open is 409 with a Retry-After.
        polled = self.http_job(self.http_json("GET", f"{JOBS}/{job.id}", key="key-a"))
        self.assertEqual(polled.id, job.id)
        status, mesh_headers, data = self.server.http("GET", f"{JOBS}/{job.id}/mesh",
                                                      headers=auth("key-a"))
        if status == 409:
            self.assertGreaterEqual(int(mesh_headers["Retry-After"]), 1)
            error = json.loads(data)["error"]
            self.assertEqual(error["status"], "FAILED_PRECONDITION")
            self.assertIn(job.id, error["message"])
        else:
            self.assertEqual(status, 200, data)  # the job was quicker than the poll

        # The file by long-poll: the GLB once the job succeeds.
        status, mesh_headers, glb = self.server.http("GET", f"{JOBS}/{job.id}/mesh?wait_ms=30000",
                                                     headers=auth("key-a"))
        self.assertEqual(status, 200, glb)
        self.assertEqual(mesh_headers["Content-Type"], "model/gltf-binary")
        self.assertEqual(glb[:4], b"glTF")
        self.assertEqual(mesh_headers["X-Cache"], "miss")
        gltf = parse_glb(glb)
        self.assertEqual(gltf.asset.extras["prompt"], "a job over http")
        self.assertEqual(gltf.asset.extras["seed"], 11)
        self.assertEqual(gltf.asset.extras["request_id"], "job-http-1")

        # The job by long-poll (ended: at once), in JSON with the result.
        answer = self.http_json("GET", f"{JOBS}/{job.id}?wait_ms=30000", key="key-a")
        done = self.http_job(answer)
        self.assertEqual(e2e.pb.JobState.Name(done.state), "JOB_STATE_SUCCEEDED")
        self.assertNotIn("Retry-After", answer[1])
        self.assertEqual(answer[2]["result"]["cacheStatus"], "CACHE_STATUS_MISS")
        self.assertEqual(done.result.encoded, glb)
        self.assertEqual(done.result.face_count, int(mesh_headers["X-Face-Count"]))

        # The synchronous answer, computed afresh with the same request id: the same file.
        status, sync_headers, sync = self.server.http(
            "POST", GENERATE, body, {**auth("key-a"), "Accept": "model/gltf-binary",
                                     "Cache-Control": "no-cache"})
        self.assertEqual(status, 200, sync)
        self.assertEqual(sync_headers["X-Cache"], "bypass")
        self.assertEqual(sync, glb)

        # An identical job (another request id) is answered by the cache at submit.
        again = self.http_job(self.http_json("POST", JOBS, {**body, "requestId": "job-http-2"},
                                             "key-a"), 202)
        again = self.http_job(self.http_json("GET", f"{JOBS}/{again.id}?wait_ms=30000",
                                             key="key-a"))
        self.assertEqual(e2e.pb.JobState.Name(again.state), "JOB_STATE_SUCCEEDED")
        self.assertEqual(again.result.cache_status, e2e.pb.CACHE_STATUS_HIT)
        self.assertEqual(again.result.encoded, glb)
        self.assertEqual(again.result.effective.computed_by_request_id, "job-http-1")

        states1, submitted1 = self.wait_job_counts(
            lambda states, submitted: states["succeeded"] >= states0["succeeded"] + 2,
            "cube3d_jobs{state=\"succeeded\"} up by 2")
        self.assertEqual(submitted1["accepted"], submitted0["accepted"] + 2)
        self.assertEqual(states1["succeeded"], states0["succeeded"] + 2)

    def test_grpc_cancel_while_meshing_stops_the_work(self):
        states0, _, cancelled0 = self.settled_job_counts()
        job = self.submit(make_request("a slow cancelled cathedral", resolution_base=SLOW_RES),
                          "key-a")
        self.wait_stage(job.id, "key-a", e2e.pb.STAGE_MESHING)
        cancelled_at = time.monotonic()
        answer = self.cancel_job(job.id, "key-a")
        self.assertEqual(e2e.pb.JobState.Name(answer.state), "JOB_STATE_CANCELLED", answer)
        self.assertEqual(answer.error.status, "CANCELLED")
        self.assertEqual(answer.error.code, grpc.StatusCode.CANCELLED.value[0])
        self.assertTrue(answer.error.message)
        self.assertGreater(answer.finished_unix_ms, 0)
        self.assertFalse(answer.HasField("result"))
        # The work stops: the server is idle again long before the mesh could have been made.
        self.wait_idle()
        self.assertLess(time.monotonic() - cancelled_at, 15)
        self.wait_for_metrics(
            lambda s: (metric_value(s, "cube3d_requests_total", code="CANCELLED") or 0)
            >= cancelled0 + 1 and metric_value(s, "cube3d_queue_depth") == 0,
            "cube3d_requests_total{code=\"CANCELLED\"} up by 1 and an empty queue")
        # It stays cancelled; cancelling again returns it as it is.
        self.assertEqual(self.get_job(job.id, "key-a").state, e2e.pb.JOB_STATE_CANCELLED)
        again = self.cancel_job(job.id, "key-a")
        self.assertEqual(again.state, e2e.pb.JOB_STATE_CANCELLED)
        self.assertEqual(again.finished_unix_ms, answer.finished_unix_ms)
        states1, _ = self.wait_job_counts(
            lambda states, submitted: states["cancelled"] >= states0["cancelled"] + 1 and
            states["running"] + states["queued"] == 0,
            "cube3d_jobs{state=\"cancelled\"} up by 1, none open")
        self.assertEqual(states1["cancelled"], states0["cancelled"] + 1)
        # Nothing is lost: a cheap request is quick.
        start = time.monotonic()
        self.assert_mesh(self.server.stub().GenerateMesh(
            make_request("after a cancelled job"), timeout=60, metadata=bearer("key-a")))
        self.assertLess(time.monotonic() - start, 20)

    def test_http_delete_cancels_an_open_job(self):
        body = {"prompt": "a slow cancelled tower", "resolutionBase": SLOW_RES}
        job = self.http_job(self.http_json("POST", JOBS, body, "key-a"), 202)
        self.assertIn(job.state, self.OPEN)
        status, headers, data = self.server.http("GET", f"{JOBS}/{job.id}/mesh",
                                                 headers=auth("key-a"))
        self.assertEqual(status, 409, data)
        self.assertGreaterEqual(int(headers["Retry-After"]), 1)
        answer = self.http_json("DELETE", f"{JOBS}/{job.id}", key="key-a")
        cancelled = self.http_job(answer)
        self.assertEqual(e2e.pb.JobState.Name(cancelled.state), "JOB_STATE_CANCELLED")
        self.assertEqual(answer[2]["error"]["status"], "CANCELLED")
        self.assertNotIn("Retry-After", answer[1])
        # It ended without a mesh: 409 that says so.
        status, _, data = self.server.http("GET", f"{JOBS}/{job.id}/mesh", headers=auth("key-a"))
        self.assertEqual(status, 409, data)
        self.assertIn("CANCELLED", json.loads(data)["error"]["message"])
        # DELETE again: the job as it is.
        again = self.http_job(self.http_json("DELETE", f"{JOBS}/{job.id}", key="key-a"))
        self.assertEqual(again.state, e2e.pb.JOB_STATE_CANCELLED)
        self.wait_idle()

    def test_another_keys_job_reads_as_an_unknown_id(self):
        job = self.submit(make_request("a private job"), "key-a")
        done = self.wait_job(job.id, "key-a")
        self.assertEqual(done.state, e2e.pb.JOB_STATE_SUCCEEDED)
        unknown = other_id(job.id)

        def normalized(message, job_id):
            return message.replace(job_id, "<id>")

        # gRPC: get and cancel.
        for call in (lambda i: self.get_job(i, "key-b"), lambda i: self.cancel_job(i, "key-b"),
                     lambda i: self.get_job(i, "key-b", wait_ms=5000)):
            code, theirs = rpc_code(lambda: call(job.id))
            self.assertEqual(code, grpc.StatusCode.NOT_FOUND, theirs)
            code, none = rpc_code(lambda: call(unknown))
            self.assertEqual(code, grpc.StatusCode.NOT_FOUND, none)
            self.assertEqual(normalized(theirs, job.id), normalized(none, unknown))
        # HTTP: the job, its mesh, DELETE.
        for method, suffix in (("GET", ""), ("GET", "/mesh"), ("DELETE", "")):
            theirs = self.assert_http_error(
                self.http_json(method, f"{JOBS}/{job.id}{suffix}", key="key-b"), 404, "NOT_FOUND")
            none = self.assert_http_error(
                self.http_json(method, f"{JOBS}/{unknown}{suffix}", key="key-b"), 404,
                "NOT_FOUND")
            self.assertEqual(normalized(theirs, job.id), normalized(none, unknown))
        # The owner still has it, untouched by the other key's DELETE.
        self.assertEqual(self.get_job(job.id, "key-a").state, e2e.pb.JOB_STATE_SUCCEEDED)
        # No key, or an unknown one: UNAUTHENTICATED, 401.
        for key in (None, "wrong"):
            code, details = rpc_code(lambda: self.get_job(job.id, key))
            self.assertEqual(code, grpc.StatusCode.UNAUTHENTICATED, details)
            code, details = rpc_code(lambda: self.submit(make_request("no key"), key))
            self.assertEqual(code, grpc.StatusCode.UNAUTHENTICATED, details)
            self.assert_http_error(self.http_json("GET", f"{JOBS}/{job.id}", key=key), 401,
                                   "UNAUTHENTICATED")
            self.assert_http_error(self.http_json("POST", JOBS, {"prompt": "no key"}, key=key),
                                   401, "UNAUTHENTICATED")

    def test_bad_ids_are_invalid_argument(self):
        job = self.submit(make_request("an id to spoil"), "key-a")
        bad = ["xyz", job.id[:-1], job.id + "0", job.id.upper(), "g" * 40, " " + job.id[1:]]
        for job_id in bad:
            for call in (lambda: self.get_job(job_id, "key-a"),
                         lambda: self.cancel_job(job_id, "key-a")):
                code, details = rpc_code(call)
                self.assertEqual(code, grpc.StatusCode.INVALID_ARGUMENT, (job_id, details))
                self.assertIn("40 hex", details)
        for job_id in ("xyz", job.id[:-1], job.id.upper(), "g" * 40):
            for method, suffix in (("GET", ""), ("GET", "/mesh"), ("DELETE", "")):
                message = self.assert_http_error(
                    self.http_json(method, f"{JOBS}/{job_id}{suffix}", key="key-a"), 400,
                    "INVALID_ARGUMENT")
                self.assertIn("40 hex", message)
        # A bad wait_ms is the query parameter's fault.
        message = self.assert_http_error(
            self.http_json("GET", f"{JOBS}/{job.id}?wait_ms=soon", key="key-a"), 400,
            "INVALID_ARGUMENT")
        self.assertIn("wait_ms", message)
        self.wait_job(job.id, "key-a")

    def test_an_invalid_request_is_refused_at_submit_and_makes_no_job(self):
        states0, submitted0, _ = self.settled_job_counts()
        for request, field in ((make_request(""), "prompt"),
                               (make_request("bad top_p", top_p=2.0), "top_p"),
                               (make_request("bad res", resolution_base=12), "resolution_base")):
            code, details = rpc_code(lambda: self.submit(request, "key-a"))
            self.assertEqual(code, grpc.StatusCode.INVALID_ARGUMENT, details)
            self.assertIn(field, details)
        for body, field in (({"prompt": ""}, "prompt"),
                            ({"prompt": "bad top_p", "topP": 2}, "top_p"),
                            ({"prompt": "typo", "resolutionBsae": 5}, "resolutionBsae")):
            message = self.assert_http_error(self.http_json("POST", JOBS, body, "key-a"), 400,
                                             "INVALID_ARGUMENT")
            self.assertIn(field, message)
        status, _, data = self.server.http("POST", JOBS, '{"prompt": "a chair",',
                                           {**auth("key-a"), **e2e.JSON_HEADERS})
        self.assertEqual(status, 400, data)
        states1, submitted1, _ = self.job_counts()
        self.assertEqual(submitted1["accepted"], submitted0["accepted"])
        self.assertGreaterEqual(submitted1["refused"], submitted0["refused"] + 3)
        self.assertEqual(states1, states0)

    def test_a_submit_retried_with_its_key_returns_its_job(self):
        states0, submitted0, _ = self.settled_job_counts()
        body = {"prompt": "an idempotent stool", "resolutionBase": RES, "seed": "4"}
        key = {"Idempotency-Key": '"3f1c9a2e-6b1d-4a55-9d3e-0b7a2f1c8e44"'}
        first = self.http_job(self.http_json("POST", JOBS, body, "key-a", key), 202)
        # The retry (a timeout, a lost answer): the same job, answered 200, no second one.
        again_answer = self.http_json("POST", JOBS, body, "key-a", key)
        again = self.http_job(again_answer, 200)
        self.assertEqual(again.id, first.id)
        self.assertEqual(again_answer[1]["Location"], f"{JOBS}/{first.id}")
        # The same key with another request: 422, naming the key and its job.
        status, _, data = self.http_json("POST", JOBS, {**body, "seed": "5"}, "key-a", key)
        self.assertEqual(status, 422, data)
        self.assertEqual(data["error"]["status"], "ALREADY_EXISTS")
        self.assertIn("3f1c9a2e-6b1d-4a55-9d3e-0b7a2f1c8e44", data["error"]["message"])
        self.assertIn(first.id, data["error"]["message"])
        # Another key's submit with the same idempotency key is its own.
        other = self.http_job(self.http_json("POST", JOBS, body, "key-b", key), 202)
        self.assertNotEqual(other.id, first.id)
        # A bad key is refused before anything is made.
        for bad in ('"with \\ backslash"', "x" * 256, ""):
            status, _, data = self.http_json("POST", JOBS, body, "key-a",
                                             {"Idempotency-Key": bad})
            self.assertEqual(status, 400, data)
            self.assertIn("Idempotency-Key", data["error"]["message"])
        # Over gRPC the request's request_id is the key (Google's AIP-155).
        request = make_request("an idempotent grpc stool", request_id="idem-grpc-1")
        job = self.submit(request, "key-a")
        self.assertEqual(self.submit(request, "key-a").id, job.id)
        code, details = rpc_code(lambda: self.submit(
            make_request("another request", request_id="idem-grpc-1"), "key-a"))
        self.assertEqual(code, grpc.StatusCode.ALREADY_EXISTS, details)
        self.assertIn("idem-grpc-1", details)
        for done in (first.id, other.id, job.id):
            owner = "key-b" if done == other.id else "key-a"
            self.assertEqual(self.wait_job(done, owner).state, e2e.pb.JOB_STATE_SUCCEEDED)
        _, submitted1, _ = self.job_counts()
        self.assertEqual(submitted1["accepted"], submitted0["accepted"] + 3)

    def test_open_jobs_per_key_are_limited(self):
        # jobs.max_jobs_per_key=3: key c's fourth open job is refused; key a is not affected.
        jobs = [self.submit(make_request(f"a slow limited job {i}", resolution_base=SLOW_RES),
                            "key-c") for i in range(3)]
        try:
            code, details = rpc_code(lambda: self.submit(make_request("one too many"), "key-c"))
            self.assertEqual(code, grpc.StatusCode.RESOURCE_EXHAUSTED, details)
            self.assertIn("max_jobs_per_key", details)
            refused = self.http_json("POST", JOBS, {"prompt": "one too many",
                                                    "resolutionBase": RES}, "key-c")
            self.assert_http_error(refused, 429, "RESOURCE_EXHAUSTED")
            # Every 429 says when to come back.
            self.assertGreaterEqual(int(refused[1]["Retry-After"]), 1, refused[1])
            other = self.submit(make_request("another key's slow job", resolution_base=SLOW_RES),
                                "key-b")
            self.assertEqual(self.cancel_job(other.id, "key-b").state,
                             e2e.pb.JOB_STATE_CANCELLED)
        finally:
            for job in jobs:
                self.cancel_job(job.id, "key-c")
        # Cancelled jobs are no longer open: key c may submit again.
        job = self.submit(make_request("after the limit"), "key-c")
        self.assertEqual(self.wait_job(job.id, "key-c").state, e2e.pb.JOB_STATE_SUCCEEDED)
        self.wait_idle()


class JobsLifetimeTest(JobsTestCase):
    """No API keys; finished jobs are kept 1 s; a long-poll waits at most 1 s."""

    SERVER_ARGS = ["--set", "jobs.result_ttl_s=1", "--set", "jobs.max_wait_ms=1000"]

    def test_a_finished_job_expires_after_the_ttl(self):
        job = self.submit(make_request("a short-lived job"))
        done = self.wait_job(job.id)
        self.assertEqual(done.state, e2e.pb.JOB_STATE_SUCCEEDED)
        self.assertEqual(done.expires_unix_ms - done.finished_unix_ms, 1000)
        self.wait_for_metrics(lambda s: metric_value(s, "cube3d_jobs", state="succeeded") >= 1,
                              "cube3d_jobs{state=\"succeeded\"} at least 1")
        deadline = time.monotonic() + 10
        while True:
            code, details = rpc_code(lambda: self.get_job(job.id))
            if code != grpc.StatusCode.OK:
                break
            self.assertLess(time.monotonic(), deadline, "the job never expired")
            time.sleep(0.1)
        self.assertGreaterEqual(time.time() * 1000, done.expires_unix_ms - 50)
        self.assert_job_not_found(job.id, code, details, "expired")
        self.assert_http_error(self.http_json("GET", f"{JOBS}/{job.id}/mesh"), 404, "NOT_FOUND")
        code, _ = rpc_code(lambda: self.cancel_job(job.id))
        self.assertEqual(code, grpc.StatusCode.NOT_FOUND)
        self.wait_for_metrics(lambda s: metric_value(s, "cube3d_jobs", state="succeeded") == 0,
                              "cube3d_jobs{state=\"succeeded\"} back to 0")

    def test_a_long_poll_is_capped_by_max_wait_ms(self):
        job = self.submit(make_request("a slow capped job", resolution_base=SLOW_RES))
        try:
            start = time.monotonic()
            polled = self.get_job(job.id, wait_ms=20000)
            elapsed = time.monotonic() - start
            self.assertIn(polled.state, self.OPEN, "a resolution 8 job ended within a second")
            self.assertGreaterEqual(elapsed, 0.8)
            self.assertLess(elapsed, 6, "the long-poll was not capped at jobs.max_wait_ms")
            start = time.monotonic()
            status, headers, data = self.server.http("GET", f"{JOBS}/{job.id}?wait_ms=20000")
            elapsed = time.monotonic() - start
            self.assertEqual(status, 200, data)
            self.assertIn(json.loads(data)["state"], ("JOB_STATE_QUEUED", "JOB_STATE_RUNNING"))
            self.assertGreaterEqual(int(headers["Retry-After"]), 1)
            self.assertGreaterEqual(elapsed, 0.8)
            self.assertLess(elapsed, 6)
        finally:
            self.assertEqual(self.cancel_job(job.id).state, e2e.pb.JOB_STATE_CANCELLED)
        self.wait_idle()

    def test_an_id_from_an_earlier_server_run_is_not_found_naming_the_restart(self):
        job = self.submit(make_request("a job before the restart"))
        self.assertEqual(self.wait_job(job.id).state, e2e.pb.JOB_STATE_SUCCEEDED)
        self.server.stop()
        self.server.start()
        code, details = rpc_code(lambda: self.get_job(job.id))
        self.assert_job_not_found(job.id, code, details, "restart")
        # The new run's own ids have another tag; its jobs work.
        fresh = self.submit(make_request("a job after the restart"))
        self.assertNotEqual(fresh.id[:TAG_DIGITS], job.id[:TAG_DIGITS])
        self.assertEqual(self.wait_job(fresh.id).state, e2e.pb.JOB_STATE_SUCCEEDED)
        samples = self.server.metrics()
        self.assertEqual(metric_value(samples, "cube3d_jobs_submitted_total", outcome="accepted"),
                         1)


if __name__ == "__main__":
    unittest.main()
