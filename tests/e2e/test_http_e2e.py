"""cube3d-server's HTTP/JSON front door end to end: real server processes with http_listen on a
free loopback port, driven with Python's http.client (no proxies, exact control of the
connection). Run by ctest (tests/CMakeLists.txt, test e2e.http):

    CUBE3D_BIN_DIR=build/bin CUBE3D_SOURCE_DIR=. python3 -m unittest -v test_http_e2e

Uses server_process's helpers (server processes with the gateway, generated protos, metrics
parsing); the demo model (random weights, 64 shape tokens) on the CPU, resolution 4 unless a
test needs a long request. Every wait is bounded; the server's log is printed when a test fails.
"""
import http.client
import io
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import trimesh
from google.protobuf import json_format

import server_process as e2e
from server_process import (DEMO_CONFIG, HOST, JSON_HEADERS, RES, RPC_TIMEOUT_S, SERVER_BIN,
                            SOURCE, STARTUP_TIMEOUT_S, STOP_TIMEOUT_S, TOKENS, ServerProcess,
                            ServerTestCase, free_ports, metric_value, parse_metrics,
                            write_slow_model)

GENERATE = "/v1/meshes:generate"
STREAM = "/v1/meshes:generateStream"
CHAIR = {"prompt": "a wooden chair", "resolutionBase": RES}
SLOW_RES = 7  # a few seconds of meshing on a CPU: a request surely in flight


def setUpModule():
    e2e.setUpModule()  # the generated protos (e2e.pb)


def tearDownModule():
    e2e.tearDownModule()


# --- helpers -----------------------------------------------------------------------------------

def read_events(response):
    """Yields (event, data) from a text/event-stream response as each frame arrives."""
    event, data = None, []
    while True:
        line = response.readline()
        if not line:
            return
        line = line.decode().rstrip("\r\n")
        if line == "":
            if event is not None:
                yield event, "\n".join(data)
            event, data = None, []
        elif line.startswith(":"):
            continue  # a keep-alive comment
        elif line.startswith("event: "):
            event = line[len("event: "):]
        elif line.startswith("data: "):
            data.append(line[len("data: "):])
        else:
            raise AssertionError(f"not a Server-Sent Events line: {line!r}")


def open_stream(port, body, headers=None, timeout=RPC_TIMEOUT_S):
    """Starts a POST generateStream; returns (connection, response) with the body unread."""
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    conn.request("POST", STREAM, body=json.dumps(body), headers={**JSON_HEADERS,
                                                                  **(headers or {})})
    return conn, conn.getresponse()


def raw_post(port, path, body):
    """A POST on a raw socket, left open (to be closed in the middle of the request)."""
    payload = json.dumps(body).encode()
    sock = socket.create_connection((HOST, port), timeout=RPC_TIMEOUT_S)
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
    return sock


def server_timing(header):
    """Server-Timing -> {name: dur}."""
    timings = {}
    for item in header.split(","):
        m = re.fullmatch(r"\s*([a-z]+);dur=([0-9.]+)\s*", item)
        if not m:
            raise AssertionError(f"bad Server-Timing item {item!r} in {header!r}")
        timings[m.group(1)] = float(m.group(2))
    return timings


class HttpTestCase(ServerTestCase):
    """One server with the gateway for the class (SERVER_ARGS), stopped with SIGTERM, exit code 0
    expected."""

    HTTP = True
    TMP_PREFIX = "cube3d-http-e2e-"

    def assert_error(self, answer, http_status, grpc_status):
        """Checks an error answer's status and body; returns its message."""
        status, headers, body = answer
        self.assertEqual(status, http_status, body)
        self.assertEqual(headers["Content-Type"], "application/json")
        error = json.loads(body)["error"]
        self.assertEqual(list(error), ["code", "status", "message"])
        self.assertEqual(error["code"], http_status)
        self.assertEqual(error["status"], grpc_status)
        self.assertTrue(error["message"])
        return error["message"]

    def assert_ok_json(self, answer):
        status, headers, body = answer
        self.assertEqual(status, 200, body)
        self.assertEqual(headers["Content-Type"], "application/json")
        return json_format.Parse(body, e2e.pb.GenerateMeshResponse())

    def scrape_metrics(self):
        """wait_for_metrics polls the gateway's /metrics."""
        return self.server.http_metrics()


