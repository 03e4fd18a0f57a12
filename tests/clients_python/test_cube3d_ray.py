"""cube3d-ray (clients/python), its parts without a Ray cluster or a server: the request rows and
their stable names, the prompt readers (text, JSON lines, Parquet), the plan that makes a rerun
resume, the write-once output folder, the mesh files read back, the hand-written health messages,
an actor's retries and reuse against a stand-in for GenerateMesh, the command line's usage
errors, and mypy --strict over the installed package. Run by ctest (tests/CMakeLists.txt:
clients.ray_batch); e2e.ray_batch runs the whole pipeline on Ray."""
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import package

setUpModule = package.install
tearDownModule = package.cleanup


def tiny_glb(faces=2, vertices=4):
    """A GLB whose JSON says `vertices` positions and `faces` triangles (no real buffers: the
    counts are what meshfiles reads)."""
    document = {"asset": {"version": "2.0"},
                "accessors": [{"count": vertices, "type": "VEC3", "componentType": 5126},
                              {"count": 3 * faces, "type": "SCALAR", "componentType": 5125}],
                "meshes": [{"primitives": [{"attributes": {"POSITION": 0}, "indices": 1}]}]}
    chunk = json.dumps(document).encode()
    chunk += b" " * (-len(chunk) % 4)
    body = struct.pack("<II", len(chunk), 0x4E4F534A) + chunk
    return struct.pack("<4sII", b"glTF", 2, 12 + len(body)) + body


class RequestTest(unittest.TestCase):
    def setUp(self):
        from cube3d_ray import requests
        self.r = requests

    def test_the_name_is_stable(self):
        # The documented rule, pinned: a change here renames every catalogue's files.
        request = self.r.MeshRequest("a wooden chair", seed=7, resolution_base=6)
        self.assertEqual(request.canonical_json("demo"),
                         '{"bounding_box":null,"format":"glb","guidance_scale":null,'
                         '"mesh_profile":null,"model":"demo","prompt":"a wooden chair",'
                         '"resolution_base":6,"seed":7,"target_face_count":null,"top_p":null,'
                         '"v":1}')
        self.assertEqual(request.key("demo"), KEY_OF_CHAIR)
        self.assertEqual(request.file_name("demo"), KEY_OF_CHAIR[:20] + ".glb")
        self.assertNotEqual(request.key("cube3d-v0.5"), request.key("demo"))
        back = self.r.MeshRequest.from_canonical_json(request.canonical_json("demo"))
        self.assertEqual(back, ("demo", request))

    def test_float32_values_from_any_source_are_one_request(self):
        import numpy as np
        a = self.r.request_from_mapping({"prompt": "x", "topP": 0.9}, self.r.RequestDefaults())
        b = self.r.request_from_mapping({"prompt": "x", "top_p": float(np.float32(0.9))},
                                        self.r.RequestDefaults())
        self.assertEqual(a.key("m"), b.key("m"))

    def test_defaults_fill_what_a_row_leaves_out(self):
        d = self.r.RequestDefaults(seed=3, resolution_base=4, format="obj")
        row = self.r.request_from_mapping({"prompt": " a boat ", "seed": 9}, d)
        self.assertEqual((row.prompt, row.seed, row.resolution_base, row.format),
                         ("a boat", 9, 4, "obj"))
        same = self.r.request_from_mapping(
            {"prompt": "a boat", "seed": 9, "resolution": 4, "format": "obj"},
            self.r.RequestDefaults())
        self.assertEqual(row.key("m"), same.key("m"))
        box = self.r.request_from_mapping({"prompt": "p", "bbox": {"x": 1, "y": 2, "z": 1}}, d)
        self.assertEqual(box.bounding_box, (1.0, 2.0, 1.0))

    def test_bad_rows_say_why(self):
        d = self.r.RequestDefaults()
        for row, why in [({"prompt": "p", "sede": 1}, "unknown field 'sede'"),
                         ({"seed": 1}, "prompt is missing"),
                         ({"prompt": "  "}, "prompt is empty"),
                         ({"prompt": "p", "seed": -1}, "seed must be in"),
                         ({"prompt": "p", "seed": 1.5}, "whole number"),
                         ({"prompt": "p", "top_p": 0}, "top_p must be in (0, 1]"),
                         ({"prompt": "p", "resolution": 12}, "resolution must be in [1, 9]"),
                         ({"prompt": "p", "bbox": [1, 0, 1]}, "positive"),
                         ({"prompt": "p", "bbox": {"x": 1, "y": 1}}, "bounding_box.z"),
                         ({"prompt": "p", "format": "stl"}, "format must be one of"),
                         ({"prompt": "p", "mesh_profile": "unity"}, "none or roblox"),
                         ({"prompt": "p", "seed": 1, "seed_": 2}, "unknown field"),
                         ({"prompt": "p", "topP": 0.5, "top_p": 0.5}, "given twice")]:
            with self.assertRaises(self.r.RequestError, msg=row) as caught:
                self.r.request_from_mapping(row, d)
            self.assertIn(why, str(caught.exception), row)


