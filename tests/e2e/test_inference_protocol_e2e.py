"""The Open Inference Protocol (KServe v2 / Triton) against a demo server, with the real clients:
tritonclient (HTTP with JSON and with binary tensor data, gRPC unary and streaming) and
perf_analyzer (the tritonclient wheel's binary, HTTP and gRPC, bounded runs). Each inference's
MESH is a GLB whose positions and indices are exactly its VERTICES and FACES; health, metadata,
configuration, statistics and the repository index answer as Triton's would; a batch fans out
and comes back padded; and each bad input answers the protocol's error naming what is wrong, on
both doors, with the server still serving after.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import grpc
import numpy as np
import pygltflib
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from tritonclient.utils import InferenceServerException

import server_process as e2e
from server_process import HOST, RES, ServerTestCase

setUpModule = e2e.setUpModule
tearDownModule = e2e.tearDownModule

MODEL = "demo"  # the demo config's model (models/demo.yaml)
PERF_ANALYZER = os.path.join(os.path.dirname(sys.executable), "perf_analyzer")


def glb_arrays(data):
    """(positions [N, 3] float32, triangles [M, 3]) of a GLB's one mesh primitive."""
    gltf = pygltflib.GLTF2.load_from_bytes(bytes(data))
    blob = gltf.binary_blob()
    primitive = gltf.meshes[0].primitives[0]

    def read(accessor_index, dtype, width):
        accessor = gltf.accessors[accessor_index]
        view = gltf.bufferViews[accessor.bufferView]
        start = (view.byteOffset or 0) + (accessor.byteOffset or 0)
        count = accessor.count * width
        return np.frombuffer(blob, dtype=dtype, count=count, offset=start).reshape(-1, width)

    positions = read(primitive.attributes.POSITION, np.float32, 3)
    index_type = {5123: np.uint16, 5125: np.uint32}[gltf.accessors[primitive.indices].componentType]
    triangles = read(primitive.indices, index_type, 1).reshape(-1, 3)
    return positions, triangles


def tensor_of(module, name, datatype, data, binary=True):
    """An input of `data`; over HTTP as binary tensor data or, binary=False, as JSON."""
    tensor = module.InferInput(name, list(data.shape), datatype)
    if module is thttp:
        tensor.set_data_from_numpy(data, binary_data=binary)
    else:
        tensor.set_data_from_numpy(data)
    return tensor


def prompt_input(module, prompts, binary=True):
    data = np.array([[p.encode()] for p in prompts], dtype=np.object_)
    return tensor_of(module, "PROMPT", "BYTES", data, binary)


def inputs(module, prompts, seed=1, res=RES, fmt=None, binary=True):
    tensors = [prompt_input(module, prompts, binary),
               tensor_of(module, "SEED", "INT64", np.array([[seed]], dtype=np.int64), binary),
               tensor_of(module, "RESOLUTION_BASE", "INT32", np.array([[res]], dtype=np.int32),
                         binary)]
    if fmt:
        tensors.append(tensor_of(module, "FORMAT", "BYTES",
                                 np.array([[fmt.encode()]], dtype=np.object_), binary))
    return tensors