# --- the demo server with the gateway ----------------------------------------------------------

class HttpGatewayTest(HttpTestCase):
    SERVER_ARGS = ["--max-queue-delay-ms", "20", "--set", "limits.max_message_bytes=1048576"]

    def test_glb_file_with_accept(self):
        status, headers, body = self.server.http("POST", GENERATE, CHAIR,
                                                 {"Accept": "model/gltf-binary"})
        self.assertEqual(status, 200, body)
        self.assertEqual(headers["Content-Type"], "model/gltf-binary")
        self.assertEqual(body[:4], b"glTF")
        request_id = headers["X-Request-Id"]
        self.assertRegex(request_id, r"^[0-9a-f]{32}$")
        self.assertIn(f'filename="{request_id}.glb"', headers["Content-Disposition"])
        timings = server_timing(headers["Server-Timing"])
        self.assertEqual(list(timings), ["queue", "text", "prefill", "decode", "mesh", "total"])
        self.assertGreater(timings["decode"], 0)
        self.assertGreaterEqual(timings["total"], timings["decode"])
        mesh = trimesh.load(io.BytesIO(body), file_type="glb", force="mesh", process=False)
        self.assertEqual(len(mesh.faces), int(headers["X-Face-Count"]))
        self.assertEqual(len(mesh.vertices), int(headers["X-Vertex-Count"]))
        self.assertGreater(len(mesh.faces), 0)
        self.assertIn(f"request {request_id} OK (http)", self.server.log())

    def test_json_answer_round_trips_through_protobuf(self):
        response = self.assert_ok_json(self.server.http("POST", GENERATE, CHAIR))
        self.assertEqual(response.format, e2e.pb.MESH_FORMAT_GLB)  # the server's default
        self.assertEqual(response.encoded[:4], b"glTF")
        self.assertGreater(response.face_count, 0)
        self.assertGreater(response.timings.total_ms, 0)
        # Proto field names work too; RAW comes back as arrays.
        answer = self.server.http("POST", GENERATE, {
            "prompt": "a small table", "resolution_base": RES, "format": "MESH_FORMAT_RAW",
            "return_shape_tokens": True, "request_id": "http-raw-1"})
        self.assertEqual(answer[1]["X-Request-Id"], "http-raw-1")
        raw = self.assert_ok_json(answer)
        self.assertEqual(raw.request_id, "http-raw-1")
        self.assertEqual(len(raw.raw.vertices), 3 * raw.vertex_count)
        self.assertEqual(len(raw.raw.indices), 3 * raw.face_count)
        self.assertEqual(len(raw.shape_tokens), TOKENS)

    def test_other_formats_by_accept_and_the_bodys_format_wins(self):
        status, headers, body = self.server.http("POST", GENERATE, CHAIR, {"Accept": "model/obj"})
        self.assertEqual(status, 200, body)
        self.assertEqual(headers["Content-Type"], "model/obj")
        self.assertIn(b"\nf ", body)
        ply = {**CHAIR, "format": "MESH_FORMAT_PLY"}
        status, headers, body = self.server.http(
            "POST", GENERATE, ply, {"Accept": "model/gltf-binary, application/x-ply"})
        self.assertEqual(status, 200, body)
        self.assertEqual(headers["Content-Type"], "application/x-ply")
        self.assertEqual(body[:3], b"ply")
        message = self.assert_error(
            self.server.http("POST", GENERATE, ply, {"Accept": "model/gltf-binary"}), 406,
            "INVALID_ARGUMENT")
        self.assertIn("MESH_FORMAT_PLY", message)

    def test_png_picture_of_the_mesh_with_accept(self):
        from PIL import Image
        background = (236, 239, 243)  # kPreviewBackground (mesh_preview.h)
        status, headers, body = self.server.http("POST", GENERATE + "?size=200", CHAIR,
                                                 {"Accept": "image/png"})
        self.assertEqual(status, 200, body)
        self.assertEqual(headers["Content-Type"], "image/png")
        request_id = headers["X-Request-Id"]
        self.assertIn(f'filename="{request_id}.png"', headers["Content-Disposition"])
        self.assertIn("preview", server_timing(headers["Server-Timing"]))
        self.assertGreater(int(headers["X-Face-Count"]), 0)
        with Image.open(io.BytesIO(body)) as image:
            self.assertEqual(image.format, "PNG")
            self.assertEqual(image.size, (200, 200))
            self.assertEqual(image.info.get("Description"), CHAIR["prompt"])
            rgb = image.convert("RGB").tobytes()
        pixels = [tuple(rgb[i:i + 3]) for i in range(0, len(rgb), 3)]
        self.assertEqual(pixels[0], background)
        self.assertGreater(sum(1 for p in pixels if p != background), len(pixels) // 20,
                           "the mesh barely shows")
        # The default size; a body's file format set aside, with a warning; the Roblox profile's
        # limits apply to the mesh drawn.
        roblox = {**CHAIR, "format": "MESH_FORMAT_GLB", "meshProfile": "MESH_PROFILE_ROBLOX",
                  "targetFaceCount": 50000}
        status, headers, body = self.server.http("POST", GENERATE, roblox,
                                                 {"Accept": "image/png"})
        self.assertEqual(status, 200, body)
        with Image.open(io.BytesIO(body)) as image:
            self.assertEqual(image.size, (512, 512))
        warnings = headers.get_all("X-Warning")
        self.assertTrue(any("MESH_FORMAT_GLB ignored" in w for w in warnings), warnings)
        self.assertTrue(any("clamped to 20000" in w for w in warnings), warnings)
        self.assertLessEqual(int(headers["X-Face-Count"]), 20000)

    def test_a_bad_png_size_is_400_naming_size(self):
        for size in ("8", "4096", "large"):
            message = self.assert_error(
                self.server.http("POST", f"{GENERATE}?size={size}", CHAIR,
                                 {"Accept": "image/png"}), 400, "INVALID_ARGUMENT")
            self.assertIn("size", message)
            self.assertIn("16..2048", message)

    def test_stream_sends_progress_then_the_result(self):
        conn, response = open_stream(self.server.http_port,
                                     {**CHAIR, "returnShapeTokens": True})
        try:
            self.assertEqual(response.status, 200)
            self.assertEqual(response.headers["Content-Type"], "text/event-stream")
            events = list(read_events(response))
        finally:
            conn.close()
        kinds = [kind for kind, _ in events]
        self.assertEqual(kinds[-1], "result", kinds)
        self.assertEqual(kinds.count("result"), 1)
        self.assertGreaterEqual(kinds.count("progress"), 3, kinds)
        progress = [json_format.Parse(data, e2e.pb.Progress())
                    for kind, data in events if kind == "progress"]
        stages = [p.stage for p in progress]
        self.assertEqual(stages[0], e2e.pb.STAGE_QUEUED)
        self.assertEqual(stages, sorted(stages), f"stages go backwards: {stages}")
        for stage in (e2e.pb.STAGE_DECODING, e2e.pb.STAGE_MESHING, e2e.pb.STAGE_DONE):
            self.assertIn(stage, stages)
        self.assertEqual(max(p.tokens_done for p in progress), TOKENS)
        result = json_format.Parse(events[-1][1], e2e.pb.GenerateMeshResponse())
        self.assertEqual(result.encoded[:4], b"glTF")
        self.assertEqual(len(result.shape_tokens), TOKENS)

    def test_errors_map_to_their_status_and_body(self):
        message = self.assert_error(self.server.http("POST", GENERATE, {**CHAIR, "topP": 2}),
                                    400, "INVALID_ARGUMENT")
        self.assertIn("top_p", message)
        self.assert_error(self.server.http("POST", GENERATE, '{"prompt": "a chair",',
                                           JSON_HEADERS), 400, "INVALID_ARGUMENT")
        message = self.assert_error(self.server.http("POST", GENERATE,
                                                     {**CHAIR, "resolutionBsae": 5}),
                                    400, "INVALID_ARGUMENT")
        self.assertIn("resolutionBsae", message)
        self.assert_error(self.server.http("GET", "/v1/nothing"), 404, "NOT_FOUND")
        answer = self.server.http("GET", GENERATE)
        self.assert_error(answer, 405, "UNIMPLEMENTED")
        self.assertEqual(answer[1]["Allow"], "POST")
        big = {"prompt": "x" * (1 << 20)}  # over the 1 MiB limits.max_message_bytes
        message = self.assert_error(self.server.http("POST", GENERATE, big), 413,
                                    "RESOURCE_EXHAUSTED")
        self.assertIn("1048576", message)
        self.assert_error(self.server.http("POST", GENERATE, CHAIR,
                                           {"X-Request-Timeout-Ms": "-3"}),
                          400, "INVALID_ARGUMENT")
        # A deadline far too short for the work: 504, by header or by query parameter.
        self.assert_error(self.server.http("POST", GENERATE, CHAIR, {"X-Request-Timeout-Ms": "5"}),
                          504, "DEADLINE_EXCEEDED")
        self.assert_error(self.server.http("POST", GENERATE + "?timeout_ms=5", CHAIR),
                          504, "DEADLINE_EXCEEDED")
        # The server is fine afterwards.
        self.assert_ok_json(self.server.http("POST", GENERATE, CHAIR))

    def test_client_disconnect_cancels_the_work(self):
        def cancelled(samples):
            return metric_value(samples, "cube3d_requests_total", code="CANCELLED") or 0

        before = cancelled(self.server.http_metrics())
        slow = {"prompt": "a slow cathedral", "resolutionBase": SLOW_RES}
        # A stream, closed once its request is certainly running (decoding or meshing).
        sock = raw_post(self.server.http_port, STREAM, slow)
        seen = b""
        while b"STAGE_DECODING" not in seen and b"STAGE_MESHING" not in seen:
            chunk = sock.recv(4096)
            self.assertTrue(chunk, f"the stream ended early: {seen!r}")
            seen += chunk
        self.assertTrue(seen.startswith(b"HTTP/1.1 200"), seen)
        sock.close()
        # A unary call, closed while it waits.
        sock = raw_post(self.server.http_port, GENERATE, {**slow, "prompt": "a slow tower"})
        time.sleep(1.0)
        sock.close()

        self.wait_for_metrics(lambda s: cancelled(s) >= before + 2,
                              "cube3d_requests_total{code=\"CANCELLED\"} up by 2")
        self.wait_for_metrics(lambda s: metric_value(s, "cube3d_queue_depth") == 0 and
                              metric_value(s, "cube3d_active_slots") == 0, "an idle scheduler")
        self.assertEqual(self.server.log().count("CANCELLED (http)"), 2, self.server.log_tail())
        start = time.monotonic()
        self.assert_ok_json(self.server.http("POST", GENERATE, CHAIR, timeout=60))
        self.assertLess(time.monotonic() - start, 30, "the server was slow after the cancels")

    def test_probes_and_metrics(self):
        status, _, body = self.server.http("GET", "/healthz")
        self.assertEqual((status, body), (200, b"ok\n"))
        status, _, _ = self.server.http("HEAD", "/healthz")
        self.assertEqual(status, 200)
        status, _, body = self.server.http("GET", "/readyz")
        self.assertEqual((status, body), (200, b"ready\n"))
        self.assert_ok_json(self.server.http("POST", GENERATE, CHAIR))
        status, headers, body = self.server.http("GET", "/metrics")
        self.assertEqual(status, 200)
        self.assertTrue(headers["Content-Type"].startswith("text/plain"))
        self.assertIn("cube3d_build_info", {n for n, _, _ in parse_metrics(body.decode())})
        # Counted once the answer's last byte went out, a moment after the client may have read
        # it (as in the burst test below).
        samples = self.wait_for_metrics(
            lambda s: (metric_value(s, "cube3d_requests_total", code="OK") or 0) >= 1,
            "cube3d_requests_total{code=\"OK\"} >= 1")
        # The same registry as the metrics port, less the per-key series (which name the keys
        # and each key's traffic: the metrics listener's alone).
        names = {n for n, _, _ in samples if n.startswith("cube3d_")}
        full = [(n, labels) for n, labels, _ in self.server.metrics() if n.startswith("cube3d_")]
        per_key = {n for n, labels in full if "key" in labels}
        self.assertEqual(names, {n for n, _ in full} - per_key)
        self.assertFalse(any("key" in labels for _, labels, _ in samples))