# sha256 of the canonical JSON above (printf %s TEXT | sha256sum).
KEY_OF_CHAIR = "633bfcc6a0625f5f6d93ac19a1d0d1a82188ee53e32b510d0890fa83ba69e41b"


class SourcesTest(unittest.TestCase):
    def setUp(self):
        from cube3d_ray import requests, sources
        self.s, self.d = sources, requests.RequestDefaults(resolution_base=4)
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def path(self, name, text):
        p = os.path.join(self.tmp.name, name)
        with open(p, "w") as f:
            f.write(text)
        return p

    def test_text_file_as_cube3d_generate_reads_it(self):
        p = self.path("prompts.txt", "# catalogue\na chair\n\n  a boat  \r\n"
                      '{"prompt": "a lamp", "seed": 4, "resolutionBase": 5}\n{"prompt": \n')
        out = self.s.read_sources(p, self.d)
        self.assertEqual([s.line for s in out], [2, 4, 5, 6])
        self.assertEqual([s.request.prompt for s in out[:3]], ["a chair", "a boat", "a lamp"])
        self.assertEqual((out[2].request.seed, out[2].request.resolution_base), (4, 5))
        self.assertEqual(out[0].request.resolution_base, 4)
        self.assertIsNone(out[3].request)
        self.assertIn("malformed JSON", out[3].error)

    def test_json_lines(self):
        p = self.path("p.jsonl", '{"prompt": "a", "bbox": [1, 1, 2]}\n\n# not a comment\n')
        out = self.s.read_sources(p, self.d)
        self.assertEqual(out[0].request.bounding_box, (1.0, 1.0, 2.0))
        self.assertIn("malformed JSON", out[1].error)

    def test_parquet(self):
        import pyarrow as pa
        import pyarrow.parquet as pq
        p = os.path.join(self.tmp.name, "p.parquet")
        pq.write_table(pa.table({"prompt": ["a", "b", None], "seed": [1, None, 3],
                                 "bounding_box": [[1.0, 2.0, 1.0], None, None]}), p)
        out = self.s.read_sources(p, self.d)
        self.assertEqual([s.line for s in out], [1, 2, 3])
        self.assertEqual((out[0].request.seed, out[0].request.bounding_box), (1, (1.0, 2.0, 1.0)))
        self.assertIsNone(out[1].request.seed)
        self.assertEqual(out[2].error, "prompt is missing")


