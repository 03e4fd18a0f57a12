"""What operators read off a running cube3d-server: the request counter agrees, code by code,
with what the clients saw (a burst of successes, short deadlines, cancellations, malformed,
oversized and misaddressed calls, over gRPC and HTTP); the metric names and types are the
documented ones, in base units; JSON log lines parse and carry the request id, the API key's
name and the W3C trace id. Run by ctest (tests/CMakeLists.txt, test e2e.observability):
    CUBE3D_BIN_DIR=build/bin CUBE3D_SOURCE_DIR=. python3 -m unittest -v test_observability_e2e
Uses server_process's server helpers (one keyed server with the HTTP gateway).
"""
import collections
import concurrent.futures
import json
import os
import re
import threading
import time
import unittest
import urllib.error
import urllib.request

import grpc

import server_process as e2e
from server_process import HOST, RPC_TIMEOUT_S, make_request, metric_value, rpc_code

setUpModule = e2e.setUpModule
tearDownModule = e2e.tearDownModule

MAX_MESSAGE_BYTES = 1 << 20  # the smallest allowed; requests over it are refused by gRPC
READ_TIMEOUT_MS = 1000  # a call that sends no request message is cancelled after this
API_KEY = "observability-test-key-0123456789"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
HTTP_TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
HTTP_TRACEPARENT = f"00-{HTTP_TRACE_ID}-b7ad6b7169203331-01"

# name -> type: the documented metrics (README's Operations section), shared with deploy.k8s.
with open(os.path.join(e2e.SOURCE, "tests", "server_metrics.json")) as f:
    EXPECTED_METRICS = json.load(f)


def metric_types(text):
    """'# TYPE name type' lines -> {name: type}."""
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))


def request_counts(samples):
    """cube3d_requests_total by code."""
    return collections.Counter({l["code"]: v for n, l, v in samples
                                if n == "cube3d_requests_total"})


