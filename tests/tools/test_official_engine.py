"""bench/official_engine.py on the CPU on a tiny preset (the demo model, 6 tokens, resolution 3):
argument handling, the weights our writer makes handed to the official classes and saved in
their layout, the timings, and the JSON merged into a cube3d-bench file. Run by ctest
(tools.official_engine).

Which `cube3d` package it drives: a checkout of Roblox/cube when CUBE3D_OFFICIAL_REPO names one
(the real official code, which then needs omegaconf, transformers, scikit-image and tqdm in the
Python running the test: PYTHONPATH may add them); otherwise tests/tools/official_stub, a
stand-in written for this test with the same call interface and toy math (no official code is
in this repository), so that CI, which has no official checkout, still runs every line of the
script and fails when it breaks."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("CUBE3D_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
SCRIPT = os.path.join(SOURCE, "bench", "official_engine.py")
DEMO = os.path.join(SOURCE, "models", "demo.yaml")
OFFICIAL = os.environ.get("CUBE3D_OFFICIAL_REPO", "")
REPO = OFFICIAL or os.path.join(HERE, "official_stub")
TOKENS = 6
REPEAT = 2


def run(args, timeout=300):
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


class OfficialEngineCpuTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.json_path = os.path.join(cls.tmp.name, "bench.json")
        # What cube3d-bench wrote: the script must keep it and add its own section.
        with open(cls.json_path, "w") as f:
            json.dump({"device": "cpu", "results": [{"mode": "eager-kv", "bucket": 1}]}, f)
        cls.weights = os.path.join(cls.tmp.name, "weights")
        cls.gbench_path = os.path.join(cls.tmp.name, "gbench.json")
        cls.args = ["--official-repo", REPO, "--model-config", DEMO, "--tokens", str(TOKENS),
                    "--resolution-base", "3", "--warmup", "1", "--repeat", str(REPEAT),
                    "--threads", "1", "--weights-dir", cls.weights, "--json", cls.json_path,
                    "--benchmark-json", cls.gbench_path]
        cls.proc = run(cls.args)
        if cls.proc.returncode != 0:
            raise AssertionError(f"official_engine.py failed ({cls.proc.returncode}):\n"
                                 f"{cls.proc.stdout}\n{cls.proc.stderr}")
        with open(cls.json_path) as f:
            cls.out = json.load(f)
        cls.section = cls.out["official"]

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_merged_into_the_bench_json(self):
        self.assertEqual(self.out["device"], "cpu")
        self.assertEqual(self.out["results"], [{"mode": "eager-kv", "bucket": 1}])
        self.assertIs(self.section["complete"], True)

    def test_top_level(self):
        s = self.section
        self.assertEqual(s["device"], "cpu")
        self.assertEqual(s["tokens"], TOKENS)
        self.assertEqual(s["model_tokens"], 64)
        self.assertEqual(s["repeat"], REPEAT)
        self.assertEqual(s["threads"], 1)
        self.assertEqual(os.path.realpath(s["repo"]), os.path.realpath(REPO))
        self.assertIn("no CLIP", s["text"])
        self.assertGreater(s["load_ms"]["Engine"], 0)

    def test_weights_from_our_writer_in_the_official_layout(self):
        w = self.section["weights"]
        self.assertEqual(w["writer"], "scripts/make_random_checkpoint.py")
        for name in ("shape_gpt.safetensors", "shape_tokenizer.safetensors"):
            self.assertTrue(os.path.isfile(os.path.join(w["ours"], name)), name)
            self.assertTrue(os.path.isfile(os.path.join(w["official"], name)), name)
        # Only the shape encoder is left at the official classes' initialisation.
        self.assertGreater(w["left_at_official_init_count"], 0)
        for name in w["left_at_official_init"]:
            self.assertTrue(name.startswith(("encoder.", "bottleneck.block.c_")), name)
        self.assertGreater(w["gpt_params"], 0)

    def test_official_layout_holds_our_values(self):
        from safetensors.torch import load_file

        w = self.section["weights"]
        ours = load_file(os.path.join(w["ours"], "shape_gpt.safetensors"))
        official = load_file(os.path.join(w["official"], "shape_gpt.safetensors"))
        self.assertEqual(set(ours), set(official))
        for name in ("lm_head.weight", "transformer.dual_blocks.0.attn.pre_x.c_qk.weight"):
            self.assertTrue(ours[name].equal(official[name]), name)

    def test_decode_results(self):
        results = self.section["results"]
        self.assertEqual(len(results), 1)
        r = results[0]
        self.assertEqual((r["engine"], r["mode"], r["bucket"]), ("Engine", "eager-kv", 1))
        self.assertEqual(r["tpot_kind"], "per_step")
        self.assertEqual(r["tokens"], TOKENS)
        self.assertEqual(r["steps"], REPEAT * (TOKENS - 1))
        for key in ("tpot_ms_median", "tpot_ms_p90", "tpot_ms_mean", "ttft_ms", "e2e_ms",
                    "tokens_per_s"):
            self.assertGreater(r[key], 0, key)
        self.assertGreaterEqual(r["tpot_ms_p90"], r["tpot_ms_median"])
        self.assertGreater(r["e2e_ms"], r["ttft_ms"])
        self.assertRegex(r["ids_checksum"], "^[0-9a-f]{16}$")
        self.assertIs(r["ids_stable"], True)

    def test_samples_and_provenance_as_cube3d_bench_keeps_them(self):
        r = self.section["results"][0]
        self.assertEqual([len(run) for run in r["samples"]["tpot_ms"]], [TOKENS - 1] * REPEAT)
        self.assertEqual(len(r["samples"]["ttft_ms"]), REPEAT)
        pooled = sorted(v for run in r["samples"]["tpot_ms"] for v in run)
        self.assertEqual(len(pooled), r["steps"])
        p = self.section["provenance"]
        self.assertEqual((p["device"], p["threads"]), ("cpu", 1))
        self.assertEqual(len(p["load_avg_at_start"]), 3)
        self.assertIn("torch", p)

    def test_google_benchmark_json_with_cube3d_bench_names(self):
        with open(self.gbench_path) as f:
            gb = json.load(f)
        name = f"eager-kv/bucket:1/tokens:{TOKENS}/tpot"
        self.assertEqual(len([b for b in gb["benchmarks"] if b["name"] == name]),
                         REPEAT * (TOKENS - 1))
        self.assertIn(name + "_median", {b["name"] for b in gb["benchmarks"]})

    def test_mesh_says_which_marching_cubes_ran(self):
        m = self.section["mesh"]
        self.assertEqual(m["resolution_base"], 3)
        self.assertEqual(m["grid_points_per_axis"], 9)
        self.assertEqual(m["occupancy_points"], 9 ** 3)
        # No warp on the CPU: the official fallback, scikit-image, ran (when the random field
        # has a surface; the stub's always has one).
        if m["marching_cubes_faces"] > 0 or not OFFICIAL:
            self.assertEqual(m["marching_cubes"], "scikit-image")
            self.assertGreater(m["faces"], 0)
        for key in ("tokens_ms", "latents_ms", "occupancy_ms", "shape_ms", "object_ms"):
            self.assertGreater(m[key], 0, key)
        self.assertGreaterEqual(m["object_ms"], m["tokens_ms"] + m["occupancy_ms"])
        if not self.section["warp_installed"]:
            self.assertTrue(any("warp is not installed" in n for n in self.section["notes"]))

    def test_the_printed_table(self):
        self.assertIn("eager-kv", self.proc.stdout)
        self.assertIn("wrote \"official\"", self.proc.stdout)

    def test_weights_are_reused_when_they_match(self):
        path = os.path.join(self.weights, "official", "shape_gpt.safetensors")
        before = os.stat(path).st_mtime_ns
        again = os.path.join(self.tmp.name, "again.json")
        args = [a if a != self.json_path else again for a in self.args]
        args[args.index("--repeat") + 1] = "1"
        args[args.index("--resolution-base") + 1] = "0"
        proc = run(args)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(os.stat(path).st_mtime_ns, before)
        with open(again) as f:
            out = json.load(f)
        self.assertEqual(list(out), ["official"])  # a new file holds the section alone
        self.assertNotIn("mesh", out["official"])


class OfficialEngineArgumentsTest(unittest.TestCase):
    def check_refused(self, args, words, status=2):
        proc = run(args, timeout=120)
        self.assertEqual(proc.returncode, status, proc.stdout + proc.stderr)
        for word in words:
            self.assertIn(word, proc.stderr)

    def test_no_official_repo(self):
        self.check_refused(["--model-config", DEMO], ["--official-repo"])

    def test_a_folder_without_the_package(self):
        with tempfile.TemporaryDirectory() as tmp:
            self.check_refused(["--official-repo", tmp, "--model-config", DEMO],
                               ["--official-repo", "no cube3d package"])

    def test_bad_values(self):
        base = ["--official-repo", REPO, "--model-config", DEMO]
        self.check_refused([*base, "--tokens", "0"], ["--tokens"])
        self.check_refused([*base, "--tokens", "65"], ["--tokens 65", "1..64"])
        self.check_refused([*base, "--buckets", "1,x"], ["--buckets"])
        self.check_refused([*base, "--device", "tpu"], ["--device tpu"])
        self.check_refused([*base, "--engine", "fast"], ["EngineFast", "CUDA"])
        self.check_refused(["--official-repo", REPO, "--model-config", "/nonexistent.yaml"],
                           ["--model-config"])

    def test_a_json_that_is_not_an_object_is_kept(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "list.json")
            with open(path, "w") as f:
                f.write("[1, 2]\n")
            self.check_refused(["--official-repo", REPO, "--model-config", DEMO, "--tokens", "2",
                                "--resolution-base", "0", "--repeat", "1", "--warmup", "0",
                                "--json", path], ["no JSON object"], status=1)
            with open(path) as f:
                self.assertEqual(f.read(), "[1, 2]\n")


if __name__ == "__main__":
    unittest.main()