class PlanTest(unittest.TestCase):
    def setUp(self):
        from cube3d_ray import manifest, requests, sources
        self.m = manifest
        d = requests.RequestDefaults()
        self.sources = sources.sources_from_prompts(
            ["a", "b", "a", "c", {"prompt": "d", "seed": "x"}, "e"], d)
        self.key = {s.request.prompt: s.request.key("demo") for s in self.sources if s.request}
        self.name = {s.request.prompt: s.request.file_name("demo")
                     for s in self.sources if s.request}

    def row(self, prompt, status, code=None):
        return {"key": self.key[prompt], "status": status, "error_code": code,
                "finished_at": None, "model": "demo", "model_digest": None}

    def test_a_first_run_does_each_request_once(self):
        plan = self.m.plan(self.sources, "demo", {}, set())
        self.assertEqual(len(plan.todo), 5)
        self.assertEqual(plan.duplicates, 1)
        invalid = [t for t in plan.todo if t["invalid"]]
        self.assertEqual(len(invalid), 1)
        self.assertIn("seed must be a whole number", invalid[0]["invalid"])
        self.assertIsNone(invalid[0]["file"])
        self.assertEqual(plan.table.num_rows, 5)

    def test_a_rerun_skips_what_is_done(self):
        rows = {self.key["a"]: self.row("a", "ok"), self.key["b"]: self.row("b", "ok"),
                self.key["c"]: self.row("c", "error", "INVALID_ARGUMENT"),
                self.key["e"]: self.row("e", "error", "UNAVAILABLE")}
        files = {self.name["a"]}  # b's file is gone: made again
        plan = self.m.plan(self.sources, "demo", rows, files)
        todo = {t["key"] for t in plan.todo}
        self.assertEqual((plan.done, plan.failed_before, plan.missing_files), (1, 1, 1))
        self.assertEqual(todo & set(self.key.values()), {self.key["b"], self.key["e"]})
        retried = self.m.plan(self.sources, "demo", rows, files, retry_failed=True)
        self.assertIn(self.key["c"], {t["key"] for t in retried.todo})

    def test_latest_row_wins(self):
        import datetime as dt
        t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
        rows = [{**self.row("a", "error", "UNAVAILABLE"), "finished_at": t0},
                {**self.row("a", "ok"), "finished_at": t0 + dt.timedelta(seconds=1)}]
        self.assertEqual(self.m.latest(self.m.SCHEMA.empty_table().from_pylist(
            [dict.fromkeys(self.m.SCHEMA.names) | r for r in rows], schema=self.m.SCHEMA)
        )[self.key["a"]]["status"], "ok")

    def test_blocks(self):
        plan = self.m.plan(self.sources, "demo", {}, set())
        self.assertEqual([b.num_rows for b in self.m.batches(plan.table, 2)], [2, 2, 1])


class OutputTest(unittest.TestCase):
    def test_each_file_is_written_once(self):
        from cube3d_ray.output import OutputLocation
        with tempfile.TemporaryDirectory() as tmp:
            out = OutputLocation.of(os.path.join(tmp, "catalog"))
            out.make()
            name = "0123456789abcdef0123.glb"
            self.assertTrue(out.write_once(name, b"first"))
            self.assertFalse(out.write_once(name, b"second"))
            self.assertEqual(out.read(name), b"first")
            leftover = os.path.join(out.path, name + ".tmp.123.ab")
            open(leftover, "wb").close()
            open(os.path.join(out.path, "notes.tmp.1"), "wb").close()  # not ours: kept
            self.assertEqual(out.names(), {name, name + ".tmp.123.ab", "notes.tmp.1"})
            self.assertEqual(out.remove_leftovers(), 1)
            self.assertEqual(out.names(), {name, "notes.tmp.1"})
            uri = OutputLocation.of("file://" + os.path.join(tmp, "catalog"))
            self.assertTrue(uri.has(name))


class MeshFilesTest(unittest.TestCase):
    def test_counts(self):
        from cube3d_ray import meshfiles
        self.assertEqual(meshfiles.counts(tiny_glb(5, 7), "glb"), (7, 5))
        self.assertEqual(meshfiles.counts(b"v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n", "obj"), (3, 1))
        ply = b"ply\nformat binary_little_endian 1.0\nelement vertex 8\nelement face 12\n"
        self.assertEqual(meshfiles.counts(ply, "ply"), (8, 12))
        self.assertEqual(meshfiles.counts(b"C3DM" + bytes(4) + struct.pack("<II", 9, 4), "c3dm"),
                         (9, 4))
        with self.assertRaises(ValueError):
            meshfiles.counts(b"nope", "glb")