class ObservabilityTest(e2e.KeyedServerTestCase):
    KEYS = [("studio-obs", API_KEY, {})]  # so that the log lines carry a key's name
    SERVER_ARGS = ["--max-queue-delay-ms", "20",
                   "--set", f"limits.max_message_bytes={MAX_MESSAGE_BYTES}",
                   "--set", f"limits.request_read_timeout_ms={READ_TIMEOUT_MS}",
                   "--set", "logging.format=json"]
    HTTP = True

    # -- clients --

    def metadata(self, traceparent=None):
        md = [("authorization", f"Bearer {API_KEY}")]
        if traceparent:
            md.append(("traceparent", traceparent))
        return md

    def unary(self, request, timeout=RPC_TIMEOUT_S, traceparent=None):
        return rpc_code(lambda: self.server.stub().GenerateMesh(
            request, timeout=timeout, metadata=self.metadata(traceparent)))[0]

    def raw_unary(self, payload, method="/cube3d.v1.MeshService/GenerateMesh"):
        call = self.server.channel.unary_unary(method, request_serializer=None,
                                               response_deserializer=None)
        return rpc_code(lambda: call(payload, timeout=60, metadata=self.metadata()))[0]

    def stalled_call(self):
        """Opens GenerateMesh and never sends the request message: the server cancels it after
        limits.request_read_timeout_ms."""
        release = threading.Event()

        def nothing():
            release.wait(RPC_TIMEOUT_S)
            return
            yield  # a generator that yields nothing until released

        call = self.server.channel.stream_unary("/cube3d.v1.MeshService/GenerateMesh",
                                                request_serializer=None,
                                                response_deserializer=None)
        start = time.monotonic()
        try:
            code = rpc_code(lambda: call(nothing(), timeout=60, metadata=self.metadata()))[0]
        finally:
            release.set()
        self.assertLess(time.monotonic() - start, 30, "a stalled sender was not cut off")
        return code

    def cancelled_stream(self, request):
        call = self.server.stub().GenerateMeshStream(request, timeout=RPC_TIMEOUT_S,
                                                     metadata=self.metadata())
        try:
            next(call)  # the first progress event: the request is in
        except grpc.RpcError as e:
            return e.code()
        call.cancel()
        return rpc_code(lambda: list(call))[0]

    def http_generate(self, body, traceparent=None, key=API_KEY, path="/v1/meshes:generate",
                      method="POST"):
        """(gRPC code name the HTTP client saw, body)."""
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
        if traceparent:
            headers["traceparent"] = traceparent
        req = urllib.request.Request(f"http://{HOST}:{self.server.http_port}{path}",
                                     data=body, headers=headers, method=method)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(req, timeout=RPC_TIMEOUT_S) as r:
                return "OK", r.read()
        except urllib.error.HTTPError as e:
            payload = json.loads(e.read())
            return payload["error"]["status"], payload

    # -- tests --

    def settled_request_counts(self, quiet_s=0.5, timeout=15):
        """cube3d_requests_total once it has stopped moving. A call is counted in gRPC's OnDone,
        which can come after its client has the answer: the other tests' last calls may still
        be counted after this test's first scrape (CI saw one OK too many that way)."""
        deadline = time.monotonic() + timeout
        counts = request_counts(self.server.metrics())
        while time.monotonic() < deadline:
            time.sleep(quiet_s)
            now = request_counts(self.server.metrics())
            if now == counts:
                return counts
            counts = now
        self.fail(f"cube3d_requests_total still moving after {timeout} s: {dict(counts)}")

    def test_request_counter_equals_what_clients_saw(self):
        before = self.settled_request_counts()
        good = json.dumps({"prompt": "an http chair", "resolutionBase": 4}).encode()
        jobs = []
        for i in range(8):
            jobs.append(lambda i=i: self.unary(make_request(f"a burst chair {i}")))
        hurried_ids = [f"hurried-lamp-{i}" for i in range(10)]
        for i, request_id in enumerate(hurried_ids):
            # Short deadlines: some pass in the queue, some while decoding, some before the
            # handler runs.
            jobs.append(lambda i=i, request_id=request_id: self.unary(
                make_request(f"a hurried lamp {i}", request_id=request_id),
                timeout=0.02 + 0.03 * i))
        for i in range(4):
            jobs.append(lambda i=i: self.cancelled_stream(
                make_request(f"a cancelled vase {i}", resolution_base=6)))
        for _ in range(3):
            jobs.append(lambda: self.raw_unary(b"\xff\xff\xff\x07 not protobuf"))
        for _ in range(3):
            # Over the transport's receive limit: refused before any handler runs.
            jobs.append(lambda: self.raw_unary(b"\x0a\xff\xff\x10" + b"x" * (MAX_MESSAGE_BYTES + 4096)))
        for _ in range(2):
            jobs.append(lambda: self.raw_unary(b"", method="/cube3d.v1.MeshService/NoSuchMethod"))
            jobs.append(lambda: self.raw_unary(b"", method="/not.a.Service/Method"))
        jobs.append(lambda: self.unary(make_request("a bad field", resolution_base=99)))
        jobs += [self.stalled_call] * 2  # CANCELLED after READ_TIMEOUT_MS
        jobs.append(lambda: rpc_code(lambda: self.server.stub().GenerateMesh(
            make_request("no key"), timeout=60))[0])  # UNAUTHENTICATED
        http_jobs = [lambda: self.http_generate(good)[0],
                     lambda: self.http_generate(b"{not json")[0],
                     lambda: self.http_generate(good, key="wrong key")[0],
                     # Refused by the HTTP layer before any handler: no such path, a method
                     # the path does not take, a body over limits.max_message_bytes.
                     lambda: self.http_generate(good, path="/v1/meshes:nothing")[0],
                     lambda: self.http_generate(None, method="GET")[0],
                     lambda: self.http_generate(b"{" + b" " * MAX_MESSAGE_BYTES + b"}")[0]]

        with concurrent.futures.ThreadPoolExecutor(max_workers=24) as pool:
            futures = [pool.submit(job) for job in jobs] + [pool.submit(j) for j in http_jobs]
            seen = collections.Counter()
            for f in futures:
                code = f.result(timeout=RPC_TIMEOUT_S + 60)
                seen[code if isinstance(code, str) else code.name] += 1
        # Health checks and scrapes are not requests.
        for _ in range(3):
            self.assertEqual(self.server.health(), "SERVING")

        # The burst exercised what it meant to (the rest depends on timing).
        for code in ("OK", "DEADLINE_EXCEEDED", "CANCELLED", "INVALID_ARGUMENT",
                     "RESOURCE_EXHAUSTED", "UNIMPLEMENTED", "UNAUTHENTICATED", "NOT_FOUND"):
            self.assertGreater(seen[code], 0, f"no {code} in the burst: {dict(seen)}")

        def deltas(samples):
            now = request_counts(samples)
            return {c: v for c in set(now) | set(before) if (v := now[c] - before[c])}

        # A deadline can pass before its call reaches the server at all (the shortest is 20 ms,
        # and a loaded machine takes that to send it, or to hand it from gRPC's core to the
        # service): the server cannot count a call it never saw, so such calls (their request
        # id never in the server's log) may be missing from its DEADLINE_EXCEEDED count, and
        # only from that. Every other code agrees exactly.
        def unseen_by_server():
            log = self.server.log()
            return sum(1 for request_id in hurried_ids if f'"request_id":"{request_id}"' not in log)

        def agrees(samples):
            server = deltas(samples)
            client = dict(seen)
            short = client.get("DEADLINE_EXCEEDED", 0) - server.get("DEADLINE_EXCEEDED", 0)
            server.pop("DEADLINE_EXCEEDED", None)
            client.pop("DEADLINE_EXCEEDED", None)
            return server == client and 0 <= short <= unseen_by_server()

        samples = self.wait_for_metrics(
            agrees, f"cube3d_requests_total deltas == {dict(seen)} (DEADLINE_EXCEEDED: less "
            "at most the hurried calls that never reached the server)",
            explain=lambda s: f"server deltas {deltas(s)}; clients saw {dict(seen)}; hurried "
            f"calls absent from the server's log: {unseen_by_server()}")
        self.wait_for_metrics(lambda s: metric_value(s, "cube3d_requests_running") == 0 and
                              metric_value(s, "cube3d_queue_depth") == 0,
                              "nothing running or queued after the burst")
        self.assertIsNotNone(samples)
        self.assert_still_serving_with_key()

    def assert_still_serving_with_key(self):
        self.assertEqual(self.server.health(), "SERVING")
        self.assertEqual(self.unary(make_request("a mug, after the burst")), grpc.StatusCode.OK)

    def test_metric_names_types_and_units(self):
        self.assertEqual(self.unary(make_request("a measured table")), grpc.StatusCode.OK)
        status, text = self.server.http_get("/metrics")
        self.assertEqual(status, 200)
        types = metric_types(text)
        for name, kind in EXPECTED_METRICS.items():
            self.assertEqual(types.get(name), kind, f"{name}: {types.get(name)}, want {kind}")
        for name in types:
            self.assertFalse(name.endswith("_ms"), f"{name}: not a base unit")
            if types[name] == "counter":
                self.assertTrue(name.endswith("_total"), name)
        samples = e2e.parse_metrics(text)
        info = [l for n, l, v in samples if n == "cube3d_build_info" and v == 1]
        self.assertEqual(len(info), 1, info)
        self.assertEqual(set(info[0]), {"version", "revision", "device", "dtype"})
        self.assertEqual((info[0]["device"], info[0]["dtype"]), ("cpu", "float32"))
        buckets = {l.get("batch_bucket") for n, l, v in samples if n == "cube3d_batch_size_count"}
        self.assertEqual(buckets, {"1", "2", "4", "8"})
        for name in ("cube3d_request_duration_seconds", "cube3d_queue_duration_seconds",
                     "cube3d_time_to_first_token_seconds", "cube3d_time_per_output_token_seconds",
                     "cube3d_mesh_duration_seconds"):
            self.assertGreaterEqual(metric_value(samples, name + "_count"), 1, name)
            total = metric_value(samples, name + "_sum")
            self.assertGreater(total, 0, name)
            self.assertLess(total / metric_value(samples, name + "_count"), 600,
                            f"{name}: not seconds")
        # TPOT's buckets reach below a millisecond (a GPU) and up to half a second.
        les = sorted(float(l["le"]) for n, l, v in samples
                     if n == "cube3d_time_per_output_token_seconds_bucket" and l["le"] != "+Inf")
        self.assertLessEqual(les[0], 0.0005)
        self.assertGreaterEqual(les[-1], 0.25)
        self.assertGreater(metric_value(samples, "process_resident_memory_bytes"), 1 << 20)
        self.assertGreater(metric_value(samples, "process_open_fds"), 3)
        self.assertLessEqual(metric_value(samples, "process_start_time_seconds"), time.time())

    def test_json_log_lines_carry_request_key_and_trace(self):
        self.assertEqual(self.unary(make_request("a traced teapot", request_id="traced-grpc-1"),
                                    traceparent=TRACEPARENT), grpc.StatusCode.OK)
        code, _ = self.http_generate(json.dumps(
            {"prompt": "a traced kettle", "resolutionBase": 4, "requestId": "traced-http-1"}
        ).encode(), traceparent=HTTP_TRACEPARENT)
        self.assertEqual(code, "OK")
        # A hostile request id: escaped in the JSON, the line still one object.
        self.assertEqual(self.unary(make_request("x", request_id='"}\n{"level":"fatal')),
                         grpc.StatusCode.INVALID_ARGUMENT)
        # An invalid traceparent is ignored, never an error.
        self.assertEqual(self.unary(make_request("an untraced cup", request_id="untraced-1"),
                                    traceparent="00-XYZ-bad-01"), grpc.StatusCode.OK)

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "untraced-1" not in self.server.log():
            time.sleep(0.1)
        records = []
        for line in self.server.log().splitlines():
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except ValueError:
                self.fail(f"a log line that is not JSON: {line!r}")
        for r in records:
            self.assertRegex(r["time"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
            self.assertIn(r["level"], ("trace", "debug", "info", "warning", "error",
                                       "critical"))
            self.assertIsInstance(r["message"], str)

        def lines_of(request_id):
            return [r for r in records if r.get("request_id") == request_id]

        grpc_lines = lines_of("traced-grpc-1")
        self.assertTrue(grpc_lines, "no log line with request_id traced-grpc-1")
        for r in grpc_lines:
            self.assertEqual(r.get("trace_id"), TRACE_ID, r)
            self.assertEqual(r.get("api_key"), "studio-obs", r)
        http_lines = lines_of("traced-http-1")
        self.assertTrue(http_lines, "no log line with request_id traced-http-1")
        for r in http_lines:
            self.assertEqual(r.get("trace_id"), HTTP_TRACE_ID, r)
        for r in lines_of("untraced-1"):
            self.assertNotIn("trace_id", r)
        self.assertTrue(any('{"level":"fatal' in r["message"] for r in records),
                        "the hostile id was not logged (escaped)")
        self.assertFalse(any(r["level"] == "fatal" for r in records))
        # The key itself never reaches the log.
        self.assertNotIn(API_KEY, self.server.log())


if __name__ == "__main__":
    unittest.main()
