"""cube3d-server end to end: real server processes on loopback ports, driven over gRPC from
Python (stubs generated at test time with grpc_tools.protoc), over HTTP (metrics) and through
the C++ client. Run by ctest (tests/CMakeLists.txt, test e2e.server):

    CUBE3D_BIN_DIR=build/bin CUBE3D_SOURCE_DIR=. python3 -m unittest -v test_server_e2e

Each test class starts its own cube3d-server with the demo config (models/demo-server.yaml:
random-weight toy model on the CPU, 64 shape tokens per mesh) and stops it with SIGTERM,
expecting exit code 0. Requests ask for resolution_base 4 unless a test needs slow meshing.
Every wait is bounded in time; the server's log is printed when a test fails.
"""
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error

import grpc
import numpy as np
import trimesh
from scipy.spatial import cKDTree  # scipy comes with scikit-image (scripts/setup.sh)

import server_process as e2e
from server_process import (BIN_DIR, CHANNEL_OPTIONS, CLIENT_BIN, DEMO_CONFIG, HOST, RES,
                            RPC_TIMEOUT_S, SERVER_BIN, SOURCE, STARTUP_TIMEOUT_S, STOP_TIMEOUT_S,
                            TOKENS, VOCAB, ServerProcess, ServerTestCase, TlsServerProcess,
                            free_ports, make_request, metric_value, rpc_code, write_slow_model)

# The generated modules under the names the tests use; server_process.setUpModule makes them.
pb = pb_grpc = health_pb = health_grpc = refl_pb = None


def setUpModule():
    global pb, pb_grpc, health_pb, health_grpc, refl_pb
    e2e.setUpModule()
    pb, pb_grpc = e2e.pb, e2e.pb_grpc
    health_pb, health_grpc, refl_pb = e2e.health_pb, e2e.health_grpc, e2e.refl_pb


tearDownModule = e2e.tearDownModule


# --- the demo server, dynamic batching (max_queue_delay_ms 50), max_prompt_bytes 64 -----------