class HealthMessagesTest(unittest.TestCase):
    def test_encoding(self):
        from cube3d_ray import rpc
        self.assertEqual(rpc.encode_health_request(""), b"")
        self.assertEqual(rpc.encode_health_request("cube3d.v1.MeshService"),
                         b"\x0a\x15cube3d.v1.MeshService")
        self.assertEqual(rpc.decode_health_response(b""), "UNKNOWN")
        self.assertEqual(rpc.decode_health_response(b"\x08\x01"), "SERVING")
        self.assertEqual(rpc.decode_health_response(b"\x12\x02ab\x08\x02"), "NOT_SERVING")

    def test_request_message(self):
        from cube3d_ray import rpc
        from cube3d_ray.requests import MeshRequest
        m = rpc.to_proto(MeshRequest("p", seed=2**64 - 1, top_p=0.5, bounding_box=(1, 2, 3),
                                     resolution_base=4, format="ply", mesh_profile="roblox"),
                         "id-1", "batch")
        self.assertEqual((m.seed, m.top_p, m.bounding_box.y, m.resolution_base, m.request_id),
                         (2**64 - 1, 0.5, 2.0, 4, "id-1"))
        self.assertFalse(m.HasField("guidance_scale"))
        self.assertEqual(m.format, rpc.pb.MESH_FORMAT_PLY)
        self.assertEqual(m.priority, rpc.pb.PRIORITY_BATCH)


def rpc_error(code_name):
    import grpc

    class Error(grpc.RpcError):
        def code(self):
            return getattr(grpc.StatusCode, code_name)

        def details(self):
            return f"a {code_name} from the stand-in"
    return Error()


class WorkerTest(unittest.TestCase):
    """MeshWorker against a stand-in for GenerateMesh (a fleet address no call reaches)."""

    def setUp(self):
        from cube3d_ray import manifest, requests, sources
        from cube3d_ray.output import OutputLocation
        from cube3d_ray.server import ServerSpec
        from cube3d_ray.worker import MeshWorker, WorkerSettings
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.out = OutputLocation.of(self.tmp.name)
        self.settings = WorkerSettings(server=ServerSpec(address="127.0.0.1:9"), output=self.out,
                                       run_id="r1", max_attempts=3, backoff_s=0.001)
        self.MeshWorker, self.manifest = MeshWorker, manifest
        src = sources.sources_from_prompts(["a", "b", {"prompt": "c", "seed": -1}],
                                           requests.RequestDefaults())
        self.todo = manifest.plan(src, "demo", {}, set()).table
        self.calls = []

    def worker(self, answers, expected_digest=None):
        import dataclasses
        w = self.MeshWorker(dataclasses.replace(self.settings, expected_digest=expected_digest))
        self.addCleanup(w.pool.shutdown)
        answers = {prompt: list(queue) for prompt, queue in answers.items()}

        def call(message, timeout=None, metadata=None):
            self.calls.append(message.prompt)
            answer = answers[message.prompt].pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer
        w.call = call
        return w

    def response(self, digest="d1"):
        from cube3d_ray import rpc
        r = rpc.pb.GenerateMeshResponse(format=rpc.pb.MESH_FORMAT_GLB, encoded=tiny_glb(),
                                        vertex_count=4, face_count=2, request_id="x")
        r.effective.weights_digest = digest
        r.effective.model = "demo"
        r.effective.resolution_base = 4
        r.timings.total_ms = 12.5
        return r

    def test_retries_then_ok_and_records_every_row(self):
        w = self.worker({"a": [rpc_error("UNAVAILABLE"), rpc_error("RESOURCE_EXHAUSTED"),
                               self.response()], "b": [rpc_error("INVALID_ARGUMENT")]})
        rows = w(self.todo.slice(0, 2)).to_pylist()
        self.assertEqual(rows[0]["status"], "ok")
        self.assertEqual((rows[0]["attempts"], rows[0]["faces"], rows[0]["server_ms"]),
                         (3, 2, 12.5))
        self.assertEqual(rows[0]["model_digest"], "d1")
        self.assertTrue(self.out.has(rows[0]["file"]))
        self.assertEqual((rows[1]["status"], rows[1]["attempts"], rows[1]["error_code"]),
                         ("error", 1, "INVALID_ARGUMENT"))
        self.assertFalse(self.out.has(rows[1]["file"]))
        invalid = w(self.todo.slice(2, 1)).to_pylist()[0]
        self.assertEqual((invalid["status"], invalid["error_code"]), ("error", "INVALID_ARGUMENT"))
        self.assertEqual(len(self.calls), 4)  # the invalid row was never sent

    def test_gives_up_after_max_attempts(self):
        w = self.worker({"a": [rpc_error("DEADLINE_EXCEEDED")] * 3})
        row = w(self.todo.slice(0, 1)).to_pylist()[0]
        self.assertEqual((row["status"], row["attempts"], row["error_code"]),
                         ("error", 3, "DEADLINE_EXCEEDED"))

    def test_a_file_already_written_is_not_sent_again(self):
        first = self.todo.slice(0, 1).to_pylist()[0]
        self.out.write_once(first["file"], tiny_glb(9, 11))
        w = self.worker({})
        row = w(self.todo.slice(0, 1)).to_pylist()[0]
        self.assertEqual((row["status"], row["reused"], row["faces"], row["vertices"]),
                         ("ok", True, 9, 11))
        self.assertEqual(self.calls, [])

    def test_another_model_under_the_same_tag_stops_the_run(self):
        from cube3d_ray.worker import ModelMismatch
        w = self.worker({"a": [self.response(digest="d2")]}, expected_digest="d1")
        with self.assertRaises(ModelMismatch):
            w(self.todo.slice(0, 1))


