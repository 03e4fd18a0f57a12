"""cube3d-generate end to end: the golden comparisons through --dump, the output files, the
demo model, and the errors a user gets for bad options. Run by ctest (tests/CMakeLists.txt)."""
import json
import os
import struct
import tempfile
import unittest

import numpy as np
from safetensors.numpy import load_file, save_file

from cli_test_support import assert_failed_naming, run_tool, skip_if_cuda_device

BIN = os.path.join(os.environ["CUBE3D_BIN_DIR"], "cube3d-generate")
TESTS = os.environ["CUBE3D_TEST_DATA_DIR"]
SOURCE = os.environ["CUBE3D_SOURCE_DIR"]
TOLERANCE = 1e-4


def golden(name, *parts):
    return os.path.join(TESTS, "golden", name, *parts)


def golden_args(name):
    return ["--model-config", golden(name, "model.yaml"),
            "--gpt-weights", golden(name, "shape_gpt.safetensors"),
            "--shape-weights", golden(name, "shape_tokenizer.safetensors"),
            "--text-embeddings", golden(name, "inputs.safetensors")]


def read_text(path):
    with open(path) as f:
        return f.read()


def run(args, check=True):
    return run_tool(BIN, args, timeout=300, check=check)


class GoldenDumpTest(unittest.TestCase):
    """The same comparisons as the C++ golden tests, through the command line."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def dump(self, name, *extra):
        path = os.path.join(self.tmp.name, "dump.safetensors")
        run([*golden_args(name), "--resolution-base", "4", "--dump", path, *extra])
        return load_file(path)

    def assert_close(self, ours, theirs, what):
        self.assertEqual(ours.shape, theirs.shape, what)
        err = float(np.abs(ours.astype(np.float64) - theirs.astype(np.float64)).max())
        self.assertLess(err, TOLERANCE, f"{what}: max abs error {err}")

    def test_models(self):
        for name in ("tiny_v01", "tiny_v05"):
            with self.subTest(model=name):
                expected = load_file(golden(name, "expected.safetensors"))
                cases = [
                    ((), "ids_full_cfg3", "logits_full_cfg3"),
                    (("--no-kv-cache",), "ids_full_cfg3", "logits_full_cfg3"),
                    (("--single-stream-decode", "reference"), "ids_kv_official_cfg3",
                     "logits_kv_official_cfg3"),
                    (("--guidance-scale", "0"), "ids_full_cfg0", "logits_full_cfg0"),
                ]
                for extra, ids_key, logits_key in cases:
                    d = self.dump(name, *extra)
                    np.testing.assert_array_equal(d["ids"], expected[ids_key][0],
                                                  err_msg=f"{name} {extra}")
                    self.assert_close(d["step_logits"], expected[logits_key][0],
                                      f"{name} {extra} step_logits")
                    if not extra:
                        self.assert_close(d["cond"], expected["cond"], "cond")
                        self.assert_close(d["prefill_logits"], expected["prefill_logits"],
                                          "prefill_logits")
                        self.assert_close(d["latents"], expected["latents"], "latents")
                        self.assert_close(d["grid_logits"], expected["grid_logits_res4"],
                                          "grid_logits")


class EmulatedGraphsTest(GoldenDumpTest):
    """--cuda-graphs emulate: the CUDA graph runner's capture lifecycle (warm-ups and the
    recorded step at the scratch position, replays on static buffers) with eager execution.
    Capturing must never change a token or a logit: the official outputs, in both single-stream
    modes, with and without guidance, with the logits-recording runner (--dump)."""

    def test_models(self):
        for name in ("tiny_v01", "tiny_v05"):
            expected = load_file(golden(name, "expected.safetensors"))
            cases = [
                ((), "ids_full_cfg3", "logits_full_cfg3"),
                (("--single-stream-decode", "reference"), "ids_kv_official_cfg3",
                 "logits_kv_official_cfg3"),
                (("--guidance-scale", "0"), "ids_full_cfg0", "logits_full_cfg0"),
                (("--guidance-scale", "0", "--single-stream-decode", "reference"), None, None),
            ]
            for extra, ids_key, logits_key in cases:
                with self.subTest(model=name, extra=extra):
                    d = self.dump(name, "--cuda-graphs", "emulate", *extra)
                    self.assertEqual(d["ids"].shape, expected["ids_full_cfg3"][0].shape)
                    if ids_key is None:
                        # No official output for this one: it must equal the eager runner's.
                        eager = self.dump(name, "--cuda-graphs", "off", *extra)
                        np.testing.assert_array_equal(d["ids"], eager["ids"])
                        np.testing.assert_array_equal(d["step_logits"], eager["step_logits"])
                        continue
                    np.testing.assert_array_equal(d["ids"], expected[ids_key][0],
                                                  err_msg=f"{name} {extra}")
                    self.assert_close(d["step_logits"], expected[logits_key][0],
                                      f"{name} {extra} step_logits")

    def test_bad_mode(self):
        proc = run([*golden_args("tiny_v01"), "--cuda-graphs", "yes"], check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("INVALID_ARGUMENT", proc.stderr)
        self.assertIn("--cuda-graphs", proc.stderr)


class OutputFilesTest(unittest.TestCase):
    def test_tokens_timings_and_stdout_agree(self):
        with tempfile.TemporaryDirectory() as tmp:
            tokens = os.path.join(tmp, "tokens.txt")
            timings = os.path.join(tmp, "timings.json")
            proc = run([*golden_args("tiny_v01"), "--resolution-base", "3",
                        "--tokens-out", tokens, "--timings-json", timings])
            ids = [int(x) for x in read_text(tokens).split()]
            expected = load_file(golden("tiny_v01", "expected.safetensors"))["ids_full_cfg3"][0]
            self.assertEqual(ids, expected.tolist())
            self.assertIn(" ".join(map(str, ids)), proc.stdout)
            t = json.loads(read_text(timings))
            self.assertEqual(set(t), {"tokens", "prefill_ms", "decode_ms", "tpot_ms",
                                      "shape_decode_ms", "latents_ms", "occupancy_ms",
                                      "occupancy", "occupancy_points", "dense_points",
                                      "marching_cubes_ms", "postprocess_ms", "vertices",
                                      "faces"})
            self.assertEqual(t["occupancy"], "hierarchical")
            self.assertEqual(t["dense_points"], 9 ** 3)  # r 3 < the coarsest level: dense
            self.assertEqual(t["occupancy_points"], 9 ** 3)
            self.assertEqual(t["tokens"], 16)
            self.assertGreater(t["decode_ms"], 0)
            self.assertAlmostEqual(t["tpot_ms"], t["decode_ms"] / 15, places=6)


class DemoModelTest(unittest.TestCase):
    demo = ["--model-config", os.path.join(SOURCE, "models", "demo.yaml"),
            "--resolution-base", "3"]

    def tokens(self, *extra):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "t.txt")
            run([*self.demo, "--tokens-out", path, *extra])
            return read_text(path).split()

    def test_greedy_is_deterministic(self):
        first = self.tokens()
        self.assertEqual(len(first), 64)
        self.assertEqual(first, self.tokens())

    def test_top_p_seeds(self):
        a = self.tokens("--top-p", "0.9", "--seed", "1")
        self.assertEqual(a, self.tokens("--top-p", "0.9", "--seed", "1"))
        self.assertNotEqual(a, self.tokens("--top-p", "0.9", "--seed", "2"))


class PromptAndMeshTest(unittest.TestCase):
    """The demo model end to end: text prompt through its small random CLIP, mesh files."""
    demo = ["--model-config", os.path.join(SOURCE, "models", "demo.yaml"),
            "--resolution-base", "5"]

    def test_prompt_to_mesh_files(self):
        import trimesh
        with tempfile.TemporaryDirectory() as tmp:
            tokens = {}
            for ext in ("glb", "obj", "ply"):
                mesh_path = os.path.join(tmp, "m." + ext)
                tok_path = os.path.join(tmp, ext + ".txt")
                proc = run([*self.demo, "--prompt", "a red dragon", "--mesh-out", mesh_path,
                            "--tokens-out", tok_path])
                self.assertIn("mesh:", proc.stdout)
                mesh = trimesh.load(mesh_path, force="mesh")
                self.assertGreater(len(mesh.faces), 100)
                tokens[ext] = read_text(tok_path)
            # The same prompt gives the same tokens whatever the output format.
            self.assertEqual(len(set(tokens.values())), 1)
            other = os.path.join(tmp, "other.txt")
            run([*self.demo, "--prompt", "a wooden chair", "--tokens-out", other])
            self.assertNotEqual(read_text(other), tokens["glb"])

    def test_no_postprocess_keeps_the_raw_marching_cubes_mesh(self):
        import trimesh
        with tempfile.TemporaryDirectory() as tmp:
            raw = os.path.join(tmp, "raw.obj")
            small = os.path.join(tmp, "small.obj")
            run([*self.demo, "--prompt", "a cube", "--mesh-out", raw, "--no-postprocess"])
            run([*self.demo, "--prompt", "a cube", "--mesh-out", small, "--target-faces", "500"])
            raw_faces = len(trimesh.load(raw, force="mesh").faces)
            small_faces = len(trimesh.load(small, force="mesh").faces)
            self.assertGreater(raw_faces, small_faces)
            self.assertLessEqual(abs(small_faces - 500), 25)

    def test_preview_png_with_and_without_the_mesh(self):
        from PIL import Image
        background = (236, 239, 243)  # kPreviewBackground (mesh_preview.h)
        with tempfile.TemporaryDirectory() as tmp:
            cases = [(["--mesh-out", os.path.join(tmp, "m.glb")], "with.png", None),
                     ([], "alone.png", 200)]
            for extra, name, size in cases:
                path = os.path.join(tmp, name)
                sizing = ["--preview-size", str(size)] if size else []
                proc = run([*self.demo, "--prompt", "a red dragon", "--preview", path, *sizing,
                            *extra])
                self.assertIn(f"preview: {size or 512} x {size or 512} -> {path}", proc.stdout)
                with Image.open(path) as image:
                    self.assertEqual(image.format, "PNG")
                    self.assertEqual(image.size, (size or 512,) * 2)
                    self.assertEqual(image.info.get("Software"), "cube3d-server")
                    self.assertEqual(image.info.get("Description"), "a red dragon")
                    rgb = image.convert("RGB").tobytes()
                pixels = [tuple(rgb[i:i + 3]) for i in range(0, len(rgb), 3)]
                self.assertEqual(pixels[0], background)  # a corner
                shape = sum(1 for p in pixels if p != background)
                self.assertGreater(shape, len(pixels) // 20, "the mesh barely shows")
            # Written by a rename: no temporary file is left beside it.
            self.assertEqual(sorted(os.listdir(tmp)), ["alone.png", "m.glb", "with.png"])


class ProvenanceTest(unittest.TestCase):
    """--mesh-profile and the provenance every mesh file carries (pipeline/provenance.h)."""
    demo = ["--model-config", os.path.join(SOURCE, "models", "demo.yaml"),
            "--resolution-base", "4"]

    def test_glb_carries_the_provenance(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "m.glb")
            run([*self.demo, "--prompt", "a red dragon", "--seed", "5", "--top-p", "0.9",
                 "--mesh-profile", "roblox", "--mesh-out", path])
            with open(path, "rb") as f:
                data = f.read()
        length, kind = struct.unpack_from("<II", data, 12)
        self.assertEqual(kind, 0x4E4F534A)  # "JSON"
        pairs = json.loads(data[20:20 + length], object_pairs_hook=lambda p: p)
        asset = dict(dict(pairs)["asset"])
        extras = asset["extras"]
        self.assertEqual([k for k, _ in extras],
                         ["prompt", "seed", "top_p", "guidance_scale", "resolution_base",
                          "mesh_profile", "model", "server_version"])
        extras = dict(extras)
        self.assertEqual(extras["prompt"], "a red dragon")
        self.assertEqual(extras["seed"], 5)
        self.assertEqual(extras["top_p"], 0.8999999761581421)  # the float the sampler used
        self.assertEqual(extras["guidance_scale"], 3.0)
        self.assertEqual(extras["resolution_base"], 4)
        self.assertEqual(extras["mesh_profile"], "roblox")
        self.assertEqual(extras["model"], "demo")
        self.assertEqual(asset["generator"], "cube3d-server " + extras["server_version"])

    def test_bad_profile_is_refused_naming_the_flag(self):
        proc = run([*self.demo, "--mesh-profile", "bogus"], check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("INVALID_ARGUMENT", proc.stderr)
        self.assertIn("--mesh-profile", proc.stderr)
        self.assertIn("bogus", proc.stderr)


class OccupancyModesTest(unittest.TestCase):
    """--occupancy dense | hierarchical on the demo model at r 6: the same surface (vertices
    within a voxel of each other, both ways) from far fewer decoder queries."""
    demo = ["--model-config", os.path.join(SOURCE, "models", "demo.yaml"),
            "--resolution-base", "6", "--prompt", "a red chair", "--no-postprocess"]

    def test_dense_and_hierarchical_meshes_agree(self):
        import numpy as np
        import trimesh
        from scipy.spatial import cKDTree
        with tempfile.TemporaryDirectory() as tmp:
            meshes, timings = {}, {}
            for mode in ("dense", "hierarchical"):
                mesh_path = os.path.join(tmp, mode + ".ply")
                t_path = os.path.join(tmp, mode + ".json")
                proc = run([*self.demo, "--occupancy", mode, "--mesh-out", mesh_path,
                            "--timings-json", t_path])
                self.assertIn(mode + ":", proc.stdout)
                meshes[mode] = trimesh.load(mesh_path, force="mesh")
                timings[mode] = json.loads(read_text(t_path))
            dense, fine = timings["dense"], timings["hierarchical"]
            self.assertEqual(dense["occupancy_points"], 65 ** 3)
            self.assertEqual(fine["dense_points"], 65 ** 3)
            self.assertLess(fine["occupancy_points"], dense["occupancy_points"] // 2)
            a, b = np.asarray(meshes["dense"].vertices), np.asarray(meshes["hierarchical"].vertices)
            self.assertGreater(len(a), 100)
            voxel = 2.1 / 64
            for x, y in ((a, b), (b, a)):
                distance, _ = cKDTree(y).query(x)
                self.assertGreaterEqual(float(np.mean(distance <= voxel)), 0.99)


class ErrorsTest(unittest.TestCase):
    def expect_error(self, args, code, *needles):
        proc = run(args, check=False)
        assert_failed_naming(self, proc, code, *needles)
        return proc

    def test_bad_options(self):
        base = golden_args("tiny_v01")
        self.expect_error(["--frobnicate"], "INVALID_ARGUMENT", "--frobnicate")
        self.expect_error([*base, "--occupancy", "sparse"], "INVALID_ARGUMENT", "--occupancy")
        self.expect_error(base[2:], "INVALID_ARGUMENT", "--model-config")
        self.expect_error([*base, "--top-p", "1.5"], "INVALID_ARGUMENT", "--top-p")
        self.expect_error([*base, "--guidance-scale", "nan"], "INVALID_ARGUMENT",
                          "--guidance-scale")
        self.expect_error([*base, "--resolution-base", "0"], "INVALID_ARGUMENT",
                          "resolution_base")
        self.expect_error([*base, "--single-stream-decode", "fast"], "INVALID_ARGUMENT",
                          "single_stream_decode")
        self.expect_error([*base, "--bbox", "1", "1", "1"], "INVALID_ARGUMENT", "use_bbox")
        self.expect_error([*golden_args("tiny_v05"), "--bbox", "1", "-2", "1"],
                          "INVALID_ARGUMENT", "--bbox")

    def test_prompt_and_mesh_errors(self):
        base = golden_args("tiny_v01")
        # Real weights and no CLIP folder: the prompt cannot be encoded.
        self.expect_error([*golden_args("tiny_v01")[:6], "--prompt", "a chair"],
                          "INVALID_ARGUMENT", "--clip-model")
        self.expect_error([*base, "--prompt", "a chair"], "INVALID_ARGUMENT",
                          "--text-embeddings")
        self.expect_error([*base, "--mesh-out", "x.stl"], "INVALID_ARGUMENT", "x.stl")
        self.expect_error([*base, "--preview", "p.png", "--preview-size", "8"],
                          "INVALID_ARGUMENT", "--preview-size")
        self.expect_error([*base, "--preview", "/nonexistent-dir/p.png"], "INVALID_ARGUMENT",
                          "/nonexistent-dir/p.png")
        self.expect_error([*base, "--resolution-base", "10"], "INVALID_ARGUMENT",
                          "resolution_base")

    def test_cuda_without_a_device(self):
        skip_if_cuda_device(self)
        self.expect_error([*golden_args("tiny_v01"), "--device", "cuda"],
                          "FAILED_PRECONDITION", "cuda")

    def test_broken_checkpoint_names_the_tensors(self):
        tensors = load_file(golden("tiny_v01", "shape_gpt.safetensors"))
        del tensors["lm_head.weight"]
        tensors["text_proj.weight"] = tensors["text_proj.weight"][:, :5].copy()
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "broken.safetensors")
            save_file(tensors, path)
            args = golden_args("tiny_v01")
            args[3] = path
            self.expect_error(args, "INVALID_ARGUMENT", "lm_head.weight", "text_proj.weight",
                              path)

    def test_text_embeddings_of_the_wrong_dtype_or_shape_say_so(self):
        # An int64 clip_hidden_cond was reported as "the wrong shape" before.
        inputs = load_file(golden("tiny_v01", "inputs.safetensors"))
        with tempfile.TemporaryDirectory() as tmp:
            args = golden_args("tiny_v01")
            for name, tensor, needle in (
                    ("int64", inputs["clip_hidden_cond"].astype(np.int64),
                     "clip_hidden_cond is stored as Long, expected a floating-point dtype"),
                    ("short", inputs["clip_hidden_cond"][:, :10].copy(),
                     "clip_hidden_cond has shape [1, 10,")):
                path = os.path.join(tmp, f"{name}.safetensors")
                save_file({**inputs, "clip_hidden_cond": tensor}, path)
                args[-1] = path
                self.expect_error(args, "INVALID_ARGUMENT", needle)

    def test_missing_files(self):
        args = golden_args("tiny_v01")
        args[1] = "/nonexistent/model.yaml"
        self.expect_error(args, "NOT_FOUND", "/nonexistent/model.yaml")


if __name__ == "__main__":
    unittest.main()