class MainServerTest(ServerTestCase):
    MAX_PROMPT_BYTES = 64
    SERVER_ARGS = ["--max-queue-delay-ms", "50",
                   "--set", f"limits.max_prompt_bytes={MAX_PROMPT_BYTES}"]

    # 1. health and start-up
    def test_health_serving_after_warm_up(self):
        self.assertEqual(self.server.health(), "SERVING")
        log = self.server.log()
        self.assertIn("warm-up of buckets [1, 2, 4, 8]", log)
        self.assertIn("serving", log)
        # The warm-up line comes before the serving line.
        self.assertLess(log.index("warm-up of buckets"), log.index("cube3d-server serving"))

    # 2. concurrency and batching
    def test_concurrent_requests_are_batched(self):
        # Half sampled, half greedy: one batch may mix both.
        requests = [make_request(f"object number {i}", seed=i, top_p=0.9) if i % 2
                    else make_request(f"object number {i}") for i in range(32)]
        outcomes = self.generate_all(requests)
        codes = [c for c, _ in outcomes]
        self.assertEqual(codes, [grpc.StatusCode.OK] * 32,
                         [d for c, d in outcomes if c != grpc.StatusCode.OK][:3])
        responses = [r for _, r in outcomes]
        for r in responses:
            self.assert_mesh(r)
            self.assertIn(r.batch_bucket, (1, 2, 4, 8))
        buckets = [r.batch_bucket for r in responses]
        self.assertGreater(max(buckets), 1, f"no request was batched: buckets {buckets}")
        self.assertEqual(len({r.request_id for r in responses}), 32, "request ids not unique")

    # 3. determinism whatever the batching
    def _check_batch_invariance(self, target, others_for):
        alone = self.generate(target)
        self.assertEqual(alone.batch_bucket, 1)
        self.assert_mesh(alone)
        self.assertEqual(len(alone.shape_tokens), TOKENS)
        buckets_seen = []
        for attempt in range(3):
            batch = others_for(attempt)
            batch.insert(3, target)  # not the first row of the batch
            outcomes = self.generate_all(batch)
            for code, detail in outcomes:
                self.assertEqual(code, grpc.StatusCode.OK, detail)
            batched = outcomes[3][1]
            buckets_seen.append(batched.batch_bucket)
            self.assertEqual(list(batched.shape_tokens), list(alone.shape_tokens),
                             f"shape tokens differ in bucket {batched.batch_bucket}")
            self.assertEqual(e2e.mesh_without_request_id(batched.encoded),
                             e2e.mesh_without_request_id(alone.encoded),
                             f"GLB bytes differ in bucket {batched.batch_bucket}")
            self.assertEqual((batched.vertex_count, batched.face_count),
                             (alone.vertex_count, alone.face_count))
            if batched.batch_bucket == 8:
                return
        self.fail(f"the 8 concurrent requests never ran as one bucket-8 batch: {buckets_seen}")

    def test_same_prompt_and_seed_identical_whatever_the_batch_top_p(self):
        target = make_request("a red sports car", top_p=0.9, seed=1234, return_shape_tokens=True)
        self._check_batch_invariance(target, lambda attempt: [
            make_request(f"filler {attempt}.{i}: a lamp with {i} legs", top_p=0.8 + 0.02 * i,
                         seed=100 * attempt + i, return_shape_tokens=True,
                         guidance_scale=1.0 + i)
            for i in range(7)])

    def test_same_prompt_identical_whatever_the_batch_greedy(self):
        target = make_request("a tall bookshelf", return_shape_tokens=True)
        self._check_batch_invariance(target, lambda attempt: [
            make_request(f"greedy filler {attempt}.{i}", seed=i, return_shape_tokens=True,
                         **({"top_p": 0.7} if i % 2 else {}))
            for i in range(7)])

    def test_seed_changes_the_sample(self):
        a = self.generate(make_request("a vase", top_p=0.9, seed=1, return_shape_tokens=True))
        b = self.generate(make_request("a vase", top_p=0.9, seed=2, return_shape_tokens=True))
        self.assertNotEqual(list(a.shape_tokens), list(b.shape_tokens))
        for t in list(a.shape_tokens) + list(b.shape_tokens):
            self.assertTrue(0 <= t < VOCAB, t)

    def test_every_format(self):
        raw = self.generate(make_request("a teapot", format=pb.MESH_FORMAT_RAW))
        self.assert_mesh(raw, pb.MESH_FORMAT_RAW)
        self.assertEqual(raw.encoded, b"")
        indices = np.array(raw.raw.indices)
        self.assertLess(int(indices.max()), raw.vertex_count)
        vertices = np.array(raw.raw.vertices, dtype=np.float64).reshape(-1, 3)
        self.assertTrue(np.isfinite(vertices).all())
        for fmt, ext in ((pb.MESH_FORMAT_GLB, "glb"), (pb.MESH_FORMAT_OBJ, "obj"),
                         (pb.MESH_FORMAT_PLY, "ply")):
            with self.subTest(format=ext):
                r = self.generate(make_request("a teapot", format=fmt))
                self.assert_mesh(r, fmt)
                # Same request, same mesh: the counts match the RAW answer.
                self.assertEqual((r.vertex_count, r.face_count),
                                 (raw.vertex_count, raw.face_count))
                path = os.path.join(self._tmp.name, f"teapot.{ext}")
                with open(path, "wb") as f:
                    f.write(r.encoded)
                mesh = trimesh.load(path, force="mesh", process=False)
                self.assertEqual(len(mesh.faces), r.face_count)
                self.assertEqual(len(mesh.vertices), r.vertex_count)
        # Without a format the server's default (GLB) applies.
        default = self.generate(pb.GenerateMeshRequest(prompt="a teapot", resolution_base=RES))
        self.assertEqual(default.format, pb.MESH_FORMAT_GLB)
        self.assertEqual(default.encoded[:4], b"glTF")

    # 4. invalid input
    def test_invalid_arguments_name_the_field(self):
        long_prompt = "x" * (self.MAX_PROMPT_BYTES + 1)
        cases = [
            ("empty prompt", pb.GenerateMeshRequest(prompt="", resolution_base=RES), "prompt"),
            ("prompt over the limit", make_request(long_prompt), "prompt"),
            ("NaN guidance", make_request(guidance_scale=float("nan")), "guidance_scale"),
            ("negative guidance", make_request(guidance_scale=-1.0), "guidance_scale"),
            ("infinite guidance", make_request(guidance_scale=float("inf")), "guidance_scale"),
            ("top_p 0", make_request(top_p=0.0), "top_p"),
            ("top_p 1.5", make_request(top_p=1.5), "top_p"),
            ("top_p NaN", make_request(top_p=float("nan")), "top_p"),
            ("unknown format 7", make_request(format=7), "format"),
            ("resolution_base 3", make_request(resolution_base=3), "resolution_base"),
            ("resolution_base 12", make_request(resolution_base=12), "resolution_base"),
            ("resolution_base -1", make_request(resolution_base=-1), "resolution_base"),
            ("bounding_box on a v0.1 model",
             make_request(bounding_box=pb.BoundingBox(x=1, y=2, z=3)), "bounding_box"),
            ("target_face_count 1", make_request(target_face_count=1), "target_face_count"),
            ("bad request_id", make_request(request_id="no spaces allowed"), "request_id"),
        ]
        stub = self.server.stub()
        for name, request, field in cases:
            with self.subTest(case=name):
                code, details = rpc_code(lambda: stub.GenerateMesh(request, timeout=60))
                self.assertEqual(code, grpc.StatusCode.INVALID_ARGUMENT, f"{name}: {details}")
                self.assertIn(field, details)
            with self.subTest(case=name + " (stream)"):
                code, details = rpc_code(
                    lambda: list(stub.GenerateMeshStream(request, timeout=60)))
                self.assertEqual(code, grpc.StatusCode.INVALID_ARGUMENT, f"{name}: {details}")
                self.assertIn(field, details)
        # The prompt limit is in bytes: 64 bytes of multi-byte UTF-8 pass, 65 do not.
        self.assert_mesh(self.generate(make_request("é" * (self.MAX_PROMPT_BYTES // 2))))
        code, details = rpc_code(lambda: stub.GenerateMesh(
            make_request("é" * (self.MAX_PROMPT_BYTES // 2) + "x"), timeout=60))
        self.assertEqual(code, grpc.StatusCode.INVALID_ARGUMENT, details)
        self.assertIn("prompt", details)
        self.assert_still_serving()

    def test_rejected_request_ids_cannot_forge_or_flood_the_log(self):
        forged = "x\n[2026-01-01 00:00:00.000] [info] request forged OK \x1b[31m"
        huge = "y" * (8 << 20)
        before = len(self.server.log())
        stub = self.server.stub()
        for request_id in (forged, huge, huge, huge):
            code, details = rpc_code(lambda: stub.GenerateMesh(
                make_request(request_id=request_id), timeout=60))
            self.assertEqual(code, grpc.StatusCode.INVALID_ARGUMENT, details)
            self.assertIn("request_id", details)
        time.sleep(0.5)
        added = self.server.log()[before:]
        self.assertNotIn("\n[2026-01-01 00:00:00.000] [info] request forged OK", added)
        self.assertNotIn("\x1b", added)
        self.assertIn("x\\x0a[2026-01-01", added)  # the id, escaped
        self.assertLess(len(added), 10_000, "rejected ids were logged in full")

    def _send_raw_request(self, payload):
        """Sends serialized GenerateMeshRequest bytes as they are (no Python-side checks)."""
        method = self.server.channel.unary_unary(
            "/cube3d.v1.MeshService/GenerateMesh", request_serializer=None,
            response_deserializer=pb.GenerateMeshResponse.FromString)
        return rpc_code(lambda: method(payload, timeout=60))

    def test_raw_bytes_request_path_works(self):
        # The raw path used for the invalid UTF-8 case does reach the service: a valid prompt
        # sent the same way succeeds.
        payload = b"\x0a\x07a chair" + make_request("").SerializeToString()
        code, response = self._send_raw_request(payload)
        self.assertEqual(code, grpc.StatusCode.OK, response)
        self.count_ok()
        self.assert_mesh(response)

    def test_invalid_utf8_prompt(self):
        # Field 1 (prompt), length 5, with a lone continuation byte: not UTF-8. Protobuf's
        # Python runtime refuses to build such a string, so the bytes are written by hand.
        payload = b"\x0a\x05ab\xffcd" + make_request("").SerializeToString()
        code, details = self._send_raw_request(payload)
        self.assertEqual(code, grpc.StatusCode.INVALID_ARGUMENT, details)
        self.assertIn("prompt", details)
        self.assertIn("UTF-8", details)
        self.assert_still_serving()

    # 5. deadlines
    def test_tiny_deadline_gets_deadline_exceeded(self):
        stub = self.server.stub()
        for _ in range(3):
            code, details = rpc_code(
                lambda: stub.GenerateMesh(make_request("a boat"), timeout=0.005))
            self.assertEqual(code, grpc.StatusCode.DEADLINE_EXCEEDED, details)
        code, details = rpc_code(
            lambda: list(stub.GenerateMeshStream(make_request("a boat"), timeout=0.005)))
        self.assertEqual(code, grpc.StatusCode.DEADLINE_EXCEEDED, details)
        self.assert_still_serving()

    def test_server_side_deadline_while_running(self):
        # A deadline that passes while the request runs (resolution 7: about 3 s of meshing on
        # a CPU, coarse to fine): the server answers DEADLINE_EXCEEDED and keeps serving.
        stub = self.server.stub()
        start = time.monotonic()
        code, details = rpc_code(
            lambda: stub.GenerateMesh(make_request("a castle", resolution_base=7), timeout=0.5))
        self.assertEqual(code, grpc.StatusCode.DEADLINE_EXCEEDED, details)
        self.assertLess(time.monotonic() - start, 30)
        self.assert_still_serving()

    # 6. cancellation
    def test_cancelled_stream_frees_the_server(self):
        def cancelled(samples):
            return metric_value(samples, "cube3d_requests_total", code="CANCELLED") or 0

        before = cancelled(self.server.metrics())
        stub = self.server.stub()
        # Resolution 6 (a second or more of meshing): it cannot finish in the moment a cancel
        # takes.
        call = stub.GenerateMeshStream(make_request("a spaceship", resolution_base=6),
                                       timeout=RPC_TIMEOUT_S)
        first = next(call)
        self.assertEqual(first.WhichOneof("event"), "progress")
        call.cancel()
        code, details = rpc_code(lambda: list(call))
        self.assertEqual(code, grpc.StatusCode.CANCELLED, details)

        start = time.monotonic()
        self.assert_mesh(self.generate(make_request("a bicycle"), timeout=60))
        self.assertLess(time.monotonic() - start, 30, "the server was slow after a cancel")

        self.wait_for_metrics(lambda s: cancelled(s) >= before + 1,
                              "cube3d_requests_total{code=\"CANCELLED\"} incremented")
        self.wait_for_metrics(lambda s: metric_value(s, "cube3d_queue_depth") == 0,
                              "cube3d_queue_depth 0")
        self.assertEqual(self.server.health(), "SERVING")

    # 8. streaming
    def test_stream_reports_progress_then_result(self):
        events = list(self.server.stub().GenerateMeshStream(
            make_request("a stool", return_shape_tokens=True), timeout=RPC_TIMEOUT_S))
        self.count_ok()
        kinds = [e.WhichOneof("event") for e in events]
        self.assertEqual(kinds[-1], "result", kinds)
        self.assertEqual(kinds.count("result"), 1, kinds)
        self.assertGreaterEqual(kinds.count("progress"), 3, kinds)
        progress = [e.progress for e in events if e.WhichOneof("event") == "progress"]
        stages = [p.stage for p in progress]
        self.assertEqual(stages[0], pb.STAGE_QUEUED)
        self.assertEqual(stages, sorted(stages), f"stages go backwards: {stages}")
        for stage in (pb.STAGE_DECODING, pb.STAGE_MESHING, pb.STAGE_DONE):
            self.assertIn(stage, stages)
        done = [p.tokens_done for p in progress]
        self.assertEqual(done, sorted(done), f"tokens_done goes backwards: {done}")
        for p in progress:
            if p.stage >= pb.STAGE_DECODING:
                self.assertEqual(p.tokens_total, TOKENS)
                self.assertLessEqual(p.tokens_done, TOKENS)
        self.assertEqual(max(done), TOKENS)
        self.assertTrue(any(p.stage == pb.STAGE_DECODING and p.tokens_done == TOKENS
                            for p in progress), "no DECODING event at 64/64")
        result = events[-1].result
        self.assert_mesh(result)
        self.assertEqual(len(result.shape_tokens), TOKENS)
        t = result.timings
        for name in ("decode_ms", "tpot_ms", "mesh_ms", "total_ms"):
            self.assertGreater(getattr(t, name), 0, name)
        self.assertGreaterEqual(t.total_ms, t.decode_ms)

    def test_unary_and_stream_agree(self):
        request = make_request("a helmet", top_p=0.9, seed=7, return_shape_tokens=True)
        unary = self.generate(request)
        events = list(self.server.stub().GenerateMeshStream(request, timeout=RPC_TIMEOUT_S))
        self.count_ok()
        streamed = events[-1].result
        self.assertEqual(list(unary.shape_tokens), list(streamed.shape_tokens))
        self.assertEqual(e2e.mesh_without_request_id(unary.encoded),
                         e2e.mesh_without_request_id(streamed.encoded))

    def test_request_id_is_echoed(self):
        r = self.generate(make_request("a tree", request_id="e2e-req_01:x.y"))
        self.assertEqual(r.request_id, "e2e-req_01:x.y")
        self.assertIn("e2e-req_01:x.y", self.server.log())

    # 9. metrics
    def test_metrics_endpoint(self):
        for i in range(2):
            self.generate(make_request(f"a metrics probe {i}"))
        # A call is counted when gRPC is done with it (OnDone), which can come just after its
        # client has the response: poll rather than scrape once.
        expected_ok = self.ok_requests
        samples = self.wait_for_metrics(
            lambda s: (metric_value(s, "cube3d_requests_total", code="OK") or 0) >= expected_ok
            and (metric_value(s, "cube3d_tokens_generated_total") or 0) >= TOKENS * expected_ok,
            f"cube3d_requests_total{{code=\"OK\"}} >= {expected_ok} and "
            f"cube3d_tokens_generated_total >= {TOKENS * expected_ok}")
        # Batch size histogram, one series per bucket.
        for bucket in ("1", "2", "4", "8"):
            self.assertIsNotNone(
                metric_value(samples, "cube3d_batch_size_count", batch_bucket=bucket), bucket)
            self.assertIsNotNone(
                metric_value(samples, "cube3d_batch_size_bucket", batch_bucket=bucket, le="+Inf"))
        self.assertGreaterEqual(metric_value(samples, "cube3d_batch_size_count"), 2)
        for name in ("cube3d_time_to_first_token_seconds", "cube3d_time_per_output_token_seconds",
                     "cube3d_request_duration_seconds"):
            with self.subTest(histogram=name):
                count = metric_value(samples, name + "_count")
                self.assertGreaterEqual(count, 2)
                self.assertEqual(metric_value(samples, name + "_bucket", le="+Inf"), count)
                self.assertGreater(metric_value(samples, name + "_sum"), 0)
                buckets = sorted((float(l["le"]), v) for n, l, v in samples
                                 if n == name + "_bucket")
                counts = [v for _, v in buckets]
                self.assertEqual(counts, sorted(counts), "histogram buckets not cumulative")
        self.assertIsNotNone(metric_value(samples, "cube3d_queue_depth"))
        self.assertGreater(metric_value(samples, "cube3d_model_load_seconds"), 0)
        # Errors are counted by status too.
        rpc_code(lambda: self.server.stub().GenerateMesh(
            pb.GenerateMeshRequest(prompt=""), timeout=30))
        self.wait_for_metrics(
            lambda s: (metric_value(s, "cube3d_requests_total", code="INVALID_ARGUMENT") or 0) >= 1,
            "cube3d_requests_total{code=\"INVALID_ARGUMENT\"} >= 1")
        # A query string is fine; another path is a 404.
        status, _ = self.server.http_get("/metrics?x=1")
        self.assertEqual(status, 200)
        with self.assertRaises(urllib.error.HTTPError) as cm:
            self.server.http_get("/other")
        self.assertEqual(cm.exception.code, 404)

    def test_a_slow_metrics_client_neither_blocks_scrapes_nor_holds_on(self):
        import socket
        drippers = [socket.create_connection((HOST, self.server.metrics_port), timeout=10)
                    for _ in range(3)]
        try:
            for d in drippers:
                d.sendall(b"G")
            start = time.monotonic()
            status, body = self.server.http_get("/metrics", timeout=5)
            self.assertEqual(status, 200)
            self.assertLess(time.monotonic() - start, 1.5, "a scrape waited for slow clients")
            # A byte every 1.5 s does not keep a connection: it is closed within the 2 s
            # deadline for the whole request head.
            time.sleep(1.0)
            for d in drippers:
                d.sendall(b"E")
            for d in drippers:
                d.settimeout(5)
                try:
                    self.assertEqual(d.recv(100), b"", "the server kept a dribbling client")
                except ConnectionResetError:
                    pass  # closed with our bytes unread: a reset, as good as a close
            self.assertLess(time.monotonic() - start, 4.5)
        finally:
            for d in drippers:
                d.close()

    def _raw_http(self, request_bytes):
        with socket.create_connection((HOST, self.server.metrics_port), timeout=10) as s:
            s.sendall(request_bytes)
            chunks = []
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                chunk = s.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
        return b"".join(chunks)

    def test_metrics_post_is_404(self):
        reply = self._raw_http(b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        self.assertTrue(reply.startswith(b"HTTP/1.1 404"), reply[:100])

    def test_metrics_404_content_length_matches_body(self):
        reply = self._raw_http(b"GET /other HTTP/1.1\r\nHost: x\r\n\r\n")
        head, _, body = reply.partition(b"\r\n\r\n")
        length = int(re.search(rb"Content-Length: (\d+)", head).group(1))
        self.assertEqual(length, len(body), (head, body))

    # 12. reflection
    def test_reflection_lists_the_service(self):
        names = set()
        errors = []
        for version in ("v1alpha", "v1"):
            method = self.server.channel.stream_stream(
                f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
                request_serializer=refl_pb.ServerReflectionRequest.SerializeToString,
                response_deserializer=refl_pb.ServerReflectionResponse.FromString)
            try:
                responses = list(method(iter([refl_pb.ServerReflectionRequest(list_services="*")]),
                                        timeout=30))
            except grpc.RpcError as e:
                errors.append(f"{version}: {e.code().name} {e.details()}")
                continue
            for r in responses:
                names.update(s.name for s in r.list_services_response.service)
            if names:
                break
        self.assertIn("cube3d.v1.MeshService", names, errors)

    def test_reflection_serves_the_public_api(self):
        # What grpcurl and JSON transcoders read: the client's messages (string prompt), not the
        # server's wire twin.
        from google.protobuf import descriptor_pb2
        method = self.server.channel.stream_stream(
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
            request_serializer=refl_pb.ServerReflectionRequest.SerializeToString,
            response_deserializer=refl_pb.ServerReflectionResponse.FromString)
        responses = list(method(iter([refl_pb.ServerReflectionRequest(
            file_containing_symbol="cube3d.v1.MeshService")]), timeout=30))
        files = [descriptor_pb2.FileDescriptorProto.FromString(b) for r in responses
                 for b in r.file_descriptor_response.file_descriptor_proto]
        api = [f for f in files if f.name == "cube3d/v1/mesh_service.proto"]
        self.assertEqual(len(api), 1, [f.name for f in files])
        request = next(m for m in api[0].message_type if m.name == "GenerateMeshRequest")
        prompt = next(f for f in request.field if f.name == "prompt")
        self.assertEqual(prompt.type, descriptor_pb2.FieldDescriptorProto.TYPE_STRING)
        formats = next(e for e in api[0].enum_type if e.name == "MeshFormat")
        self.assertEqual(formats.value[0].name, "MESH_FORMAT_UNSPECIFIED")
        self.assertEqual(formats.value[0].number, 0)

    # 12. the API as JSON clients and health probes use it
    def test_json_mapping_of_a_request_reaches_the_server_as_text(self):
        from google.protobuf import json_format
        request = json_format.Parse('{"prompt": "a red car", "resolutionBase": 4, '
                                    '"returnShapeTokens": true}', pb.GenerateMeshRequest())
        from_json = self.generate(request)
        direct = self.generate(make_request("a red car", return_shape_tokens=True))
        self.assertEqual(list(from_json.shape_tokens), list(direct.shape_tokens))
        self.assertEqual(from_json.format, pb.MESH_FORMAT_GLB)
        # The answer round-trips through the JSON mapping too.
        again = json_format.Parse(json_format.MessageToJson(from_json), pb.GenerateMeshResponse())
        self.assertEqual(again, from_json)

    def test_unspecified_format_is_the_servers_default(self):
        response = self.generate(make_request("a teapot", format=pb.MESH_FORMAT_UNSPECIFIED))
        self.assertEqual(response.format, pb.MESH_FORMAT_GLB)
        self.assertEqual(response.encoded[:4], b"glTF")

    def test_a_second_server_on_the_same_port_refuses_to_start(self):
        # gRPC's default SO_REUSEPORT would let it start and split the traffic silently.
        proc = subprocess.run(
            [SERVER_BIN, "--config", DEMO_CONFIG, "--listen", self.server.address,
             "--metrics-listen", ""],
            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, cwd=SOURCE)
        self.assertNotEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn(f"listen {self.server.address}", proc.stderr)
        self.assertIn("in use", proc.stderr)
        self.assertNotIn("serving", proc.stdout + proc.stderr)
        self.assert_still_serving()

    def test_health_answers_for_the_service_name(self):
        self.assertEqual(self.server.health(service=""), "SERVING")
        self.assertEqual(self.server.health(service="cube3d.v1.MeshService"), "SERVING")
        self.assertEqual(self.server.health(service="no.such.Service"), "NOT_FOUND")

    # 11. the C++ client
    def _client(self, *args, timeout=180):
        return subprocess.run([CLIENT_BIN, "--server", self.server.address, *args],
                              capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def test_cpp_client_writes_meshes(self):
        tokens_path = os.path.join(self._tmp.name, "tokens.txt")
        for ext in ("glb", "obj", "ply"):
            with self.subTest(format=ext):
                out = os.path.join(self._tmp.name, f"client.{ext}")
                extra = ["--tokens-out", tokens_path] if ext == "glb" else ["--no-progress"]
                proc = self._client("--prompt", "a round table", "--out", out, "--seed", "3",
                                    "--top-p", "0.9", "--resolution-base", str(RES),
                                    "--timeout-ms", "120000", *extra)
                self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
                self.count_ok()
                m = re.search(r"(\d+) vertices, (\d+) faces \(request \w+, bucket (\d+)\)",
                              proc.stdout)
                self.assertIsNotNone(m, proc.stdout)
                self.assertIn(out, proc.stdout)
                self.assertRegex(proc.stdout, r"queue [\d.]+ ms \| text .* total [\d.]+ ms")
                vertices, faces = int(m.group(1)), int(m.group(2))
                self.assertGreater(faces, 0)
                mesh = trimesh.load(out, force="mesh", process=False)
                self.assertEqual(len(mesh.faces), faces)
                self.assertEqual(len(mesh.vertices), vertices)
                if ext == "glb":
                    self.assertIn(f"{TOKENS}/{TOKENS}", proc.stderr)  # the progress bar
                    with open(tokens_path) as f:
                        tokens = [int(t) for t in f.read().split()]
                    self.assertEqual(len(tokens), TOKENS)
                    self.assertTrue(all(0 <= t < VOCAB for t in tokens), tokens)
                else:
                    self.assertNotIn(f"{TOKENS}/{TOKENS}", proc.stderr)
        # The client's GLB is the server's GLB for the same request.
        direct = self.generate(make_request("a round table", seed=3, top_p=0.9,
                                            return_shape_tokens=True))
        with open(os.path.join(self._tmp.name, "client.glb"), "rb") as f:
            self.assertEqual(e2e.mesh_without_request_id(f.read()),
                             e2e.mesh_without_request_id(direct.encoded))
        self.assertEqual(list(direct.shape_tokens), tokens)

    def test_cpp_client_errors(self):
        out = os.path.join(self._tmp.name, "never.glb")
        proc = self._client("--prompt", "a chair", "--out", out, "--resolution-base", "12",
                            "--no-progress")
        self.assertEqual(proc.returncode, 3, proc.stdout + proc.stderr)
        self.assertIn("cube3d-client: INVALID_ARGUMENT:", proc.stderr)
        self.assertIn("resolution_base", proc.stderr)
        self.assertFalse(os.path.exists(out))

        bad = os.path.join(self._tmp.name, "mesh.stl")
        proc = self._client("--prompt", "a chair", "--out", bad, "--no-progress")
        self.assertNotEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn(".stl", proc.stderr)
        self.assertIn("extension", proc.stderr)
        self.assertFalse(os.path.exists(bad))

        proc = self._client("--out", out)  # no prompt
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("--prompt", proc.stderr)

        # A server that is not there: UNAVAILABLE, exit 3.
        dead_port = free_ports(1)[0]
        proc = subprocess.run([CLIENT_BIN, "--server", f"{HOST}:{dead_port}", "--prompt", "x",
                               "--out", out, "--no-progress", "--timeout-ms", "5000"],
                              capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
        self.assertEqual(proc.returncode, 3, proc.stdout + proc.stderr)
        self.assertRegex(proc.stderr, r"cube3d-client: (UNAVAILABLE|DEADLINE_EXCEEDED):")


# --- 6b. reference decoding through the emulated graph runner -----------------------------------

class ReferenceModeEmulatedGraphsTest(ServerTestCase):
    """single_stream_decode: reference with cuda_graphs: emulate: every (bucket, guidance) variant
    is captured at start in the reference mode (the serving mode; warm-up included), and the
    tokens are the eager reference tokens of cube3d-generate for the same prompt, whatever the
    batch. Before the explicit capture lifecycle, a server in reference mode recaptured inside
    its first batch of each bucket."""

    SERVER_ARGS = ["--batch-buckets", "1,2", "--set", "single_stream_decode=reference",
                   "--set", "cuda_graphs=emulate"]

    def offline_tokens(self, prompt, mode):
        path = os.path.join(self._tmp.name, f"tokens-{mode}.txt")
        proc = subprocess.run(
            [os.path.join(BIN_DIR, "cube3d-generate"), "--model-config",
             os.path.join(SOURCE, "models", "demo.yaml"), "--prompt", prompt,
             "--single-stream-decode", mode, "--cuda-graphs", "off", "--resolution-base", "2",
             "--tokens-out", path],
            capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        with open(path) as f:
            return [int(t) for t in f.read().split()]

    def test_reference_tokens_alone_and_batched(self):
        prompt = "a wooden chair with a high back"
        expected = self.offline_tokens(prompt, "reference")
        self.assertNotEqual(expected, self.offline_tokens(prompt, "causal"))
        alone = self.generate(make_request(prompt, return_shape_tokens=True))
        self.assertEqual(list(alone.shape_tokens), expected)
        # Two at once land in bucket 2 (or two of bucket 1): the same tokens either way.
        outcomes = self.generate_all([make_request(prompt, return_shape_tokens=True),
                                      make_request("a lamp", return_shape_tokens=True)])
        self.assertEqual(outcomes[0][0], grpc.StatusCode.OK, outcomes[0][1])
        self.assertEqual(list(outcomes[0][1].shape_tokens), expected)
        # An unguided request uses the one-row variant, also captured at start.
        unguided = self.generate(make_request(prompt, guidance_scale=0.0,
                                              return_shape_tokens=True))
        self.assertEqual(len(unguided.shape_tokens), TOKENS)


# --- 7. queue overflow: one request per batch, at most 2 waiting -------------------------------

class QueueOverflowTest(ServerTestCase):
    # The queue holds requests not yet handed to the engine; with bucket 1 each decode (64
    # tokens) takes the worker a while, so a burst of 12 overflows a queue of 2. (Meshing runs
    # on other threads and does not hold the queue, so the resolution does not matter here.)
    SERVER_ARGS = ["--batch-buckets", "1", "--set", "batching.max_queue_size=2"]

    def test_burst_overflows_with_resource_exhausted(self):
        stub = self.server.stub()
        exhausted_total = 0
        for attempt in range(3):
            start = time.monotonic()
            finished = {}
            futures = []
            for i in range(12):
                f = stub.GenerateMesh.future(make_request(f"burst {attempt}.{i}"),
                                             timeout=RPC_TIMEOUT_S)
                f.add_done_callback(lambda _f, i=i: finished.setdefault(i, time.monotonic()))
                futures.append(f)
            ok_at, exhausted_at = [], []
            for i, f in enumerate(futures):
                code, detail = rpc_code(lambda: f.result(timeout=RPC_TIMEOUT_S + 30))
                at = finished.get(i, time.monotonic()) - start
                if code == grpc.StatusCode.OK:
                    self.assert_mesh(detail)
                    self.assertEqual(detail.batch_bucket, 1)
                    ok_at.append(at)
                    self.count_ok()
                else:
                    self.assertEqual(code, grpc.StatusCode.RESOURCE_EXHAUSTED, detail)
                    self.assertIn("queue full", detail)
                    exhausted_at.append(at)
            self.assertGreaterEqual(len(ok_at), 1, "nothing succeeded")
            if exhausted_at:
                exhausted_total += len(exhausted_at)
                # Refused at once, not after waiting: before the last success, and quickly.
                self.assertLess(min(exhausted_at), max(ok_at))
                self.assertLess(min(exhausted_at), 10.0)
                break
        self.assertGreater(exhausted_total, 0, "12 concurrent requests never overflowed a queue "
                                               "of 2")
        # Counted when gRPC is done with the call, which can be just after its client read it.
        self.wait_for_metrics(
            lambda s: (metric_value(s, "cube3d_requests_total", code="RESOURCE_EXHAUSTED")
                       or 0) >= exhausted_total,
            f"cube3d_requests_total{{code=\"RESOURCE_EXHAUSTED\"}} >= {exhausted_total}")
        # The server recovers: a request after the burst succeeds.
        self.assert_still_serving()


# --- 8. continuous batching: arrivals join the running batch ----------------------------------

def _mixed_requests(tag):
    """Greedy, sampled and unguided requests: every kind of neighbour."""
    return [make_request(f"{tag} chair", return_shape_tokens=True),
            make_request(f"{tag} lamp", top_p=0.9, seed=11, return_shape_tokens=True),
            make_request(f"{tag} table", guidance_scale=0.0, return_shape_tokens=True),
            make_request(f"{tag} sword", top_p=0.8, seed=5, guidance_scale=1.5,
                         return_shape_tokens=True),
            make_request(f"{tag} barrel", return_shape_tokens=True),
            make_request(f"{tag} tree", guidance_scale=0.0, top_p=0.95, seed=3,
                         return_shape_tokens=True)]


class ContinuousBatchingTest(ServerTestCase):
    """batching.mode: continuous (the default) with one join per step and no queue delay: a
    burst is admitted one request per decode step while the first ones run, and every request
    still gets the tokens (and mesh bytes) it gets alone."""

    SERVER_ARGS = ["--max-queue-delay-ms", "0", "--set", "batching.max_joins_per_step=1"]

    def test_joiners_get_the_tokens_they_get_alone(self):
        requests = _mixed_requests("continuous")
        alone = []
        for r in requests:
            response = self.generate(r)
            self.assertEqual(response.batch_bucket, 1, "a request alone ran next to another")
            alone.append(response)
        for attempt in range(3):
            outcomes = self.generate_all(requests)
            for code, detail in outcomes:
                self.assertEqual(code, grpc.StatusCode.OK, detail)
            together = [r for _, r in outcomes]
            for i, (a, t) in enumerate(zip(alone, together)):
                self.assertEqual(list(t.shape_tokens), list(a.shape_tokens),
                                 f"request {i}: tokens differ after joining (bucket "
                                 f"{t.batch_bucket}, queued {t.timings.queue_ms:.1f} ms)")
                self.assertEqual(e2e.mesh_without_request_id(t.encoded),
                                 e2e.mesh_without_request_id(a.encoded),
                                 f"request {i}: GLB bytes differ")
            # One join per step: the first admitted ran while the others joined it.
            first = min(together, key=lambda r: r.timings.queue_ms)
            if first.batch_bucket >= 4:
                break
        else:
            self.fail("the burst never joined a running request: buckets "
                      f"{[r.batch_bucket for r in together]}, queue ms "
                      f"{[round(r.timings.queue_ms, 1) for r in together]}")

    def test_continuous_metrics(self):
        self.generate_all([make_request(f"metrics {i}") for i in range(3)])
        samples = self.server.metrics()
        self.assertGreaterEqual(metric_value(samples, "cube3d_admissions_total"), 3)
        self.assertGreaterEqual(metric_value(samples, "cube3d_prefill_duration_seconds_count"), 1)
        self.assertIsNotNone(metric_value(samples, "cube3d_active_slots"))
        # Every decode step is one batch-size observation of its bucket.
        self.assertGreaterEqual(metric_value(samples, "cube3d_batch_size_count"), TOKENS - 1)
        self.wait_for_metrics(lambda m: metric_value(m, "cube3d_active_slots") == 0,
                              "no active slot after the requests finished")


class StaticBatchingTest(ServerTestCase):
    """batching.mode: static still forms whole batches, with the same tokens as continuous."""

    SERVER_ARGS = ["--max-queue-delay-ms", "200", "--set", "batching.mode=static"]

    def test_static_batches_give_the_same_tokens(self):
        requests = _mixed_requests("continuous")
        alone = [self.generate(r) for r in requests]
        outcomes = self.generate_all(requests)
        for code, detail in outcomes:
            self.assertEqual(code, grpc.StatusCode.OK, detail)
        together = [r for _, r in outcomes]
        self.assertGreater(max(r.batch_bucket for r in together), 1, "nothing was batched")
        for i, (a, t) in enumerate(zip(alone, together)):
            self.assertEqual(list(t.shape_tokens), list(a.shape_tokens), f"request {i}")
        self.assertIn("static batching", self.server.log())


class ContinuousOverloadTest(ServerTestCase):
    """Twice what the slots and queue hold, with deadlines and cancellations mixed in: every
    request is answered OK, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED or (cancelled by its client)
    CANCELLED; nothing hangs; the status counts in /metrics equal what the clients saw."""

    SERVER_ARGS = ["--batch-buckets", "1,2,4", "--set", "batching.max_queue_size=4",
                   "--max-queue-delay-ms", "0"]

    def test_overload_answers_everyone_and_metrics_agree(self):
        def counts():
            samples = self.server.metrics()
            return {code: metric_value(samples, "cube3d_requests_total", code=code) or 0
                    for code in ("OK", "RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED", "CANCELLED")}

        before = counts()
        stub = self.server.stub()
        n = 16  # twice the 4 slots + 4 queue places
        futures = []
        for i in range(n):
            timeout = 0.3 if i % 5 == 1 else RPC_TIMEOUT_S
            futures.append(stub.GenerateMesh.future(make_request(f"overload {i}"),
                                                    timeout=timeout))
        seen = {}
        # Two streams cancelled by their clients once the server answered (QUEUED, or a refusal).
        for i in range(2):
            call = stub.GenerateMeshStream(make_request(f"overload stream {i}"),
                                           timeout=RPC_TIMEOUT_S)
            code, _ = rpc_code(lambda: next(call))
            call.cancel()
            if code == grpc.StatusCode.OK:
                seen["CANCELLED"] = seen.get("CANCELLED", 0) + 1
            else:
                self.assertEqual(code, grpc.StatusCode.RESOURCE_EXHAUSTED)
                seen[code.name] = seen.get(code.name, 0) + 1
        for f in futures:
            code, detail = rpc_code(lambda: f.result(timeout=RPC_TIMEOUT_S + 30))
            self.assertIn(code, (grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED,
                                 grpc.StatusCode.DEADLINE_EXCEEDED), detail)
            if code == grpc.StatusCode.OK:
                self.assert_mesh(detail)
                self.count_ok()
            seen[code.name] = seen.get(code.name, 0) + 1
        self.assertGreater(seen.get("OK", 0), 0)
        self.assertGreater(seen.get("RESOURCE_EXHAUSTED", 0), 0, seen)
        # The server's counts catch up with the clients' (a cancelled stream's handler answers
        # a moment after its client left).
        def agree(samples):
            now = {code: (metric_value(samples, "cube3d_requests_total", code=code) or 0)
                   - before[code] for code in before}
            return all(now[code] == seen.get(code, 0) for code in before)
        self.wait_for_metrics(agree, f"the client-side counts {seen} (before: {before})")
        self.wait_for_metrics(lambda m: metric_value(m, "cube3d_active_slots") == 0,
                              "the slots emptied")
        self.assert_still_serving()


# --- 10. SIGTERM drains --------------------------------------------------------------------------

def wait_for_stage(call, stage, timeout=120):
    """Reads a GenerateMeshStream until a progress event of `stage`; returns the events read."""
    events = []
    deadline = time.monotonic() + timeout
    for event in call:
        events.append(event)
        if event.WhichOneof("event") != "progress" or event.progress.stage == stage:
            break
        if time.monotonic() > deadline:
            break
    last = events[-1] if events else None
    if last is None or last.WhichOneof("event") != "progress" or last.progress.stage != stage:
        raise AssertionError(f"the stream never reached stage {pb.Stage.Name(stage)}: {events}")
    return events


class DrainTest(ServerTestCase):
    # A 65^3 grid: about 1 s of meshing on a CPU coarse to fine (the dense grid 2 to 3 s; at 7
    # about 3 s and 15 s).
    SLOW_RES = 6

    def test_sigterm_finishes_in_flight_work_and_refuses_new(self):
        stub = self.server.stub()
        call = stub.GenerateMeshStream(
            make_request("a slow cathedral", resolution_base=self.SLOW_RES), timeout=300)
        # Past decoding, meshing: the request is certainly in flight when the signal arrives.
        events = wait_for_stage(call, pb.STAGE_MESHING)
        signalled = time.monotonic()
        self.server.terminate()

        # Health turns NOT_SERVING while draining (or the server is already gone).
        health = None
        for _ in range(100):
            health = self.server.health(timeout=2)
            if health != "SERVING":
                break
            time.sleep(0.05)
        self.assertIn(health, ("NOT_SERVING", "UNAVAILABLE"))
        # New work is refused with UNAVAILABLE ("server is shutting down" while it drains,
        # connection refused once it is gone).
        code, details = rpc_code(lambda: stub.GenerateMesh(make_request("too late"), timeout=30))
        self.assertEqual(code, grpc.StatusCode.UNAVAILABLE, details)

        # The in-flight request completes.
        code, rest = rpc_code(lambda: list(call))
        self.assertEqual(code, grpc.StatusCode.OK, rest)
        events.extend(rest)
        self.assertEqual(events[-1].WhichOneof("event"), "result")
        self.assert_mesh(events[-1].result)

        rc = self.server.wait_exit(timeout=STOP_TIMEOUT_S)
        self.assertEqual(rc, 0, self.server.log_tail())
        self.assertLess(time.monotonic() - signalled, 30 + 15, "exit took longer than the grace")
        log = self.server.log()
        self.assertIn("scheduler: draining (0 queued, 1 running)", log)
        self.assertIn("stopped (all work finished)", log)


class DrainGraceTest(unittest.TestCase):
    """drain_grace_seconds bounds the shutdown even when a request is still meshing."""

    def test_grace_period_bounds_shutdown(self):
        with tempfile.TemporaryDirectory(prefix="cube3d-e2e-") as tmp:
            server = ServerProcess(["--set", "drain_grace_seconds=1"], tmp)
            server.start()
            try:
                stub = server.stub()
                # Resolution 8: about ten seconds of meshing on a CPU even coarse to fine (the
                # dense grid takes minutes), far beyond the 1 s grace.
                call = stub.GenerateMeshStream(make_request("a huge castle", resolution_base=8),
                                               timeout=600)
                wait_for_stage(call, pb.STAGE_MESHING)
                signalled = time.monotonic()
                server.terminate()
                code, details = rpc_code(lambda: list(call))
                self.assertEqual(code, grpc.StatusCode.UNAVAILABLE, details)
                rc = server.wait_exit(timeout=30)
                self.assertEqual(rc, 0, server.log_tail())
                self.assertLess(time.monotonic() - signalled, 1 + 15, server.log_tail())
                self.assertIn("grace period ran out", server.log())
            finally:
                server.kill()


# --- 13. meshing: occupancy progress, points evaluated, cancellation between chunks --------------

def grid_points(resolution_base):
    """The dense grid's points, (2^r + 1)^3."""
    return ((1 << resolution_base) + 1) ** 3


def cpu_seconds(pid):
    """User + system CPU time of a process so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 of stat(5); fields[0] here is field 3 (state).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class OccupancyTest(ServerTestCase):
    """mesh.occupancy: the class's server runs the default (hierarchical, coarsest level 5,
    dilation 1), a second one `mesh.occupancy=dense` (the official dense grid). Both serve the
    demo model, so one greedy prompt gives the same tokens, hence the same field, on both."""

    PROGRESS_RES = 7  # hierarchical: a few seconds of meshing on a CPU, three levels (5, 6, 7)
    COMPARE_RES = 6   # dense: 65^3 = 274625 points, a few seconds
    # Dense at 8 is 16.9 M points, minutes on a CPU: a cancel that were not honoured between
    # chunks would keep the server busy long after the client left.
    CANCEL_RES = 8
    IDLE_CPU_SHARE = 0.3  # of one core, over a one-second window: an idle server uses ~0

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.dense = ServerProcess(["--set", "mesh.occupancy=dense"], cls._tmp.name)
        cls.addClassCleanup(cls.dense.kill)
        cls.dense.start()

    @classmethod
    def tearDownClass(cls):
        try:
            cls.dense.stop()
        finally:
            super().tearDownClass()

    def run(self, result=None):
        # The base class prints the hierarchical server's log on a failure; add the dense one's.
        before = len(result.failures) + len(result.errors) if result else 0
        outcome = super().run(result)
        if result is not None and len(result.failures) + len(result.errors) > before \
                and getattr(self, "dense", None) is not None:
            sys.stderr.write(f"\n----- dense cube3d-server log ({self.id()}) -----\n"
                             f"{self.dense.log_tail()}\n----- end of log -----\n")
        return outcome

    def stream(self, server, request):
        """Every event of a GenerateMeshStream; the last must be the result."""
        events = list(server.stub().GenerateMeshStream(request, timeout=RPC_TIMEOUT_S))
        kinds = [e.WhichOneof("event") for e in events]
        self.assertEqual(kinds[-1], "result", kinds)
        return [e.progress for e in events[:-1]], events[-1].result

    def assert_meshing_progress(self, progress, result):
        """The STAGE_MESHING events count points, the counts only grow, and the result says
        how many points were evaluated."""
        meshing = [p for p in progress if p.stage == pb.STAGE_MESHING]
        self.assertTrue(meshing, f"no STAGE_MESHING event: {progress}")
        counted = [p for p in meshing if p.points_done > 0]
        self.assertTrue(counted, f"no STAGE_MESHING event with points_done > 0: {meshing}")
        for p in meshing:
            self.assertGreaterEqual(p.points_planned, p.points_done, p)
            self.assertLessEqual(p.levels_done, p.levels_total, p)
        for p in counted:
            self.assertGreaterEqual(p.levels_total, 1, p)
        done = [p.points_done for p in meshing]
        self.assertEqual(done, sorted(done), f"points_done goes backwards: {done}")
        levels = [p.levels_done for p in meshing]
        self.assertEqual(levels, sorted(levels), f"levels_done goes backwards: {levels}")
        # The last event closes the count: every level done, the plan final, and the points
        # those of the result.
        self.assertGreater(result.occupancy_points, 0)
        last = meshing[-1]
        self.assertEqual(last.levels_done, last.levels_total, last)
        self.assertEqual((last.points_done, last.points_planned),
                         (result.occupancy_points, result.occupancy_points), last)
        self.assertGreater(result.timings.occupancy_ms, 0)
        self.assertLessEqual(result.timings.occupancy_ms, result.timings.mesh_ms)
        return meshing

    def test_hierarchical_meshing_reports_points_progress(self):
        r = self.PROGRESS_RES
        progress, result = self.stream(
            self.server, make_request("a tall lighthouse", resolution_base=r))
        self.count_ok()
        self.assert_mesh(result)
        meshing = self.assert_meshing_progress(progress, result)
        # Coarse to fine: fewer points than the dense grid, and more than one level.
        self.assertLess(result.occupancy_points, grid_points(r))
        self.assertGreater(max(p.levels_total for p in meshing), 1, meshing)

    def test_dense_counts_every_grid_point_and_hierarchical_fewer(self):
        r = self.COMPARE_RES
        # RAW and no decimation (a face target above the mesh's faces), to compare the surfaces:
        # the two runs evaluate their points in different batches, so the values (and vertices)
        # may differ by float rounding, which the simplifier would amplify.
        request = make_request("a round stool", resolution_base=r, format=pb.MESH_FORMAT_RAW,
                               target_face_count=2_000_000)
        progress, dense = self.stream(self.dense, request)
        self.count_ok()
        self.assert_mesh(dense, pb.MESH_FORMAT_RAW)
        self.assert_meshing_progress(progress, dense)
        self.assertEqual(dense.occupancy_points, grid_points(r))

        hierarchical = self.generate(request)
        self.assert_mesh(hierarchical, pb.MESH_FORMAT_RAW)
        self.assertGreater(hierarchical.occupancy_points, 0)
        self.assertLess(hierarchical.occupancy_points, dense.occupancy_points)
        self.assertGreater(hierarchical.timings.occupancy_ms, 0)
        # The demo field's features span several coarse cells: the same surface from fewer
        # points. Every vertex of each mesh lies on the other's, to well under a voxel.
        self.assertAlmostEqual(hierarchical.vertex_count / dense.vertex_count, 1.0, delta=0.01)
        voxel = 2.1 / (1 << r)
        ours = np.array(hierarchical.raw.vertices, dtype=np.float64).reshape(-1, 3)
        theirs = np.array(dense.raw.vertices, dtype=np.float64).reshape(-1, 3)
        for a, b, what in ((ours, theirs, "hierarchical in dense"),
                           (theirs, ours, "dense in hierarchical")):
            distances, _ = cKDTree(b).query(a)
            self.assertGreaterEqual(np.mean(distances <= 1e-3 * voxel), 0.99,
                                    f"{what}: largest distance {distances.max() / voxel:.3g} "
                                    f"voxels")

    def wait_idle(self, server, timeout=15):
        """Waits for a one-second window in which the server used under IDLE_CPU_SHARE of a
        core; returns the seconds waited, or fails with the last window's share."""
        start = time.monotonic()
        share = None
        while time.monotonic() - start < timeout:
            before, t0 = cpu_seconds(server.proc.pid), time.monotonic()
            time.sleep(1.0)
            share = (cpu_seconds(server.proc.pid) - before) / (time.monotonic() - t0)
            if share < self.IDLE_CPU_SHARE:
                return time.monotonic() - start
        self.fail(f"the server kept {share:.2f} of a core busy for {timeout} s after the cancel: "
                  f"the cancelled request is still meshing")

    def test_cancel_while_meshing_stops_the_work(self):
        def cancelled(samples):
            return metric_value(samples, "cube3d_requests_total", code="CANCELLED") or 0

        server = self.dense
        before = cancelled(server.metrics())
        call = server.stub().GenerateMeshStream(
            make_request("an enormous cathedral", resolution_base=self.CANCEL_RES),
            timeout=RPC_TIMEOUT_S)
        wait_for_stage(call, pb.STAGE_MESHING)
        cancelled_at = time.monotonic()
        call.cancel()
        code, details = rpc_code(lambda: list(call))
        self.assertEqual(code, grpc.StatusCode.CANCELLED, details)

        # The shape decoder checks between chunks: the server is idle again within seconds,
        # long before a 257^3 dense grid could have finished.
        self.wait_idle(server)
        self.assertLess(time.monotonic() - cancelled_at, 20)
        self.wait_for_metrics_of(server, lambda s: cancelled(s) >= before + 1,
                                 "cube3d_requests_total{code=\"CANCELLED\"} incremented")
        self.wait_for_metrics_of(server, lambda s: metric_value(s, "cube3d_queue_depth") == 0,
                                 "cube3d_queue_depth 0")

        # Nothing is lost: the server serves, and the next request meshes at once.
        self.assertEqual(server.health(), "SERVING")
        start = time.monotonic()
        progress, result = self.stream(server, make_request("a bicycle after the cancel"))
        self.assertLess(time.monotonic() - start, 30, "the server was slow after a cancel")
        self.assert_mesh(result)
        self.assertEqual(result.occupancy_points, grid_points(RES))
        self.assertIn(pb.STAGE_DONE, [p.stage for p in progress])

    def wait_for_metrics_of(self, server, predicate, what, timeout=30):
        """wait_for_metrics for `server` rather than the class's server."""
        held, samples = e2e.poll_metrics(server.metrics, predicate, timeout)
        if not held:
            self.fail(f"metrics never showed {what} within {timeout} s")
        return samples


# --- configuration and start-up, known bugs -------------------------------------------------------

def print_config(*args):
    """cube3d-server --config DEMO_CONFIG ARGS --print-config, run to its end."""
    return subprocess.run([SERVER_BIN, "--config", DEMO_CONFIG, *args, "--print-config"],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


class StartupTest(unittest.TestCase):
    def test_print_config_applies_flags(self):
        proc = print_config("--batch-buckets", "1,2", "--max-queue-delay-ms", "7",
                            "--set", "limits.max_prompt_bytes=99")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("max_prompt_bytes: 99", proc.stdout)
        self.assertIn("max_queue_delay_ms: 7", proc.stdout)

    def test_bad_config_override_names_the_key(self):
        proc = print_config("--set", "batching.max_queue_sise=3")
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("max_queue_sise", proc.stderr)

    def test_occupancy_keys(self):
        proc = print_config()
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn('occupancy: "hierarchical"', proc.stdout)
        self.assertIn("occupancy_coarsest_resolution_base: 5", proc.stdout)
        self.assertIn("occupancy_dilation: 1", proc.stdout)
        proc = print_config("--set", "mesh.occupancy=dense",
                            "--set", "mesh.occupancy_coarsest_resolution_base=6",
                            "--set", "mesh.occupancy_dilation=0")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn('occupancy: "dense"', proc.stdout)
        self.assertIn("occupancy_coarsest_resolution_base: 6", proc.stdout)
        self.assertIn("occupancy_dilation: 0", proc.stdout)
        for key, value in (("mesh.occupancy", "sparse"), ("mesh.occupancy_dilation", "9"),
                           ("mesh.occupancy_coarsest_resolution_base", "0")):
            with self.subTest(key=key):
                proc = print_config("--set", f"{key}={value}")
                self.assertNotEqual(proc.returncode, 0)
                self.assertIn(key, proc.stderr)

    def test_set_is_repeatable(self):
        proc = print_config("--set", "limits.max_prompt_bytes=99",
                            "--set", "defaults.resolution_base=5")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("max_prompt_bytes: 99", proc.stdout)
        self.assertIn("resolution_base: 5", proc.stdout)

    def test_health_not_serving_while_loading(self):
        with tempfile.TemporaryDirectory(prefix="cube3d-e2e-") as tmp:
            # A wider random-weight model than the demo, so that loading takes long enough
            # (about a second) to be seen; the server listens before it loads.
            model_path = write_slow_model(tmp)
            # Reconnect quickly: the default backoff (1 s) could sleep through the whole load.
            server = ServerProcess(["--set", f"model.config={model_path}"], tmp,
                                   channel_options=[("grpc.initial_reconnect_backoff_ms", 20),
                                                    ("grpc.min_reconnect_backoff_ms", 20),
                                                    ("grpc.max_reconnect_backoff_ms", 50)])
            # Launched, not started: this test watches the health states until SERVING itself.
            server.launch()
            try:
                seen = []
                deadline = time.monotonic() + STARTUP_TIMEOUT_S
                while time.monotonic() < deadline and server.proc.poll() is None:
                    status = server.health(timeout=1)
                    if not seen or seen[-1] != status:
                        seen.append(status)
                    if status == "SERVING":
                        break
                    time.sleep(0.02)
                self.assertEqual(seen[-1:], ["SERVING"], server.log_tail())
                self.assertIn("NOT_SERVING", seen, f"health states seen: {seen}")
            finally:
                server.stop()
                server.kill()


class TlsTest(unittest.TestCase):
    """tls.cert_file / tls.key_file: the port speaks TLS only."""

    def test_tls_port(self):
        with tempfile.TemporaryDirectory(prefix="cube3d-e2e-tls-") as tmp:
            cert = os.path.join(tmp, "cert.pem")
            key = os.path.join(tmp, "key.pem")
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                            "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=localhost",
                            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                           check=True, capture_output=True, timeout=60)
            server = TlsServerProcess(cert, key, tmp)
            # Launched, not started: the test waits for SERVING over its own TLS channel.
            server.launch()
            port, proc = server.port, server.proc

            def log_text():
                return server.log()[-4000:]

            with open(cert, "rb") as f:
                credentials = grpc.ssl_channel_credentials(root_certificates=f.read())
            secure = grpc.secure_channel(f"localhost:{port}", credentials,
                                         options=CHANNEL_OPTIONS)
            plain = grpc.insecure_channel(f"{HOST}:{port}", options=CHANNEL_OPTIONS)
            try:
                health = health_grpc.HealthStub(secure)
                deadline = time.monotonic() + STARTUP_TIMEOUT_S
                serving = False
                while time.monotonic() < deadline and proc.poll() is None and not serving:
                    try:
                        serving = health.Check(health_pb.HealthCheckRequest(), timeout=2).status \
                            == health_pb.HealthCheckResponse.SERVING
                    except grpc.RpcError:
                        time.sleep(0.2)
                self.assertTrue(serving, log_text())
                response = pb_grpc.MeshServiceStub(secure).GenerateMesh(
                    make_request("a lamp"), timeout=120)
                self.assertGreater(response.face_count, 0)
                code, _ = rpc_code(lambda: pb_grpc.MeshServiceStub(plain).GenerateMesh(
                    make_request("a lamp"), timeout=10))
                self.assertEqual(code, grpc.StatusCode.UNAVAILABLE)
            finally:
                secure.close()
                plain.close()
                server.terminate()
                try:
                    self.assertEqual(proc.wait(timeout=STOP_TIMEOUT_S), 0, log_text())
                finally:
                    server.kill()  # after a timeout: SIGKILL


if __name__ == "__main__":
    unittest.main()