class CommandLineTest(unittest.TestCase):
    def run_cli(self, *args):
        return subprocess.run([sys.executable, "-m", "cube3d_ray", *args], capture_output=True,
                              text=True, timeout=120)

    def test_usage_errors_exit_2(self):
        for args, says in [(["--prompts", "p", "--out", "o"], "give a server binary"),
                           (["--prompts", "p", "--out", "o", "--address", "a:1",
                             "--binary", "/bin/true", "--config", "c"], "not both"),
                           (["--prompts", "p", "--out", "o", "--address", "a:1",
                             "--concurrency", "3,2"], "MIN <= MAX"),
                           (["--prompts", "p", "--out", "o", "--address", "a:1",
                             "--top-p", "2"], "top_p must be in"),
                           (["--prompts", "/nonexistent/p.txt", "--out", tempfile.gettempdir()
                             + "/cube3d-ray-cli", "--address", "a:1"], "p.txt")]:
            out = self.run_cli(*args)
            self.assertEqual(out.returncode, 2, out.stderr)
            self.assertIn(says, out.stderr)

    def test_a_model_mismatch_is_found_inside_rays_wrapping(self):
        from cube3d_ray.cli import model_mismatch
        from cube3d_ray.worker import ModelMismatch
        try:
            try:
                raise ModelMismatch("other weights")
            except ModelMismatch as inner:
                raise RuntimeError("UDF failed to process a data block") from inner
        except RuntimeError as wrapped:
            self.assertEqual(model_mismatch(wrapped), "other weights")
        text = "RayTaskError\ncube3d_ray.worker.ModelMismatch: the server's model 'demo' ..."
        self.assertEqual(model_mismatch(RuntimeError(text)), "the server's model 'demo' ...")
        self.assertIsNone(model_mismatch(RuntimeError("something else")))

    def test_help(self):
        out = self.run_cli("--help")
        self.assertEqual(out.returncode, 0)
        self.assertIn("--concurrency", out.stdout)


class TypesTest(unittest.TestCase):
    def test_mypy_strict(self):
        import cube3d_ray
        folder = os.path.dirname(cube3d_ray.__file__)
        out = subprocess.run([sys.executable, "-m", "mypy", "--config-file",
                              os.path.join(package.PACKAGE_DIR, "pyproject.toml"),
                              "--cache-dir", os.path.join(tempfile.gettempdir(),
                                                          "cube3d-ray-mypy-cache"), folder],
                             capture_output=True, text=True, timeout=300)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)


if __name__ == "__main__":
    unittest.main()