class HttpQueueLimitTest(HttpTestCase):
    # One decode slot and a queue of one: a burst overflows (as QueueOverflowTest over gRPC).
    SERVER_ARGS = ["--batch-buckets", "1", "--set", "batching.max_queue_size=1"]

    def test_burst_overflows_with_429_and_retry_after(self):
        exhausted = 0
        for attempt in range(3):
            answers = [None] * 8

            def send(i):
                answers[i] = self.server.http("POST", GENERATE,
                                              {**CHAIR, "prompt": f"burst {attempt}.{i}"})

            threads = [threading.Thread(target=send, args=(i,)) for i in range(len(answers))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(RPC_TIMEOUT_S + 30)
            ok = [a for a in answers if a and a[0] == 200]
            refused = [a for a in answers if a and a[0] == 429]
            self.assertEqual(len(ok) + len(refused), len(answers),
                             [a[:2] for a in answers if a])
            self.assertGreaterEqual(len(ok), 1)
            for answer in refused:
                self.assertIn("queue full",
                              self.assert_error(answer, 429, "RESOURCE_EXHAUSTED"))
                self.assertEqual(answer[1]["Retry-After"], "1")
            exhausted += len(refused)
            if refused:
                break
        self.assertGreater(exhausted, 0, "8 concurrent requests never overflowed a queue of 1")
        # An HTTP call is counted once its answer's last byte went out, which the client can see
        # a moment before the server's I/O thread has noted it: wait for the count.
        self.wait_for_metrics(
            lambda s: (metric_value(s, "cube3d_requests_total", code="RESOURCE_EXHAUSTED") or 0)
            >= exhausted, f"cube3d_requests_total{{code=\"RESOURCE_EXHAUSTED\"}} >= {exhausted}")


# --- the browser playground's files and GET /v1/model -----------------------------------------

class HttpPlaygroundTest(HttpTestCase):
    # models/demo-server.yaml turns http.playground on; the files come from the default folder,
    # share/cube3d/playground beside bin/ (the build tree's copy, as an installed server's).
    def test_the_page_its_assets_and_three_js_are_served_with_the_sites_headers(self):
        status, headers, body = self.server.http("GET", "/?prompt=a%20chair&seed=3")
        self.assertEqual(status, 200, body)
        self.assertEqual(headers["Content-Type"], "text/html; charset=utf-8")
        with open(os.path.join(SOURCE, "share", "cube3d", "playground", "index.html"), "rb") as f:
            self.assertEqual(body, f.read())
        csp = headers["Content-Security-Policy"]
        self.assertIn("script-src 'self'", csp)
        self.assertNotIn("unsafe", csp)
        self.assertEqual(headers["X-Content-Type-Options"], "nosniff")
        self.assertEqual(headers["X-Frame-Options"], "DENY")
        # Every script and style the page names is served, from this origin only.
        assets = re.findall(rb'(?:src|href)="([^"]+)"', body)
        self.assertTrue(assets)
        for asset in assets:
            self.assertTrue(asset.startswith(b"/"), asset)
            status, asset_headers, _ = self.server.http("GET", asset.decode())
            self.assertEqual(status, 200, asset)
        for name in ("three.min.js", "GLTFLoader.js", "OBJLoader.js", "PLYLoader.js",
                     "OrbitControls.js"):
            status, js_headers, js = self.server.http("GET", f"/vendor/three/{name}")
            self.assertEqual(status, 200, name)
            self.assertEqual(js_headers["Content-Type"], "text/javascript; charset=utf-8")
            self.assertGreater(len(js), 1000, name)
        # Revalidation: the ETag answers 304 without a body; HEAD has the headers only.
        status, again, body304 = self.server.http("GET", "/",
                                                  headers={"If-None-Match": headers["ETag"]})
        self.assertEqual((status, body304), (304, b""))
        self.assertEqual(again["ETag"], headers["ETag"])
        status, head, body_of_head = self.server.http("HEAD", "/playground/app.js")
        self.assertEqual((status, body_of_head), (200, b""))
        self.assertGreater(int(head["Content-Length"]), 1000)
        # Only the files of the site: no path from the request reaches the disk.
        for path in ("/playground/../../models/demo-server.yaml", "/playground/",
                     "/playground/%2e%2e/index.html", "/vendor/three/Detector.js",
                     "/index.html"):
            status, _, _ = self.server.http("GET", path)
            self.assertEqual(status, 404, path)
        status, _, body = self.server.http("POST", "/", {"prompt": "x"})
        self.assertEqual(status, 405, body)

    def test_model_says_what_is_served_and_its_limits(self):
        status, headers, body = self.server.http("GET", "/v1/model")
        self.assertEqual(status, 200, body)
        self.assertEqual(headers["Content-Type"], "application/json")
        model = json.loads(body)
        self.assertEqual(model["model"], "demo")
        self.assertEqual(model["tokensPerShape"], e2e.TOKENS)
        self.assertIs(model["boundingBox"], False)
        self.assertRegex(model["weightsDigest"], "^[0-9a-f]{64}$")
        self.assertEqual(model["defaults"]["format"], "MESH_FORMAT_GLB")
        self.assertEqual(model["defaults"]["meshProfile"], "MESH_PROFILE_NONE")
        self.assertNotIn("topP", model["defaults"])  # greedy
        self.assertLessEqual(model["limits"]["minResolutionBase"],
                             model["defaults"]["resolutionBase"])
        self.assertLessEqual(model["defaults"]["resolutionBase"],
                             model["limits"]["maxResolutionBase"])
        # What it says is what the server does: a mesh's provenance names the same.
        answer = self.assert_ok_json(self.server.http("POST", GENERATE, CHAIR))
        self.assertEqual(answer.effective.weights_digest, model["weightsDigest"])
        self.assertEqual(answer.effective.server_version, model["serverVersion"])


class HttpPlaygroundOffTest(HttpTestCase):
    SERVER_ARGS = ["--set", "http.playground=false"]

    def test_without_the_playground_the_root_is_an_unknown_path(self):
        for path in ("/", "/playground/app.js", "/vendor/three/three.min.js"):
            status, _, body = self.server.http("GET", path)
            self.assertEqual(status, 404, path)
            self.assertEqual(json.loads(body)["error"]["status"], "NOT_FOUND")
        # The API is all there, /v1/model included.
        self.assertEqual(self.server.http("GET", "/v1/model")[0], 200)


# --- start-up and shutdown ---------------------------------------------------------------------

class HttpLifecycleTest(unittest.TestCase):
    def test_readyz_while_loading_then_ready_then_draining(self):
        with tempfile.TemporaryDirectory(prefix="cube3d-http-e2e-") as tmp:
            # A wider random-weight model than the demo (as test_server_e2e's
            # test_health_not_serving_while_loading), so that loading takes a while to see;
            # the gateway listens before the model loads.
            model_path = write_slow_model(tmp)
            server = ServerProcess(["--batch-buckets", "1", "--set", f"model.config={model_path}"],
                                   tmp, http=True)
            # Launched, not started: the test watches /readyz from the first moment.
            server.launch()
            try:
                self._loading_then_ready(server)
                self._draining(server)
            except BaseException:
                sys.stderr.write(f"\n----- cube3d-server log -----\n{server.log_tail()}\n")
                raise
            finally:
                server.kill()

    def _loading_then_ready(self, server):
        seen = []
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline and server.proc.poll() is None:
            try:
                status, _, body = server.http("GET", "/readyz", timeout=2)
                state = (status, json.loads(body)["error"]["message"].split(":")[0]
                         if status == 503 else "ready")
                if status == 503:
                    self.assertEqual(server.http("GET", "/healthz", timeout=2)[0], 200)
            except OSError:
                state = "no connection"
            if not seen or seen[-1] != state:
                seen.append(state)
            if state == (200, "ready"):
                break
            time.sleep(0.02)
        self.assertEqual(seen[-1:], [(200, "ready")], seen)
        self.assertIn((503, "loading"), seen, f"/readyz states seen: {seen}")

    def _draining(self, server):
        # The wide model's shape decoder: a second or more of meshing on a CPU at resolution 5,
        # ample time for the checks below while the request is in flight.
        conn, response = open_stream(server.http_port, {"prompt": "a slow cathedral",
                                                        "resolutionBase": 5}, timeout=300)
        try:
            self.assertEqual(response.status, 200)
            events = read_events(response)
            for kind, data in events:
                self.assertEqual(kind, "progress", data)
                if json_format.Parse(data, e2e.pb.Progress()).stage == e2e.pb.STAGE_MESHING:
                    break
            server.terminate()
            # /readyz turns 503 while the in-flight request finishes; /healthz stays 200 and
            # new work is refused with 503.
            ready = None
            for _ in range(200):
                ready = server.http("GET", "/readyz", timeout=2)
                if ready[0] != 200:
                    break
                time.sleep(0.02)
            self.assertEqual(ready[0], 503, ready)
            self.assertIn("draining", json.loads(ready[2])["error"]["message"])
            self.assertEqual(server.http("GET", "/healthz", timeout=2)[0], 200)
            status, _, body = server.http("POST", GENERATE, CHAIR, timeout=30)
            self.assertEqual(status, 503, body)
            self.assertEqual(json.loads(body)["error"]["status"], "UNAVAILABLE")
            rest = list(events)
            self.assertEqual(rest[-1][0], "result", rest[-1:])
        finally:
            conn.close()
        self.assertEqual(server.wait_exit(timeout=STOP_TIMEOUT_S), 0, server.log_tail())
        self.assertIn("stopped (all work finished)", server.log())

    def test_a_busy_http_port_refuses_to_start(self):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
            taken.bind((HOST, 0))
            taken.listen(1)
            port = taken.getsockname()[1]
            grpc_port, metrics_port = free_ports(2)
            proc = subprocess.run(
                [SERVER_BIN, "--config", DEMO_CONFIG, "--listen", f"{HOST}:{grpc_port}",
                 "--metrics-listen", f"{HOST}:{metrics_port}",
                 "--set", f"http_listen={HOST}:{port}"],
                capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                cwd=SOURCE)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn(f"http_listen {HOST}:{port}: cannot listen", proc.stderr)

    def test_a_playground_without_three_js_refuses_to_start_naming_the_key(self):
        with tempfile.TemporaryDirectory(prefix="cube3d-http-e2e-") as tmp:
            grpc_port, metrics_port, http_port = free_ports(3)
            proc = subprocess.run(
                [SERVER_BIN, "--config", DEMO_CONFIG, "--listen", f"{HOST}:{grpc_port}",
                 "--metrics-listen", f"{HOST}:{metrics_port}",
                 "--http-listen", f"{HOST}:{http_port}", "--set", f"http.three_js_dir={tmp}"],
                capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                cwd=SOURCE)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn(f"{tmp}/build/three.min.js: no such file (http.three_js_dir", proc.stderr)


class MeshBudgetHttpTest(HttpTestCase):
    """The mesh stage's budget end to end: a surface over mesh.max_marching_cubes_faces is
    extracted coarser, and both doors' answers carry the warning that names the limit; the
    metrics count it, and every mesh's wait for a mesh thread is observed."""

    BUDGET = 60  # the demo model's random blobs have hundreds of faces at resolution 4
    SERVER_ARGS = ["--set", f"mesh.max_marching_cubes_faces={BUDGET}"]

    def budget_warnings(self, warnings):
        return [w for w in warnings if f"max_marching_cubes_faces {self.BUDGET}" in w]

    def test_both_doors_carry_the_budget_warning(self):
        grpc_answer = self.generate(e2e.make_request("a wooden chair, over budget"))
        self.assertGreater(grpc_answer.face_count, 0)
        self.assertEqual(len(self.budget_warnings(grpc_answer.warnings)), 1,
                         list(grpc_answer.warnings))
        answer = self.assert_ok_json(self.server.http(
            "POST", GENERATE,
            {**CHAIR, "prompt": "a stool, over budget", "format": "MESH_FORMAT_RAW"}))
        self.assertGreater(answer.face_count, 0)
        warning = self.budget_warnings(answer.warnings)
        self.assertEqual(len(warning), 1, list(answer.warnings))
        self.assertRegex(warning[0], r"more than 60 marching-cubes faces")
        # The mesh file's route says it in X-Warning.
        status, headers, body = self.server.http(
            "POST", GENERATE, {**CHAIR, "prompt": "a bench, over budget"},
            {"Accept": "model/gltf-binary"})
        self.assertEqual(status, 200, body)
        self.assertEqual(len(self.budget_warnings(headers.get_all("X-Warning") or [])), 1,
                         headers.get_all("X-Warning"))
        self.wait_for_metrics(
            lambda s: (metric_value(s, "cube3d_mesh_budget_exceeded_total") or 0) >= 3
            and (metric_value(s, "cube3d_mesh_wait_seconds_count") or 0) >= 3,
            "three meshes over budget, each mesh's wait observed")


if __name__ == "__main__":
    unittest.main()