class InferenceProtocolTest(ServerTestCase):
    HTTP = True
    CACHE = True

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.http = thttp.InferenceServerClient(f"{HOST}:{cls.server.http_port}")
        cls.grpc = tgrpc.InferenceServerClient(f"{HOST}:{cls.server.port}")
        cls.addClassCleanup(cls.http.close)
        cls.addClassCleanup(cls.grpc.close)

    def assert_arrays_are_the_glb(self, mesh_file, vertices, faces):
        self.assertEqual(bytes(mesh_file[:4]), b"glTF")
        positions, triangles = glb_arrays(mesh_file)
        np.testing.assert_array_equal(vertices, positions)
        np.testing.assert_array_equal(faces, triangles.astype(np.int32))
        self.assertGreater(len(faces), 0)

    def refused_http(self, body, status, needle, headers=None, path=None):
        """A raw POST to the infer route; its status and the protocol's error body."""
        status_seen, _, answer = e2e.http_call(
            self.server.http_port, "POST", path or f"/v2/models/{MODEL}/infer", body=body,
            headers={"Content-Type": "application/json", **(headers or {})}, timeout=60)
        self.assertEqual(status_seen, status, answer)
        error = json.loads(answer)
        self.assertEqual(list(error), ["error"], answer)
        self.assertIn(needle, error["error"])
        return error["error"]

    # -- health, metadata, configuration, statistics --

    def test_health_metadata_config_and_stats_on_both_doors(self):
        for client in (self.http, self.grpc):
            self.assertTrue(client.is_server_live())
            self.assertTrue(client.is_server_ready())
            self.assertTrue(client.is_model_ready(MODEL))
            self.assertTrue(client.is_model_ready(MODEL, "1"))
        self.assertEqual(self.http.get_server_metadata()["name"], "cube3d-server")
        self.assertIn("binary_tensor_data", self.http.get_server_metadata()["extensions"])
        self.assertEqual(self.grpc.get_server_metadata().name, "cube3d-server")

        metadata = self.http.get_model_metadata(MODEL)
        self.assertEqual(metadata["versions"], ["1"])
        self.assertEqual([i["name"] for i in metadata["inputs"]],
                         ["PROMPT", "SEED", "GUIDANCE_SCALE", "TOP_P", "RESOLUTION_BASE", "FORMAT"])
        self.assertEqual(metadata["outputs"][0], {"name": "MESH", "datatype": "BYTES",
                                                  "shape": [-1, 1]})
        grpc_metadata = self.grpc.get_model_metadata(MODEL, as_json=True)
        self.assertEqual([o["name"] for o in grpc_metadata["outputs"]],
                         ["MESH", "VERTICES", "FACES"])

        config = self.http.get_model_config(MODEL)
        self.assertEqual(config["max_batch_size"], 8)  # the demo's largest bucket
        self.assertEqual(config["input"][0], {"name": "PROMPT", "data_type": "TYPE_STRING",
                                              "dims": [1], "optional": False})
        self.assertFalse(config["model_transaction_policy"]["decoupled"])
        grpc_config = self.grpc.get_model_config(MODEL).config
        self.assertEqual(grpc_config.max_batch_size, 8)
        self.assertEqual(list(grpc_config.dynamic_batching.preferred_batch_size), [1, 2, 4, 8])

        self.http.infer(MODEL, inputs(thttp, ["a stool"]))
        stats = self.http.get_inference_statistics(MODEL)["model_stats"][0]
        self.assertEqual((stats["name"], stats["version"]), (MODEL, "1"))
        self.assertGreaterEqual(stats["inference_stats"]["success"]["count"], 1)
        grpc_stats = self.grpc.get_inference_statistics(MODEL).model_stats[0]
        self.assertGreaterEqual(grpc_stats.inference_stats.success.count, 1)
        self.assertEqual(self.http.get_inference_statistics()["model_stats"][0]["name"], MODEL)
        index = self.http.get_model_repository_index()
        self.assertEqual(index, [{"name": MODEL, "version": "1", "state": "READY"}])
        self.assertEqual(self.grpc.get_model_repository_index().models[0].state, "READY")

        # A model the server does not serve: not found, naming the one it does.
        for call in (lambda: self.http.get_model_metadata("other"),
                     lambda: self.grpc.get_model_config("other"),
                     lambda: self.grpc.is_model_ready("other")):
            with self.assertRaises(InferenceServerException) as caught:
                call()
            self.assertIn("serves 'demo'", str(caught.exception))
        self.assertFalse(self.http.is_model_ready(MODEL, "2"))
        status, _, body = e2e.http_call(self.server.http_port, "GET",
                                     f"/v2/models/{MODEL}/versions/2/ready")
        self.assertEqual(status, 404)
        self.assertIn("its one version is 1", json.loads(body)["error"])

    # -- inference --

    def test_http_binary_mesh_with_its_vertices_and_faces(self):
        outputs = [thttp.InferRequestedOutput(name) for name in ("MESH", "VERTICES", "FACES")]
        result = self.http.infer(MODEL, inputs(thttp, ["a wooden chair"]), outputs=outputs,
                                 request_id="chair-1")
        mesh = result.as_numpy("MESH")
        self.assertEqual(mesh.shape, (1, 1))
        vertices, faces = result.as_numpy("VERTICES"), result.as_numpy("FACES")
        self.assertEqual(vertices.shape[0], 1)
        self.assert_arrays_are_the_glb(mesh[0, 0], vertices[0], faces[0])
        response = result.get_response()
        self.assertEqual(response["id"], "chair-1")
        self.assertEqual(response["model_name"], MODEL)
        self.assertEqual(int(response["parameters"]["vertex_count"]), len(vertices[0]))

    def test_http_json_data_both_ways(self):
        # JSON in (binary_data False on the client's side), JSON out: MESH as OBJ text.
        tensors = inputs(thttp, ["a round table"], fmt="obj", binary=False)
        outputs = [thttp.InferRequestedOutput(n, binary_data=False)
                   for n in ("MESH", "VERTICES", "FACES")]
        result = self.http.infer(MODEL, tensors, outputs=outputs)
        obj = result.as_numpy("MESH")[0, 0]
        obj = obj.decode() if isinstance(obj, bytes) else obj
        vertex_lines = [line for line in obj.splitlines() if line.startswith("v ")]
        face_lines = [line for line in obj.splitlines() if line.startswith("f ")]
        self.assertEqual(len(vertex_lines), result.as_numpy("VERTICES").shape[1])
        self.assertEqual(len(face_lines), result.as_numpy("FACES").shape[1])
        # A GLB cannot go as JSON text: refused before any work, saying how to ask.
        with self.assertRaises(InferenceServerException) as caught:
            self.http.infer(MODEL, inputs(thttp, ["a round table"]),
                            outputs=[thttp.InferRequestedOutput("MESH", binary_data=False)])
        self.assertIn("output MESH: a glb file is binary", str(caught.exception))
        self.assertIn("binary_data", str(caught.exception))

    def test_a_batch_fans_out_and_comes_back_padded(self):
        outputs = [thttp.InferRequestedOutput(name) for name in ("MESH", "VERTICES", "FACES")]
        prompts = ["a chair", "a tall lamp", "a boat"]
        before = self.http.get_inference_statistics(MODEL)["model_stats"][0]
        result = self.http.infer(MODEL, inputs(thttp, prompts), outputs=outputs)
        # One request of three inferences in the statistics, as Triton counts a batch (a prompt
        # the cache answered is no inference).
        after = self.http.get_inference_statistics(MODEL)["model_stats"][0]
        self.assertEqual(after["inference_stats"]["success"]["count"],
                         before["inference_stats"]["success"]["count"] + 1)
        statuses = result.get_response()["parameters"]["cache_status"].split(",")
        self.assertEqual(len(statuses), 3)
        self.assertEqual(after["inference_count"],
                         before["inference_count"] + sum(s != "hit" for s in statuses))
        meshes = result.as_numpy("MESH")
        self.assertEqual(meshes.shape, (3, 1))
        counts = result.get_response()["parameters"]["vertex_count"].split(",")
        faces_counts = result.get_response()["parameters"]["face_count"].split(",")
        vertices, faces = result.as_numpy("VERTICES"), result.as_numpy("FACES")
        self.assertEqual(vertices.shape[:1] + vertices.shape[2:], (3, 3))
        for i in range(3):
            n, m = int(counts[i]), int(faces_counts[i])
            self.assert_arrays_are_the_glb(meshes[i, 0], vertices[i, :n], faces[i, :m])
            self.assertTrue(np.isnan(vertices[i, n:]).all())
            self.assertTrue((faces[i, m:] == -1).all())
        # Each prompt is the same mesh as when asked alone (gRPC this time).
        alone = self.grpc.infer(MODEL, inputs(tgrpc, ["a tall lamp"]))
        self.assertEqual(e2e.mesh_without_request_id(bytes(alone.as_numpy("MESH")[0, 0])),
                         e2e.mesh_without_request_id(bytes(meshes[1, 0])))

    def test_grpc_unary_and_parameters(self):
        result = self.grpc.infer(MODEL, [prompt_input(tgrpc, ["a cup"])],
                                 outputs=[tgrpc.InferRequestedOutput("MESH"),
                                          tgrpc.InferRequestedOutput("FACES")],
                                 parameters={"seed": 3, "resolution_base": RES,
                                             "format": "ply"})
        self.assertEqual(bytes(result.as_numpy("MESH")[0, 0][:3]), b"ply")
        self.assertEqual(result.as_numpy("FACES").shape[2], 3)
        params = result.get_response().parameters
        self.assertIn(params["cache_status"].string_param, ("miss", "hit", "coalesced"))

    def test_grpc_stream_answers_each_request_and_progress_when_asked(self):
        responses, done = [], threading.Event()

        def callback(result, error):
            responses.append((result, error))
            finals = [r for r, e in responses
                      if e is not None or r.get_response().parameters.get(
                          "triton_final_response") is None or
                      r.get_response().parameters["triton_final_response"].bool_param]
            if len(finals) >= 3:
                done.set()

        client = tgrpc.InferenceServerClient(f"{HOST}:{self.server.port}")
        client.start_stream(callback=callback)
        try:
            client.async_stream_infer(MODEL, inputs(tgrpc, ["a desk"], seed=11), request_id="a",
                                      parameters={"progress": True})
            client.async_stream_infer(MODEL, inputs(tgrpc, ["a bench"], seed=12), request_id="b")
            client.async_stream_infer(MODEL, [prompt_input(tgrpc, ["x"])], request_id="bad",
                                      parameters={"resolution_base": 99})
            self.assertTrue(done.wait(120), f"{len(responses)} responses")
        finally:
            client.stop_stream()
            client.close()
        by_id = {}
        for result, error in responses:
            if error is not None:
                by_id.setdefault("error", []).append(str(error))
                continue
            by_id.setdefault(result.get_response().id, []).append(result)
        # Progress first (no outputs, not final), then the mesh marked final.
        progress = by_id["a"][:-1]
        self.assertGreaterEqual(len(progress), 1)
        for p in progress:
            params = p.get_response().parameters
            self.assertFalse(params["triton_final_response"].bool_param)
            self.assertIn(params["stage"].string_param,
                          ("STAGE_QUEUED", "STAGE_TEXT_ENCODING", "STAGE_DECODING",
                           "STAGE_MESHING", "STAGE_DONE"))
            self.assertIsNone(p.as_numpy("MESH"))
        final = by_id["a"][-1]
        self.assertTrue(final.get_response().parameters["triton_final_response"].bool_param)
        self.assertEqual(bytes(final.as_numpy("MESH")[0, 0][:4]), b"glTF")
        # Without progress asked: one response, as a Triton client of this model expects.
        self.assertEqual(len(by_id["b"]), 1)
        self.assertEqual(bytes(by_id["b"][0].as_numpy("MESH")[0, 0][:4]), b"glTF")
        # A bad request is its own error response, and the stream went on.
        self.assertEqual(len(by_id["error"]), 1)
        self.assertIn("INVALID_ARGUMENT", by_id["error"][0])
        self.assertIn("resolution_base 99", by_id["error"][0])

    def test_a_stream_the_client_cancels_stops_its_work(self):
        before = e2e.metric_value(self.server.metrics(), "cube3d_requests_total",
                                  code="CANCELLED") or 0
        client = tgrpc.InferenceServerClient(f"{HOST}:{self.server.port}")
        client.start_stream(callback=lambda result, error: None)
        # Slow enough to be in flight when the stream goes: a large grid, no cache to answer it.
        for seed in (101, 102):
            client.async_stream_infer(MODEL, inputs(tgrpc, ["a tall tower"], seed=seed, res=8))
        time.sleep(1.0)
        client.stop_stream(cancel_requests=True)
        client.close()
        # Both requests' work ends CANCELLED on the server, and it serves on.
        self.wait_for_metrics(lambda s: (e2e.metric_value(s, "cube3d_requests_total",
                                                          code="CANCELLED") or 0) >= before + 2,
                              "both streamed requests cancelled", timeout=60)
        result = self.grpc.infer(MODEL, inputs(tgrpc, ["a mug after a cancel"]))
        self.assertEqual(bytes(result.as_numpy("MESH")[0, 0][:4]), b"glTF")

    # -- bad input --

    def test_each_bad_input_answers_the_protocols_error_on_both_doors(self):
        good = {"name": "PROMPT", "datatype": "BYTES", "shape": [1], "data": ["a chair"]}
        cases = [
            ({"inputs": [{"name": "PROMPT", "datatype": "FP32", "shape": [1], "data": [1.0]}]},
             "input PROMPT: datatype FP32, and the model takes BYTES"),
            ({"inputs": [{"name": "PROMPT", "datatype": "BYTES", "shape": [1, 2],
                          "data": ["a", "b"]}]}, "input PROMPT: shape [1, 2]"),
            ({"inputs": [{"name": "SEED", "datatype": "INT64", "shape": [1], "data": [1]}]},
             "input PROMPT is missing"),
            ({"inputs": [good, {"name": "COLOR", "datatype": "BYTES", "shape": [1],
                                "data": ["red"]}]}, "unknown input 'COLOR'"),
            ({"inputs": [good], "outputs": [{"name": "NORMALS"}]}, "unknown output 'NORMALS'"),
            ({"inputs": [good, {"name": "BBOX", "datatype": "FP32", "shape": [3],
                                "data": [1, 2, 1]}]}, "input BBOX: model 'demo' has no"),
            ({"inputs": [good, {"name": "GUIDANCE_SCALE", "datatype": "FP32", "shape": [1],
                                "data": [1000]}],
              "parameters": {"binary_data_output": True}},
             "input GUIDANCE_SCALE: guidance_scale must be"),
            ({"inputs": [good], "parameters": {"sead": 1}}, "unknown parameter 'sead'"),
        ]
        for body, needle in cases:
            with self.subTest(needle=needle):
                self.refused_http(body, 400, needle)
        # The binary extension's header length against the body.
        header = json.dumps({"inputs": [{"name": "PROMPT", "datatype": "BYTES", "shape": [1],
                                         "parameters": {"binary_data_size": 11}}]}).encode()
        payload = header + struct.pack("<I", 7) + b"a table"
        self.refused_http(payload, 400, "Inference-Header-Content-Length: 100000",
                          headers={"Inference-Header-Content-Length": "100000"})
        self.refused_http(payload + b"extra", 400, "5 bytes of binary data follow",
                          headers={"Inference-Header-Content-Length": str(len(header))})
        self.refused_http({"inputs": [good]}, 404, "unknown model 'nope'",
                          path="/v2/models/nope/infer")
        self.refused_http({"inputs": [good]}, 404, "has no version '7'",
                          path=f"/v2/models/{MODEL}/versions/7/infer")
        self.refused_http(b"{not json", 400, "not JSON")
        # An unknown route of the protocol answers in its shape too.
        status, _, body = e2e.http_call(self.server.http_port, "GET", "/v2/models/demo/unknown")
        self.assertEqual(status, 404)
        self.assertIn("no such path", json.loads(body)["error"])

        # gRPC: the same refusals as INVALID_ARGUMENT naming the tensor.
        with self.assertRaises(InferenceServerException) as caught:
            bad = tgrpc.InferInput("PROMPT", [1, 1], "INT32")
            bad.set_data_from_numpy(np.array([[1]], dtype=np.int32))
            self.grpc.infer(MODEL, [bad])
        self.assertIn("INVALID_ARGUMENT", str(caught.exception.status()))
        self.assertIn("input PROMPT: datatype INT32", str(caught.exception))
        with self.assertRaises(InferenceServerException) as caught:
            self.grpc.infer(MODEL, inputs(tgrpc, ["a"]), outputs=[tgrpc.InferRequestedOutput("X")])
        self.assertIn("unknown output 'X'", str(caught.exception))
        with self.assertRaises(InferenceServerException) as caught:
            self.grpc.infer("nope", inputs(tgrpc, ["a"]))
        self.assertIn("NOT_FOUND", str(caught.exception.status()))
        # Bytes that are no ModelInferRequest at all.
        channel = grpc.insecure_channel(self.server.address)
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        with self.assertRaises(grpc.RpcError) as raw:
            call(b"\xff\xff\xff", timeout=30)
        self.assertEqual(raw.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("inference.ModelInferRequest", raw.exception.details())
        # A method of the protocol this server does not have.
        missing = channel.unary_unary("/inference.GRPCInferenceService/RepositoryModelLoad")
        with self.assertRaises(grpc.RpcError) as raw:
            missing(b"", timeout=30)
        self.assertEqual(raw.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
        channel.close()
        self.assert_still_serving()

    # -- perf_analyzer --

    def perf_analyzer(self, protocol, port, *extra):
        with tempfile.TemporaryDirectory() as tmp:
            data = os.path.join(tmp, "input.json")
            with open(data, "w") as f:
                json.dump({"data": [{"PROMPT": ["a wooden chair"], "RESOLUTION_BASE": [RES],
                                     "SEED": [1]},
                                    {"PROMPT": ["a tall lamp"], "RESOLUTION_BASE": [RES],
                                     "SEED": [2]}]}, f)
            env = dict(os.environ)
            env["LD_LIBRARY_PATH"] = ":".join(filter(None, [cuda_runtime_dir(),
                                                            env.get("LD_LIBRARY_PATH")]))
            before = self.http.get_inference_statistics(MODEL)["model_stats"][0]
            # Bounded: three windows of 8 requests, any spread taken as stable.
            proc = subprocess.run(
                [PERF_ANALYZER, "-m", MODEL, "-u", f"{HOST}:{port}", "-i", protocol,
                 "--input-data", data, "--measurement-mode", "count_windows",
                 "--measurement-request-count", "8", "--stability-percentage", "1000",
                 "--max-trials", "3", *extra],
                capture_output=True, text=True, timeout=300, env=env)
            after = self.http.get_inference_statistics(MODEL)["model_stats"][0]
        report = proc.stdout + proc.stderr
        self.assertEqual(proc.returncode, 0, report)
        self.assertIn("Request count:", report)
        self.assertNotIn("error", report.lower().replace("errors: 0", ""), report)
        # No request failed on the server while it ran.
        self.assertEqual(after["inference_stats"]["fail"]["count"],
                         before["inference_stats"]["fail"]["count"], report)
        self.assertGreater(after["inference_stats"]["success"]["count"],
                           before["inference_stats"]["success"]["count"])
        return report

    def test_perf_analyzer_over_http_and_grpc(self):
        self.perf_analyzer("http", self.server.http_port)
        report = self.perf_analyzer("grpc", self.server.port, "-b", "2")
        self.assertIn("Batch size: 2", report)
        self.perf_analyzer("grpc", self.server.port, "--streaming")


def cuda_runtime_dir():
    """libcudart.so.12's folder from the nvidia-cuda-runtime-cu12 wheel (perf_analyzer links
    it, and runs without a GPU)."""
    try:
        import nvidia.cuda_runtime
        return os.path.join(list(nvidia.cuda_runtime.__path__)[0], "lib")
    except ImportError:
        return None


class StalledInferStreamsTest(ServerTestCase):
    """ModelStreamInfer streams that send nothing count against grpc.max_calls_awaiting_message
    until their first request, beside GenerateMesh calls: beyond it the stream that has waited
    longest is refused RESOURCE_EXHAUSTED, so a client that opens streams and never sends holds
    bounded memory; the streams within it stay open, and streams that send work as ever."""

    HTTP = False
    MAX_AWAITING = 3
    SERVER_ARGS = ["--set", f"grpc.max_calls_awaiting_message={MAX_AWAITING}"]

    def test_streams_that_send_nothing_are_bounded(self):
        channel = grpc.insecure_channel(self.server.address)
        self.addCleanup(channel.close)
        open_stream = channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer",
                                            request_serializer=lambda b: b,
                                            response_deserializer=lambda b: b)
        release = threading.Event()

        def nothing():
            release.wait(60)  # sends no request; half-closes once released
            return
            yield

        calls = [open_stream(nothing(), timeout=60) for _ in range(self.MAX_AWAITING + 2)]
        try:
            deadline = time.monotonic() + 20
            while sum(c.done() for c in calls) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)  # no more than the two beyond the bound
            refused = [c for c in calls if c.done()]
            self.assertEqual(len(refused), 2, [c.code() for c in refused])
            for call in refused:
                self.assertEqual(call.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
                self.assertIn(f"grpc.max_calls_awaiting_message {self.MAX_AWAITING}",
                              call.details())
            # A stream that sends (a Triton client's) is served meanwhile; its own place on the
            # list, until its request arrives, costs the oldest idle stream left.
            answers = []
            client = tgrpc.InferenceServerClient(f"{HOST}:{self.server.port}")
            client.start_stream(callback=lambda result, error: answers.append((result, error)))
            client.async_stream_infer(MODEL, inputs(tgrpc, ["a streamed lamp"]))
            deadline = time.monotonic() + 60
            while not answers and time.monotonic() < deadline:
                time.sleep(0.05)
            client.stop_stream()
            client.close()
            self.assertEqual(len(answers), 1)
            result, error = answers[0]
            self.assertIsNone(error)
            self.assertEqual(bytes(result.as_numpy("MESH")[0, 0][:4]), b"glTF")
            refused = [c for c in calls if c.done()]
            self.assertEqual(len(refused), 3, [c.code() for c in refused])
            self.assertEqual(refused[-1].code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        finally:
            release.set()
        # Those within the bound end OK when their client half-closes, having sent nothing.
        for call in calls:
            if call not in refused:
                self.assertEqual(call.code(), grpc.StatusCode.OK, call.details())


if __name__ == "__main__":
    unittest.main()
