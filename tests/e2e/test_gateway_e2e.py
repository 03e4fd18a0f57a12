"""The server as a gateway between studios' game servers and the model: work quotas per API key
(shape_tokens_per_minute, occupancy_points_per_minute) and per end user (X-End-User-Id /
end-user-id metadata, per_user limits, turns across end users), usage per key (GET /v1/usage and
the cube3d_key_* metrics) equal to what the clients were served, interactive before batch work
(request priority, `priority: batch` keys, batching.max_queued_batch) with aging
(batching.batch_max_wait_ms), and the prompt policy (policy.prompt_denylist_file, re-read on
SIGHUP). Run by ctest (e2e.gateway):

    CUBE3D_BIN_DIR=build/bin CUBE3D_SOURCE_DIR=. python3 -m unittest -v test_gateway_e2e

Uses server_process's helpers; the demo model on the CPU at resolution 4 (a request takes a few
hundred ms), the result cache off (identical requests are computed). The limits are chosen so
that every refusal holds for many seconds after the requests that lead to it (a bucket refills
over a minute), and orders are asserted with wide margins; every wait is bounded.
"""
import base64
import http.client
import json
import os
import re
import signal
import threading
import time
import unittest

import grpc

import server_process as e2e
from server_process import (RES, TOKENS, KeyedServerTestCase, ServerTestCase, auth, bearer,
                            make_request, metric_value, rpc_code)

GENERATE = "/v1/meshes:generate"
JOBS = "/v1/jobs"
USAGE = "/v1/usage"
GLB = "model/gltf-binary"
REFUSAL = "the prompt is refused by this server's prompt policy (policy.prompt_denylist_file)"
DENYLIST = "# e2e: one rule\n\\bforbidden thing\\b\n"
PSEUDONYM_RE = r"user u[0-9a-f]{16}\b"


def setUpModule():
    e2e.setUpModule()


def tearDownModule():
    e2e.tearDownModule()


def need(guidance=True):
    """The shape tokens a request decodes: a second (unconditional) row with guidance."""
    return TOKENS * (2 if guidance else 1)


def md(secret=None, user=None):
    """gRPC metadata: the API key and the end user, each when given."""
    out = tuple(bearer(secret)) if secret else ()
    if user is not None:
        out += (("end-user-id", user),)
    return out or None


def headers(secret=None, user=None, accept=None):
    out = dict(auth(secret)) if secret else {}
    if user is not None:
        out["X-End-User-Id"] = user
    if accept:
        out["Accept"] = accept
    return out


def call(server, request, secret=None, user=None, timeout=120):
    """GenerateMesh: (code, response or details, trailing metadata as a dict)."""
    try:
        response = server.stub().GenerateMesh(request, timeout=timeout, metadata=md(secret, user))
        return grpc.StatusCode.OK, response, {}
    except grpc.RpcError as e:
        return e.code(), e.details() or "", dict(e.trailing_metadata() or ())


def http_error(answer):
    """(HTTP status, gRPC status name, message) of an error answer."""
    status, _, body = answer
    error = json.loads(body)["error"]
    assert error["code"] == status, body
    return status, error["status"], error["message"]


def mesh_bytes(response):
    """What cube3d_key_mesh_bytes_total counts for a gRPC answer."""
    if response.format == e2e.pb.MESH_FORMAT_RAW:
        return 4 * (len(response.raw.vertices) + len(response.raw.indices))
    return len(response.encoded)


def log_count(server, text):
    return server.log().count(text)


class Tally:
    """What one key's clients saw: answers by code, and the work and bytes of the OK ones."""

    def __init__(self):
        self.requests = {}
        self.shape_tokens = 0
        self.occupancy_points = 0
        self.mesh_bytes = 0

    def add(self, code, tokens=0, points=0, nbytes=0):
        self.requests[code] = self.requests.get(code, 0) + 1
        self.shape_tokens += tokens
        self.occupancy_points += points
        self.mesh_bytes += nbytes


class GatewayTest(KeyedServerTestCase):
    """One server with the gateway, several API keys with work limits, the prompt denylist, and
    two decode slots (buckets 1, 2) so that turns between end users show in a short flood."""

    HTTP = True
    KEYS = [("tokens", "key-tokens", {"shape_tokens_per_minute": 256}),
            ("tokens-http", "key-tokens-http", {"shape_tokens_per_minute": 128}),
            ("points", "key-points", {"occupancy_points_per_minute": 6000}),
            ("players", "key-players",
             {"per_user": "{shape_tokens_per_minute: 128, max_concurrent: 1}"}),
            ("game", "key-game", {}),
            ("usage-a", "key-usage-a", {}),
            ("usage-b", "key-usage-b", {"requests_per_minute": 3}),
            ("policy", "key-policy", {})]
    SERVER_ARGS = ["--set", "batching.batch_buckets=1,2", "--set",
                   "batching.max_queue_delay_ms=0"]
    DENYLIST = DENYLIST
    TMP_PREFIX = "cube3d-gateway-e2e-"

    # -- helpers --

    def usage(self, secret):
        status, out_headers, body = self.server.http("GET", USAGE, headers=auth(secret),
                                                     timeout=10)
        self.assertEqual(status, 200, body)
        self.assertEqual(out_headers["Content-Type"], "application/json")
        return json.loads(body)

    def post(self, body, secret=None, user=None, accept=None, path=GENERATE):
        return self.server.http("POST", path, body, headers(secret, user, accept))

    def assert_refused(self, outcome, limit, needs=None):
        """A RESOURCE_EXHAUSTED gRPC answer naming `limit`, with a retry-after; returns it."""
        code, details, trailers = outcome
        self.assertEqual(code, grpc.StatusCode.RESOURCE_EXHAUSTED, details)
        self.assertIn(limit, details)
        if needs is not None:
            self.assertIn(f"this request needs {needs} shape tokens", details)
        self.assertIn("retry-after", trailers, trailers)
        retry_after = int(trailers["retry-after"])
        self.assertGreaterEqual(retry_after, 1)
        self.assertIn(f"retry after {retry_after} s", details)
        return retry_after

    def assert_ok(self, outcome):
        code, response, _ = outcome
        self.assertEqual(code, grpc.StatusCode.OK, response)
        self.assertGreater(response.face_count, 0)
        return response

    def wait_log(self, text, count, timeout=30):
        """Waits until `text` appears `count` times in the log."""
        deadline = time.monotonic() + timeout
        while log_count(self.server, text) < count:
            self.assertLess(time.monotonic(), deadline,
                            f"the log never showed {text!r} {count} times")
            time.sleep(0.05)

    def sighup_policy(self, text, expect):
        """Writes the denylist, sends SIGHUP and waits for the log line `expect` (one more)."""
        before = log_count(self.server, expect)
        with open(self.denylist_path, "w") as f:
            f.write(text)
        os.kill(self.server.proc.pid, signal.SIGHUP)
        self.wait_log(expect, before + 1)

    # -- 1. work quotas --

    def test_shape_tokens_per_minute_refuses_what_the_bucket_cannot_hold(self):
        # 256 per minute, full at start, charged with what each request decoded: 64 without
        # guidance, 128 with it (the default guidance 3.0). Every refusal below holds while the
        # bucket has refilled less than 64 tokens, i.e. for 15 s after the first request.
        s = self.server
        self.assert_ok(call(s, make_request("tokens 1", guidance_scale=0.0), "key-tokens"))  # 192
        self.assert_ok(call(s, make_request("tokens 2"), "key-tokens"))                      # 64
        retry = self.assert_refused(call(s, make_request("tokens 3"), "key-tokens"),
                                    "API key 'tokens' is over its shape_tokens_per_minute (256)",
                                    needs=need(True))
        self.assertLessEqual(retry, 15)  # (128 - at least 64) tokens at 256 a minute
        # 64 tokens are left: enough for a request without guidance, which needs only 64.
        self.assert_ok(call(s, make_request("tokens 4", guidance_scale=0.0), "key-tokens"))  # 0
        retry = self.assert_refused(
            call(s, make_request("tokens 5", guidance_scale=0.0), "key-tokens"),
            "shape_tokens_per_minute (256)", needs=need(False))
        self.assertLessEqual(retry, 15)
        usage = self.usage("key-tokens")
        self.assertEqual(usage["shape_tokens"], 2 * need(False) + need(True))
        self.assertEqual(usage["requests"], {"OK": 3, "RESOURCE_EXHAUSTED": 2})
        self.assertEqual(usage["limits"]["shape_tokens_per_minute"], 256)
        self.assertLess(usage["remaining"]["shape_tokens"], need(False))
        self.assertGreaterEqual(usage["remaining"]["shape_tokens"], 0)

        # Over HTTP: 429 with Retry-After and the same message.
        status, _, body = self.post({"prompt": "tokens http 1", "resolutionBase": RES},
                                    "key-tokens-http", accept=GLB)
        self.assertEqual(status, 200, body)
        answer = self.post({"prompt": "tokens http 2", "resolutionBase": RES}, "key-tokens-http")
        status, grpc_status, message = http_error(answer)
        self.assertEqual((status, grpc_status), (429, "RESOURCE_EXHAUSTED"), message)
        self.assertIn("API key 'tokens-http' is over its shape_tokens_per_minute (128): this "
                      f"request needs {need(True)} shape tokens", message)
        retry_after = int(answer[1]["Retry-After"])
        self.assertGreaterEqual(retry_after, 1)
        self.assertLessEqual(retry_after, 60)
        self.assertIn(f"retry after {retry_after} s", message)

    def test_occupancy_points_per_minute_refuses_once_spent(self):
        # A resolution-4 mesh evaluates 17^3 = 4913 points (a dense grid: the coarsest level of
        # the hierarchical field is above it); 6000 a minute admits one, then refuses for ~50 s.
        first = self.assert_ok(call(self.server, make_request("points 1"), "key-points"))
        self.assertEqual(first.occupancy_points, 17 ** 3)
        self.assert_refused(call(self.server, make_request("points 2"), "key-points"),
                            "API key 'points' is over its occupancy_points_per_minute (6000)")
        usage = self.usage("key-points")
        self.assertEqual(usage["occupancy_points"], first.occupancy_points)
        self.assertLess(usage["remaining"]["occupancy_points"], 6000 - 17 ** 3 + 1000)

    def test_per_user_limits_refuse_one_end_user_and_serve_the_others(self):
        s = self.server
        # per_user.shape_tokens_per_minute 128: one guided request empties a user's bucket.
        self.assert_ok(call(s, make_request("player one"), "key-players", "player-1"))
        self.assert_refused(call(s, make_request("player one again"), "key-players", "player-1"),
                            "this end user of API key 'players' is over "
                            "per_user.shape_tokens_per_minute (128)", needs=need(True))
        self.assert_refused(
            call(s, make_request("player one, unguided", guidance_scale=0.0), "key-players",
                 "player-1"),
            "per_user.shape_tokens_per_minute (128)", needs=need(False))
        status, _, body = self.post({"prompt": "player one over http", "resolutionBase": RES},
                                    "key-players", "player-1")
        self.assertEqual(http_error((status, None, body))[:2], (429, "RESOURCE_EXHAUSTED"))
        # Another end user of the key, and the key without an end user, are served.
        self.assert_ok(call(s, make_request("player two"), "key-players", "player-2"))
        self.assert_ok(call(s, make_request("no player"), "key-players"))
        # per_user.max_concurrent 1: a second request of a user while its first runs.
        stream = s.stub().GenerateMeshStream(make_request("player three, slow", resolution_base=8),
                                             timeout=120, metadata=md("key-players", "player-3"))
        self.assertEqual(next(stream).WhichOneof("event"), "progress")  # queued: it holds a place
        self.assert_refused(call(s, make_request("player three again"), "key-players", "player-3"),
                            "this end user of API key 'players' has 1 requests queued or "
                            "running, its limit (per_user.max_concurrent)")
        self.assert_ok(call(s, make_request("player four"), "key-players", "player-4"))
        events = list(stream)
        self.assertEqual(events[-1].WhichOneof("event"), "result")
        self.assertEqual(self.usage("key-players")["limits"]["per_user"],
                         {"shape_tokens_per_minute": 128, "max_concurrent": 1})

    # -- 2. end users --

    def test_two_end_users_under_one_key_both_progress(self):
        a_id, b_id = "player-a-7f3a9c2e", "player-b-51d0e8aa"
        stub = self.server.stub()
        order, lock = [], threading.Lock()

        def send(user, tag):
            future = stub.GenerateMesh.future(make_request(f"flood {tag}"), timeout=300,
                                              metadata=md("key-game", user))

            def record(_, tag=tag):
                with lock:
                    order.append(tag)
            future.add_done_callback(record)
            return future

        floods = {f"a{i}": send(a_id, f"a{i}") for i in range(20)}
        # b's two come once a's flood waits in the queue (2 slots decode, the rest wait).
        self.wait_for_metrics(
            lambda m: (metric_value(m, "cube3d_queue_depth") or 0) >= 12 or len(order) >= 6,
            "a's flood queued")
        with lock:
            done_before_b = len(order)
        others = {f"b{i}": send(b_id, f"b{i}") for i in range(2)}
        for tag, future in {**floods, **others}.items():
            code, response = rpc_code(lambda: future.result(timeout=300))
            self.assertEqual(code, grpc.StatusCode.OK, f"{tag}: {response}")
        self.assertLessEqual(done_before_b, 8, f"a's flood was not queued when b came: {order}")
        # b's turns come every other admission within the key: both of b's are taken within the
        # next few admissions, ahead of most of a's queue (first come, first served would take
        # them after all of a's).
        last_b = max(order.index("b0"), order.index("b1"))
        a_after = [t for t in order[last_b + 1:] if t.startswith("a")]
        self.assertGreaterEqual(len(a_after), 4, f"completion order: {order}")
        log = self.server.log()
        self.assertNotIn("7f3a9c2e", log, "an end user's id was logged")
        self.assertNotIn("51d0e8aa", log, "an end user's id was logged")
        pseudonyms = set(re.findall(PSEUDONYM_RE, log))
        self.assertGreaterEqual(len(pseudonyms), 2, "no end user pseudonyms in the log")

    def test_an_invalid_end_user_id_is_refused_without_being_echoed(self):
        s = self.server
        for bad in ("bad id 9c4e!", "9c4e" + "x" * 125, "9c4e<script>"):
            code, details, _ = call(s, make_request("a bad user"), "key-game", bad)
            self.assertEqual(code, grpc.StatusCode.INVALID_ARGUMENT, details)
            self.assertIn("X-End-User-Id", details)
            self.assertIn("end-user-id", details)
            self.assertNotIn("9c4e", details)
            answer = self.post({"prompt": "a bad user", "resolutionBase": RES}, "key-game", bad)
            status, grpc_status, message = http_error(answer)
            self.assertEqual((status, grpc_status), (400, "INVALID_ARGUMENT"), message)
            self.assertIn("X-End-User-Id", message)
            self.assertIn("end-user-id", message)
            self.assertNotIn("9c4e", message)
        # 128 bytes of every allowed character is an id.
        edge = ("Az09._:@+/=-" * 11)[:128]
        self.assert_ok(call(s, make_request("an edge user"), "key-game", edge))
        status, _, body = self.post({"prompt": "an edge user", "resolutionBase": RES}, "key-game",
                                    "player-http-2b8d61f0", accept=GLB)
        self.assertEqual(status, 200, body)
        log = s.log()
        self.assertNotIn("9c4e", log, "a refused end user id was logged")
        self.assertNotIn(edge, log, "an end user's id was logged")
        self.assertNotIn("2b8d61f0", log, "an end user's id was logged")
        self.assertRegex(log, PSEUDONYM_RE)

    def test_an_empty_or_repeated_end_user_id_is_refused(self):
        s = self.server
        request = make_request("an unnamed user")
        # Empty: not "no end user" (which would escape the per-user limits).
        code, details, _ = call(s, request, "key-game", "")
        self.assertEqual(code, grpc.StatusCode.INVALID_ARGUMENT, details)
        self.assertIn("empty", details)
        status, grpc_status, message = http_error(
            self.post({"prompt": "an unnamed user", "resolutionBase": RES}, "key-game", ""))
        self.assertEqual((status, grpc_status), (400, "INVALID_ARGUMENT"), message)
        self.assertIn("empty", message)
        # Twice (a client's own first, then the one a proxy appends): refused whichever is valid.
        try:
            s.stub().GenerateMesh(request, timeout=120, metadata=md("key-game") + (
                ("end-user-id", "player-1"), ("end-user-id", "player-2")))
            self.fail("a repeated end-user-id was accepted")
        except grpc.RpcError as e:
            self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT, e.details())
            self.assertIn("sent 2 times", e.details())
        conn = http.client.HTTPConnection(e2e.HOST, s.http_port, timeout=120)
        try:
            body = json.dumps({"prompt": "an unnamed user", "resolutionBase": RES}).encode()
            conn.putrequest("POST", GENERATE)
            for name, value in (*auth("key-game").items(), ("Content-Type", "application/json"),
                                ("X-End-User-Id", "player-1"), ("X-End-User-Id", "player-2"),
                                ("Content-Length", str(len(body)))):
                conn.putheader(name, value)
            conn.endheaders(body)
            response = conn.getresponse()
            answer = response.read()
            self.assertEqual(response.status, 400, answer)
            error = json.loads(answer)["error"]
            self.assertEqual(error["status"], "INVALID_ARGUMENT")
            self.assertIn("sent 2 times", error["message"])
            self.assertIn("X-End-User-Id", error["message"])
        finally:
            conn.close()

    def test_the_api_ports_metrics_name_no_key(self):
        # Some per-key traffic first, so that the per-key series exist.
        self.assert_ok(call(self.server, make_request("a metric chair"), "key-game", "player-m"))
        status, _, body = self.server.http("GET", "/metrics")
        self.assertEqual(status, 200, body)
        text = body.decode()
        self.assertIn("cube3d_requests_total", text)  # the rest is there
        self.assertNotIn("cube3d_key_", text)
        self.assertNotIn("cube3d_prompt_refusals_total", text)
        self.assertNotRegex(text, r'\bkey="')
        self.assertNotIn("\"game\"", text)  # no key's name, in any family
        # The metrics listener (for Prometheus) keeps them.
        samples = self.server.metrics()
        self.assertTrue(any(n.startswith("cube3d_key_") for n, _, _ in samples))

    # -- 3. usage --

    def test_usage_equals_what_the_clients_were_served(self):
        s = self.server
        a, b = Tally(), Tally()

        def grpc_call(tally, secret, request, user=None):
            code, response, _ = call(s, request, secret, user)
            if code == grpc.StatusCode.OK:
                guided = not request.HasField("guidance_scale") or request.guidance_scale > 0
                tally.add("OK", need(guided), response.occupancy_points, mesh_bytes(response))
            else:
                tally.add(code.name)
            return code

        def http_call(tally, secret, body, accept=None, user=None):
            status, out_headers, data = self.post({"resolutionBase": RES, **body}, secret, user,
                                                  accept)
            if status != 200:
                _, grpc_status, _ = http_error((status, out_headers, data))
                tally.add(grpc_status)
                return grpc_status
            guided = body.get("guidanceScale", 3.0) > 0
            if accept == GLB:
                self.assertEqual(data[:4], b"glTF")
                tally.add("OK", need(guided), int(out_headers["X-Occupancy-Points"]), len(data))
            else:  # the JSON answer: the file in base64
                answer = json.loads(data)
                tally.add("OK", need(guided), int(answer["occupancyPoints"]),
                          len(base64.b64decode(answer["encoded"])))
            return "OK"

        raw = e2e.pb.MESH_FORMAT_RAW
        # Key a: successes of every kind, bad input, a refused prompt.
        self.assertEqual(grpc_call(a, "key-usage-a", make_request("usage glb")), grpc.StatusCode.OK)
        self.assertEqual(grpc_call(a, "key-usage-a", make_request("usage glb, unguided",
                                                                  guidance_scale=0.0)),
                         grpc.StatusCode.OK)
        self.assertEqual(grpc_call(a, "key-usage-a", make_request("usage raw", format=raw),
                                   user="usage-player"), grpc.StatusCode.OK)
        self.assertEqual(grpc_call(a, "key-usage-a", make_request("usage bad", top_p=5.0)),
                         grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(grpc_call(a, "key-usage-a", make_request("a forbidden thing")),
                         grpc.StatusCode.PERMISSION_DENIED)
        self.assertEqual(http_call(a, "key-usage-a", {"prompt": "usage http glb"}, GLB), "OK")
        self.assertEqual(http_call(a, "key-usage-a", {"prompt": "usage http glb, unguided",
                                                      "guidanceScale": 0}, GLB), "OK")
        self.assertEqual(http_call(a, "key-usage-a", {"prompt": "usage http json"}), "OK")
        self.assertEqual(http_call(a, "key-usage-a", {"prompt": "usage http bad", "topP": 5}),
                         "INVALID_ARGUMENT")
        self.assertEqual(http_call(a, "key-usage-a", {"prompt": "usage bad user"}, user="bad id"),
                         "INVALID_ARGUMENT")
        # Key b: three requests a minute, then refusals (validation comes before the limit).
        self.assertEqual(grpc_call(b, "key-usage-b", make_request("usage b 1")), grpc.StatusCode.OK)
        self.assertEqual(http_call(b, "key-usage-b", {"prompt": "usage b 2"}, GLB), "OK")
        self.assertEqual(grpc_call(b, "key-usage-b", make_request("usage b 3", format=raw)),
                         grpc.StatusCode.OK)
        self.assertEqual(grpc_call(b, "key-usage-b", make_request("usage b 4")),
                         grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertEqual(http_call(b, "key-usage-b", {"prompt": "usage b 5"}, GLB),
                         "RESOURCE_EXHAUSTED")
        self.assertEqual(grpc_call(b, "key-usage-b", make_request("usage b bad", top_p=5.0)),
                         grpc.StatusCode.INVALID_ARGUMENT)
        # Unauthenticated calls are no key's.
        self.assertEqual(call(s, make_request("usage, no key"))[0],
                         grpc.StatusCode.UNAUTHENTICATED)

        for name, secret, tally, refusals in (("usage-a", "key-usage-a", a, 1),
                                              ("usage-b", "key-usage-b", b, 0)):
            usage = self.usage(secret)
            self.assertEqual(usage["key"], name)
            self.assertEqual(usage["requests"], tally.requests, name)
            self.assertEqual(usage["shape_tokens"], tally.shape_tokens, name)
            self.assertEqual(usage["occupancy_points"], tally.occupancy_points, name)
            self.assertEqual(usage["mesh_bytes"], tally.mesh_bytes, name)
            self.assertEqual(usage["prompt_refusals"], refusals, name)
            self.assertEqual(usage["running"], 0, name)
            samples = s.metrics()
            by_code = {l["code"]: v for n, l, v in samples
                       if n == "cube3d_key_requests_total" and l.get("key") == name}
            self.assertEqual(by_code, tally.requests, name)
            for metric, want in (("cube3d_key_shape_tokens_total", tally.shape_tokens),
                                 ("cube3d_key_occupancy_points_total", tally.occupancy_points),
                                 ("cube3d_key_mesh_bytes_total", tally.mesh_bytes),
                                 ("cube3d_prompt_refusals_total", refusals)):
                self.assertEqual(metric_value(samples, metric, key=name), want, f"{metric} {name}")
        usage_a, usage_b = self.usage("key-usage-a"), self.usage("key-usage-b")
        self.assertEqual(usage_a["limits"], {"priority": "interactive"})
        self.assertEqual(usage_a["remaining"], {})
        self.assertEqual(usage_b["limits"], {"requests_per_minute": 3, "priority": "interactive"})
        self.assertLess(usage_b["remaining"]["requests"], 1)
        self.assertGreater(b.occupancy_points, 0)
        # The answer is the caller's own; an unknown key or none is 401.
        self.assertNotIn("usage-a", json.dumps(usage_b))
        for bad in ({"Authorization": "Bearer not-a-key"}, {}):
            status, out_headers, body = s.http("GET", USAGE, headers=bad, timeout=10)
            self.assertEqual(status, 401, body)
            self.assertEqual(json.loads(body)["error"]["status"], "UNAUTHENTICATED")
            self.assertNotIn("usage-a", body.decode())

    # -- 6. prompt policy --

    def test_denylist_refuses_before_any_work_whatever_the_spelling(self):
        s = self.server
        before = s.metrics()
        refused = ["A FORBIDDEN   Thing", "forbidden&#32;thing", "&lt;forbidden thing&gt;",
                   "forbidden&amp;#32;thing", "a forbidden\u00a0thing, please",
                   "\tForbidden\nTHING  ",
                   # Look-alike text: fullwidth, zero-width, Cyrillic, math bold, accents, spelt
                   # out, digits for letters (prompt_folding.h).
                   "\uff46\uff4f\uff52\uff42\uff49\uff44\uff44\uff45\uff4e thing",
                   "forbid\u200bden th\u00ading", "f\u043erbidden thing",
                   "\U0001d41f\U0001d428\U0001d42b\U0001d41b\U0001d422\U0001d41d"
                   "\U0001d41d\U0001d41e\U0001d427 thing",
                   "fo\u0301rbidden thi\u0308ng", "f o r b i d d e n thing",
                   "f0rbidd3n th1ng"]
        for prompt in refused:
            code, details, _ = call(s, make_request(prompt), "key-policy")
            self.assertEqual(code, grpc.StatusCode.PERMISSION_DENIED, prompt)
            self.assertEqual(details, REFUSAL)
        code, details = rpc_code(lambda: list(s.stub().GenerateMeshStream(
            make_request("forbidden thing"), timeout=60, metadata=md("key-policy"))))
        self.assertEqual((code, details), (grpc.StatusCode.PERMISSION_DENIED, REFUSAL))
        code, details = rpc_code(lambda: s.stub().SubmitMeshJob(
            make_request("forbidden thing"), timeout=60, metadata=md("key-policy")))
        self.assertEqual((code, details), (grpc.StatusCode.PERMISSION_DENIED, REFUSAL))
        for path in (GENERATE, JOBS):
            answer = self.post({"prompt": "Forbidden Thing", "resolutionBase": RES},
                               "key-policy", path=path)
            self.assertEqual(http_error(answer), (403, "PERMISSION_DENIED", REFUSAL), path)
        n = len(refused) + 4
        after = s.metrics()
        for metric in ("cube3d_tokens_generated_total", "cube3d_admissions_total"):
            self.assertEqual(metric_value(after, metric), metric_value(before, metric), metric)

        def delta(name, **labels):
            return (metric_value(after, name, **labels) or 0) - \
                (metric_value(before, name, **labels) or 0)
        self.assertEqual(delta("cube3d_prompt_refusals_total", key="policy"), n)
        self.assertEqual(delta("cube3d_key_requests_total", key="policy",
                               code="PERMISSION_DENIED"), n)
        self.assertEqual(delta("cube3d_jobs_submitted_total", outcome="accepted"), 0)
        # Near misses pass: the rule's word boundaries hold.
        for prompt in ("forbidden things", "a forbiddenthing"):
            self.assert_ok(call(s, make_request(prompt), "key-policy"))
        self.assertEqual(self.usage("key-policy")["prompt_refusals"], n)

    def test_sighup_reloads_the_denylist_and_keeps_it_when_broken(self):
        s = self.server
        reloaded = "SIGHUP: prompt policy reloaded: "
        kept = "SIGHUP: kept the current prompt policy"
        try:
            self.sighup_policy("# the new rules\n\\bnew rule\\b\n^gun$\n", reloaded)
            self.assertIn(f"{reloaded}2 denylist patterns from {self.denylist_path}", s.log())
            self.assertEqual(call(s, make_request("A NEW rule"), "key-policy")[0],
                             grpc.StatusCode.PERMISSION_DENIED)
            self.assertEqual(call(s, make_request(" Gun "), "key-policy")[0],
                             grpc.StatusCode.PERMISSION_DENIED)
            self.assert_ok(call(s, make_request("a gun rack"), "key-policy"))
            self.assert_ok(call(s, make_request("a forbidden thing"), "key-policy"))
            # A broken file (a pattern RE2 rejects; one that matches every prompt) keeps the
            # rules in force.
            for broken in ("\\bnew rule\\b\n(unclosed\n", "forbidden thing\nx|\n"):
                self.sighup_policy(broken, kept)
                self.assertEqual(call(s, make_request("a new rule"), "key-policy")[0],
                                 grpc.StatusCode.PERMISSION_DENIED)
                self.assert_ok(call(s, make_request("a forbidden thing"), "key-policy"))
                self.assert_ok(call(s, make_request("anything else"), "key-policy"))
        finally:
            self.sighup_policy(DENYLIST, reloaded)
        self.assertEqual(call(s, make_request("a forbidden thing"), "key-policy")[0],
                         grpc.StatusCode.PERMISSION_DENIED)
        self.assert_ok(call(s, make_request("a new rule"), "key-policy"))


class PriorityTest(KeyedServerTestCase):
    """One decode slot, no waiting for company: the order in which queued work is taken shows
    in the order the answers come. batching.batch_max_wait_ms stays at its default (a minute),
    so no batch work ages here; at most 40 batch jobs wait."""

    HTTP = True
    KEYS = [("inter", "key-inter", {}), ("bulk", "key-bulk", {"priority": "batch"})]
    SERVER_ARGS = ["--set", "batching.batch_buckets=1", "--set", "batching.max_queue_delay_ms=0",
                   "--set", "batching.max_queue_size=64", "--set", "batching.max_queued_batch=40"]
    TMP_PREFIX = "cube3d-priority-e2e-"

    def test_interactive_work_goes_before_queued_batch_work(self):
        stub = self.server.stub()
        order, lock = [], threading.Lock()
        outcomes, threads = {}, []

        def record(tag):
            with lock:
                order.append(tag)

        def grpc_send(tag, secret, **fields):
            future = stub.GenerateMesh.future(
                make_request(f"priority {tag}", guidance_scale=0.0, **fields), timeout=300,
                metadata=md(secret))
            future.add_done_callback(lambda _, tag=tag: record(tag))
            outcomes[tag] = future

        def http_send(tag):
            def run():
                answer = e2e.http_call(self.server.http_port, "POST", GENERATE,
                                       {"prompt": f"priority {tag}", "resolutionBase": RES,
                                        "guidanceScale": 0, "priority": "PRIORITY_BATCH"},
                                       {**auth("key-inter"), "Accept": GLB}, timeout=300)
                record(tag)
                outcomes[tag] = answer
            thread = threading.Thread(target=run)
            thread.start()
            threads.append(thread)

        # 40 batch jobs: the interactive key's asked for (gRPC and HTTP), the batch key's
        # without asking. The keys take turns among them.
        for i in range(10):
            http_send(f"inter-http-{i}")
        for i in range(10):
            grpc_send(f"inter-grpc-{i}", "key-inter", priority=e2e.pb.PRIORITY_BATCH)
        for i in range(20):
            grpc_send(f"bulk-{i}", "key-bulk")

        def queued(samples):
            with lock:
                done = len(order)
            return (metric_value(samples, "cube3d_queue_depth") or 0) + done >= 38
        self.wait_for_metrics(queued, "the batch jobs queued")
        with lock:
            done_before = len(order)
        self.assertLessEqual(done_before, 10, f"the batch jobs were not queued: {order}")
        # The jobs past the queue as it comes (encoding text, decoding, or meshing: two or more
        # meshes at once, so they may end in any order with it).
        running = metric_value(self.server.metrics(), "cube3d_requests_running") or 0
        grpc_send("interactive", "key-inter")

        for thread in threads:
            thread.join(timeout=300)
        for tag, outcome in outcomes.items():
            if tag.startswith("inter-http"):
                self.assertEqual(outcome[0], 200, f"{tag}: {outcome[2][:300]}")
            else:
                code, response = rpc_code(lambda: outcome.result(timeout=300))
                self.assertEqual(code, grpc.StatusCode.OK, f"{tag}: {response}")
        self.wait_until(lambda: len(order) == 41, "every answer recorded")
        # Taken at the next free slot: after the jobs past the queue when it came (and at most
        # two more: one taken from the queue between the scrape and its arrival, one that had
        # ended in the server but not yet in `order` when done_before was counted), ahead of
        # every other queued one, gRPC's and HTTP's. (Completion order is not decoding order:
        # the batch job decoding when it came and the meshes before it were all ahead of it.)
        ahead = order.index("interactive") - done_before
        self.assertLessEqual(ahead, running + 2,
                             f"completion order: {order} ({done_before} done before, "
                             f"{running:g} past the queue)")
        # The batch key's jobs are batch work too: they take turns with the interactive key's
        # batch jobs instead of all going first.
        after = order[order.index("interactive") + 1:][:12]
        bulk = sum(t.startswith("bulk") for t in after)
        self.assertGreaterEqual(bulk, 3, f"completion order: {order}")
        self.assertGreaterEqual(len(after) - bulk, 3, f"completion order: {order}")

    def test_max_queued_batch_refuses_batch_work_and_keeps_room_for_interactive(self):
        def refused(samples):
            return metric_value(samples, "cube3d_requests_total", code="RESOURCE_EXHAUSTED") or 0
        refused_before = refused(self.server.metrics())
        stub = self.server.stub()
        futures = [stub.GenerateMesh.future(make_request(f"batch cap {i}", guidance_scale=0.0),
                                            timeout=300, metadata=md("key-bulk"))
                   for i in range(50)]
        interactive = stub.GenerateMesh.future(make_request("room for me", guidance_scale=0.0),
                                               timeout=300, metadata=md("key-inter"))
        # Over HTTP the batch queue's refusal is a 429 with Retry-After, as a full queue's is.
        # Sent together once a gRPC one was refused (the batch queue was full then, and the one
        # slot frees a place only every few hundred ms): most of them are refused.
        self.wait_for_metrics(lambda m: refused(m) > refused_before, "a batch job refused")
        answers = []

        def http_batch(i):
            answers.append(e2e.http_call(
                self.server.http_port, "POST", GENERATE,
                {"prompt": f"batch cap http {i}", "resolutionBase": RES, "guidanceScale": 0},
                {**auth("key-bulk"), "Accept": GLB}, timeout=300))
        senders = [threading.Thread(target=http_batch, args=(i,)) for i in range(10)]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join(timeout=300)
        refusals = [a for a in answers if a[0] == 429]
        self.assertTrue(refusals, [a[0] for a in answers])
        for status, headers, body in refusals:
            self.assertIn(b"batch queue full", body)
            self.assertEqual(headers.get("Retry-After"), "1")
        self.assertTrue(all(a[0] in (200, 429) for a in answers), [a[0] for a in answers])
        codes = {}
        for f in futures:
            code, details = rpc_code(lambda: f.result(timeout=300))
            codes[code.name] = codes.get(code.name, 0) + 1
            if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
                self.assertIn("batch queue full (40 batch jobs waiting, batching.max_queued_batch)",
                              details)
            else:
                self.assertEqual(code, grpc.StatusCode.OK, details)
        # 50 arrive within milliseconds, one slot takes one every few hundred: about 40 wait.
        self.assertGreaterEqual(codes.get("RESOURCE_EXHAUSTED", 0), 5, codes)
        # (The HTTP ones may have taken some of the 40 places before the last gRPC ones came.)
        http_ok = sum(a[0] == 200 for a in answers)
        self.assertGreaterEqual(codes.get("OK", 0) + http_ok, 40, (codes, http_ok))
        code, response = rpc_code(lambda: interactive.result(timeout=300))
        self.assertEqual(code, grpc.StatusCode.OK, response)

    def wait_until(self, predicate, what, timeout=30):
        deadline = time.monotonic() + timeout
        while not predicate():
            self.assertLess(time.monotonic(), deadline, f"never {what}")
            time.sleep(0.02)


class StaticPriorityTest(PriorityTest):
    """The same in static batching mode (whole batches, here of one job each)."""

    SERVER_ARGS = PriorityTest.SERVER_ARGS + ["--set", "batching.mode=static"]
    TMP_PREFIX = "cube3d-priority-static-e2e-"


class AgingTest(ServerTestCase):
    """One decode slot and batch work aging after 1.5 s; no API keys (one anonymous caller)."""

    HTTP = True
    SERVER_ARGS = ["--set", "batching.batch_buckets=1", "--set", "batching.max_queue_delay_ms=0",
                   "--set", "batching.batch_max_wait_ms=1500"]
    TMP_PREFIX = "cube3d-aging-e2e-"
    SUPPLY_S = 40

    def test_aged_batch_work_runs_beside_a_steady_interactive_supply(self):
        stub = self.server.stub()
        stop = threading.Event()
        supplied, errors, lock = [], [], threading.Lock()

        def supply(worker):
            n = 0
            while not stop.is_set():
                try:
                    stub.GenerateMesh(make_request(f"supply {worker}.{n}"), timeout=120)
                except grpc.RpcError as e:
                    with lock:
                        errors.append(f"{e.code().name}: {e.details()}")
                    return
                with lock:
                    supplied.append(time.monotonic())
                n += 1

        # Four interactive requests always outstanding: one decodes, the others wait (or are
        # meshed and answered, and come again).
        workers = [threading.Thread(target=supply, args=(w,)) for w in range(4)]
        started = time.monotonic()
        for w in workers:
            w.start()
        try:
            deadline = time.monotonic() + 60
            while len(supplied) < 3:
                self.assertLess(time.monotonic(), deadline, "the interactive supply never ran")
                self.assertEqual(errors, [])
                time.sleep(0.02)
            sent = time.monotonic()
            batch = stub.GenerateMesh.future(
                make_request("aged batch", guidance_scale=0.0, priority=e2e.pb.PRIORITY_BATCH),
                timeout=120)
            finished = []
            batch.add_done_callback(lambda _: finished.append(time.monotonic()))
            while not finished and time.monotonic() < started + self.SUPPLY_S:
                self.assertEqual(errors, [])
                time.sleep(0.02)
            supply_ended = time.monotonic()
        finally:
            stop.set()
            for w in workers:
                w.join(timeout=120)
        self.assertEqual(errors, [])
        code, response = rpc_code(lambda: batch.result(timeout=120))
        self.assertEqual(code, grpc.StatusCode.OK, response)
        self.assertTrue(finished and finished[0] <= supply_ended,
                        "the batch request starved behind the interactive supply")
        # It waited its batch_max_wait_ms (the interactive work went first), then was taken at
        # the next free slot ahead of the interactive work that came after it.
        self.assertGreaterEqual(response.timings.queue_ms, 1400, response.timings)
        self.assertLess(response.timings.queue_ms, 1500 + 10000, response.timings)
        served_meanwhile = sum(sent < t < finished[0] for t in supplied)
        self.assertGreaterEqual(served_meanwhile, 2, "the interactive supply did not run")

    def test_usage_without_api_keys_is_the_anonymous_callers(self):
        def usage():
            status, _, body = self.server.http("GET", USAGE, timeout=10)
            self.assertEqual(status, 200, body)
            return json.loads(body)
        before = usage()
        self.assertEqual(before["key"], "")
        response = self.server.stub().GenerateMesh(make_request("anonymous"), timeout=120)
        code, _ = rpc_code(lambda: self.server.stub().GenerateMesh(
            make_request("anonymous", top_p=5.0), timeout=120))
        self.assertEqual(code, grpc.StatusCode.INVALID_ARGUMENT)
        after = usage()
        requests_before = before["requests"]
        for name, n in (("OK", 1), ("INVALID_ARGUMENT", 1)):
            self.assertEqual(after["requests"].get(name, 0), requests_before.get(name, 0) + n,
                             after)
        self.assertEqual(after["shape_tokens"] - before["shape_tokens"], need(True))
        self.assertEqual(after["occupancy_points"] - before["occupancy_points"],
                         response.occupancy_points)
        self.assertEqual(after["mesh_bytes"] - before["mesh_bytes"], len(response.encoded))
        samples = self.server.metrics()
        self.assertEqual(metric_value(samples, "cube3d_key_shape_tokens_total", key=""),
                         after["shape_tokens"])


if __name__ == "__main__":
    unittest.main()
