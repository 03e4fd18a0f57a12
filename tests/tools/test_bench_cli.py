"""cube3d-bench on the demo model, on the CPU: the JSON layout (its samples and provenance too),
Google Benchmark's layout (--benchmark-json, read by Debian's compare.py), the mesh section,
graph-kv being skipped on the CPU, and the errors a user gets for bad options. Run by ctest
(tests/CMakeLists.txt); standard library only (--weights-dir's checkpoints come from
scripts/make_random_checkpoint.py: numpy, PyYAML), well under a minute."""
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

from cli_test_support import assert_failed_naming, run_tool, skip_if_cuda_device

BIN = os.path.join(os.environ["CUBE3D_BIN_DIR"], "cube3d-bench")
SOURCE = os.environ["CUBE3D_SOURCE_DIR"]
DEMO = ["--model-config", os.path.join(SOURCE, "models", "demo.yaml")]
# One thread: the test machines are small and shared, and a contended thread pool makes a tiny
# model's steps slow and erratic without telling us anything.
QUIET = ["--threads", "1"]

RESULT_KEYS = {"mode", "bucket", "tokens", "tpot_ms_median", "tpot_ms_p90", "ttft_ms", "e2e_ms",
               "tokens_per_s", "peak_memory_bytes", "bytes_per_step", "achieved_gb_per_s"}
# Not numbers: the checksum of the generated ids, whether every run gave the same ids, the runner.
RESULT_TEXT_KEYS = {"ids_checksum", "ids_stable", "runner"}
MESH_KEYS = {"resolution_base", "occupancy_ms", "marching_cubes_ms", "postprocess_ms", "faces"}


def run(args, check=True):
    return run_tool(BIN, args, timeout=120, check=check)


def run_json(args, gbench=False):
    """(the run, its --json); with gbench, also its --benchmark-json."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.json")
        gbench_path = os.path.join(tmp, "gbench.json")
        proc = run([*DEMO, *QUIET, *args, "--json", path,
                    *(["--benchmark-json", gbench_path] if gbench else [])])
        with open(path) as f:
            out = json.load(f)
        if not gbench:
            return proc, out
        with open(gbench_path) as f:
            return proc, out, json.load(f)


class BenchJsonTest(unittest.TestCase):
    REPEAT = 2
    TOKENS = 16

    @classmethod
    def setUpClass(cls):
        cls.proc, cls.out, cls.gbench = run_json(
            ["--buckets", "1,2", "--tokens", str(cls.TOKENS), "--modes", "eager-nocache,eager-kv",
             "--mesh-resolution", "5", "--warmup", "1", "--repeat", str(cls.REPEAT)], gbench=True)

    def test_top_level(self):
        out = self.out
        self.assertEqual(out["device"], "cpu")
        self.assertTrue(out["model"].endswith("demo.yaml"), out["model"])
        self.assertEqual(out["dtype"], "float32")
        self.assertEqual(out["tokens"], self.TOKENS)
        self.assertEqual(out["model_tokens"], 64)
        self.assertEqual(out["peak_memory_kind"], "rss")
        self.assertEqual(out["skipped"], [])
        self.assertEqual(len(out["results"]), 4)
        self.assertIs(out["complete"], True)
        self.assertIs(out["build"]["cuda_graph_runner"] in (True, False), True)
        self.assertGreater(out["load_ms"], 0)

    def test_results(self):
        seen = set()
        for r in self.out["results"]:
            with self.subTest(mode=r["mode"], bucket=r["bucket"]):
                self.assertLessEqual(RESULT_KEYS | RESULT_TEXT_KEYS, set(r))
                self.assertRegex(r["ids_checksum"], "^[0-9a-f]{16}$")
                self.assertIs(r["ids_stable"], True)
                seen.add((r["mode"], r["bucket"]))
                self.assertEqual(r["tokens"], self.TOKENS)
                # Steps of all timed runs are pooled for the median and p90.
                self.assertEqual(r["steps"], self.REPEAT * (self.TOKENS - 1))
                for key in RESULT_KEYS - {"mode", "bucket", "tokens"}:
                    self.assertTrue(math.isfinite(r[key]), key)
                    self.assertGreater(r[key], 0, key)
                self.assertGreaterEqual(r["tpot_ms_p90"], r["tpot_ms_median"])
                self.assertGreater(r["e2e_ms"], r["ttft_ms"])
                expected = r["bucket"] * r["tokens"] / (r["e2e_ms"] / 1000)
                self.assertAlmostEqual(r["tokens_per_s"] / expected, 1.0, places=6)
                gbps = r["bytes_per_step"] / (r["tpot_ms_median"] / 1000) / 1e9
                self.assertAlmostEqual(r["achieved_gb_per_s"] / gbps, 1.0, places=6)
        self.assertEqual(seen, {("eager-nocache", 1), ("eager-nocache", 2), ("eager-kv", 1),
                                ("eager-kv", 2)})

    def test_samples(self):
        # Every timed sample, run by run; the figures are computed from them.
        sys.path.insert(0, os.path.join(SOURCE, "bench"))
        import tpot_stats

        for r in self.out["results"]:
            with self.subTest(mode=r["mode"], bucket=r["bucket"]):
                samples = r["samples"]
                self.assertEqual([len(run) for run in samples["tpot_ms"]],
                                 [self.TOKENS - 1] * self.REPEAT)
                self.assertEqual(len(samples["ttft_ms"]), self.REPEAT)
                self.assertEqual(len(samples["e2e_ms"]), self.REPEAT)
                pooled = [v for run in samples["tpot_ms"] for v in run]
                self.assertTrue(all(v > 0 for v in pooled))
                self.assertEqual(tpot_stats.point(r, "tpot"), r["tpot_ms_median"])
                self.assertAlmostEqual(sum(pooled) / len(pooled), r["tpot_ms_mean"], places=9)
                self.assertAlmostEqual(sum(samples["e2e_ms"]) / self.REPEAT, r["e2e_ms"],
                                       places=9)

    def test_provenance(self):
        p = self.out["provenance"]
        self.assertEqual(p["build_type"], "Release")  # scripts/build.sh's
        self.assertIs(p["assertions"], False)
        self.assertEqual((p["device"], p["threads"], p["driver"]), ("cpu", 1, None))
        self.assertEqual(p["device_name"], self.out["device_name"])
        self.assertEqual(p["torch"], self.out["build"]["torch"])
        self.assertGreaterEqual(p["cpu_cores"], 1)
        self.assertEqual(len(p["load_avg_at_start"]), 3)
        for key in ("commit", "compiler", "host", "os", "cpu_model"):
            self.assertIsInstance(p[key], str, key)

    def test_google_benchmark_json(self):
        # One benchmark per mode, bucket and metric; bench/tpot_stats.py writes the same from
        # the --json file (bench/official_engine.py's section goes through it).
        sys.path.insert(0, os.path.join(SOURCE, "bench"))
        import tpot_stats

        gb = self.gbench
        self.assertEqual(gb["context"]["cube3d"], self.out["provenance"])
        self.assertEqual(gb["context"]["num_cpus"], self.out["provenance"]["cpu_cores"])
        name = f"eager-kv/bucket:2/tokens:{self.TOKENS}/tpot"
        reps = [b for b in gb["benchmarks"] if b["name"] == name]
        self.assertEqual(len(reps), self.REPEAT * (self.TOKENS - 1))
        self.assertEqual({(b["run_type"], b["time_unit"], b["iterations"]) for b in reps},
                         {("iteration", "us", 1)})
        median = next(b for b in gb["benchmarks"] if b["name"] == name + "_median")
        r = next(r for r in self.out["results"] if (r["mode"], r["bucket"]) == ("eager-kv", 2))
        self.assertAlmostEqual(median["real_time"], r["tpot_ms_median"] * 1e3, places=6)
        self.assertEqual(median["aggregate_name"], "median")
        ours = tpot_stats.google_benchmark_json(self.out, "x")["benchmarks"]
        self.assertEqual(len(ours), len(gb["benchmarks"]))
        for a, b in zip(ours, gb["benchmarks"]):
            self.assertEqual(set(a), set(b), a["name"])
            for key, value in a.items():
                if isinstance(value, float):
                    self.assertAlmostEqual(value, b[key], delta=1e-9 * max(1, abs(value)))
                else:
                    self.assertEqual(value, b[key], (a["name"], key))

    def test_compare_py_reads_it(self):
        # Debian's libbenchmark-tools (scripts/setup.sh): Google Benchmark's own comparison.
        compare = "/usr/share/benchmark/compare.py"
        self.assertTrue(os.path.isfile(compare), "libbenchmark-tools is not installed")
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "gbench.json")
            with open(path, "w") as f:
                json.dump(self.gbench, f)
            proc = subprocess.run([sys.executable, compare, "-a", "--no-color", "benchmarks",
                                   path, path], capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn(f"eager-nocache/bucket:1/tokens:{self.TOKENS}/tpot_median", proc.stdout)
        self.assertIn("OVERALL_GEOMEAN", proc.stdout)

    def test_decode_step_ops(self):
        # One eager step at bucket 1 (2 rows with guidance) under libtorch's RecordFunction
        # observer: counts only, the pinned budget is tests/engine/test_op_count.cpp's.
        ops = self.out["decode_step_ops"]
        self.assertEqual((ops["bucket"], ops["rows"]), (1, 2))
        self.assertEqual(ops["single_stream_decode"], "causal")
        self.assertGreater(ops["top_level_compute"], 0)
        self.assertLessEqual(ops["top_level_compute"], ops["top_level"])
        self.assertGreater(ops["all"], ops["top_level"])
        self.assertEqual(sum(ops["top_level_by_name"].values()), ops["top_level"])
        self.assertIn(f"decode step at bucket 1: {ops['top_level']} ATen ops", self.proc.stdout)

    def test_bytes_per_step_grow_with_the_cache(self):
        kv = {r["bucket"]: r["bytes_per_step"] for r in self.out["results"]
              if r["mode"] == "eager-kv"}
        # Same weights, twice the cache rows (and embedding rows) at bucket 2.
        self.assertGreater(kv[2], kv[1])

    def test_bytes_per_step_count_the_padded_cache(self):
        # A decode step attends over every preallocated position (S + 1 + T dual, 1 + T single,
        # demo: 4 dual + 1 single blocks, 8 heads x 16, float32, 77 condition tokens), masked
        # or not: two rows per request with guidance, keys and values.
        kv = {r["bucket"]: r["bytes_per_step"] for r in self.out["results"]
              if r["mode"] == "eager-kv"}
        t = self.TOKENS
        per_position = 2 * 128 * 4  # keys + values of one row at one position, one block
        per_row = per_position * (4 * (77 + 1 + t) + 1 * (1 + t))
        self.assertEqual(kv[2] - kv[1], 2 * per_row + 128 * 4)

    def test_the_same_ids_in_both_modes(self):
        # Greedy requests with the same weights: the cache changes the speed, never the tokens.
        sums = {}
        for r in self.out["results"]:
            sums.setdefault(r["bucket"], set()).add(r["ids_checksum"])
        for bucket, checksums in sums.items():
            self.assertEqual(len(checksums), 1, f"bucket {bucket}: {checksums}")

    def test_mesh(self):
        mesh = self.out["mesh"]
        self.assertLessEqual(MESH_KEYS, set(mesh))
        self.assertEqual(mesh["resolution_base"], 5)
        self.assertEqual(mesh["grid_points_per_axis"], 33)
        self.assertGreater(mesh["occupancy_ms"], 0)
        for key in ("marching_cubes_ms", "postprocess_ms", "faces"):
            self.assertGreaterEqual(mesh[key], 0, key)
        self.assertIsInstance(mesh["faces"], int)

    def test_table(self):
        lines = self.proc.stdout.splitlines()
        header = [l for l in lines if "TPOT med" in l]
        self.assertEqual(len(header), 1, self.proc.stdout)
        for col in ("mode", "bucket", "tokens", "TPOT p90", "TTFT", "e2e", "tok/s", "GB/s"):
            self.assertIn(col, header[0])
        rows = [l.split() for l in lines if l.startswith(("eager-nocache ", "eager-kv "))]
        self.assertEqual(sorted((r[0], r[1]) for r in rows),
                         [("eager-kv", "1"), ("eager-kv", "2"), ("eager-nocache", "1"),
                          ("eager-nocache", "2")])
        self.assertIn("shape (resolution 5", self.proc.stdout)


class ShapeOccupancyTest(unittest.TestCase):
    """--occupancy both: one whole object per occupancy mode through the shape pipeline; the
    coarse-to-fine field evaluates fewer points than the dense grid."""

    @classmethod
    def setUpClass(cls):
        cls.proc, cls.out = run_json(
            ["--buckets", "1", "--tokens", "64", "--modes", "eager-kv", "--mesh-resolution", "6",
             "--occupancy", "both", "--warmup", "0", "--repeat", "1"])

    def test_both_modes(self):
        mesh = self.out["mesh"]
        modes = mesh["by_occupancy"]
        self.assertEqual([m["occupancy"] for m in modes], ["hierarchical", "dense"])
        hierarchical, dense = modes
        self.assertEqual(mesh["occupancy"], "hierarchical")  # the first mode at the top level
        self.assertEqual(dense["dense_points"], 65 ** 3)
        self.assertEqual(dense["occupancy_points"], 65 ** 3)
        self.assertEqual(hierarchical["dense_points"], 65 ** 3)
        self.assertLess(hierarchical["occupancy_points"], dense["occupancy_points"])
        self.assertEqual(sum(hierarchical["points_per_level"]), hierarchical["occupancy_points"])
        self.assertGreater(mesh["tokens_ms"], 0)
        for m in modes:
            self.assertGreaterEqual(m["shape_ms"], m["occupancy_ms"])
            self.assertAlmostEqual(m["object_ms"], mesh["tokens_ms"] + m["shape_ms"], places=3)
            self.assertGreater(m["file_bytes"], 0)  # a GLB, even for an empty mesh
        self.assertIn("hierarchical", self.proc.stdout)
        self.assertIn("fewer", self.proc.stdout)


class EmulatedGraphKvTest(unittest.TestCase):
    """--cuda-graphs emulate runs graph-kv on the CPU through the graph runner's lifecycle; its
    ids must be eager-kv's, bucket by bucket, and a JSON line is written per result."""

    def test_same_ids_as_eager(self):
        proc, out = run_json(["--buckets", "1,3", "--tokens", "12", "--mesh-resolution", "0",
                              "--warmup", "0", "--repeat", "2", "--modes", "eager-kv,graph-kv",
                              "--cuda-graphs", "emulate"])
        self.assertEqual(out["skipped"], [])
        self.assertEqual(out["cuda_graphs"], "emulate")
        by_mode = {(r["mode"], r["bucket"]): r for r in out["results"]}
        self.assertEqual(by_mode[("graph-kv", 1)]["runner"], "emulated graph")
        self.assertEqual(by_mode[("eager-kv", 1)]["runner"], "eager")
        for bucket in (1, 3):
            self.assertEqual(by_mode[("graph-kv", bucket)]["ids_checksum"],
                             by_mode[("eager-kv", bucket)]["ids_checksum"], f"bucket {bucket}")
        self.assertNotEqual(by_mode[("eager-kv", 1)]["ids_checksum"],
                            by_mode[("eager-kv", 3)]["ids_checksum"])

    def test_build_info(self):
        proc = run(["--build-info"])
        info = json.loads(proc.stdout)
        self.assertIn(info["cuda_graph_runner"], (True, False))
        self.assertEqual(info["torch"].split(".")[:2], ["2", "11"])


class GraphModeOnCpuTest(unittest.TestCase):
    args = ["--buckets", "1", "--tokens", "2", "--mesh-resolution", "0", "--warmup", "0",
            "--repeat", "1"]

    def test_skipped_with_a_note(self):
        proc, out = run_json([*self.args, "--modes", "eager-kv,graph-kv"])
        notes = [l for l in proc.stdout.splitlines() if "graph-kv" in l]
        self.assertTrue(notes and "skipping" in notes[0], proc.stdout)
        self.assertEqual([r["mode"] for r in out["results"]], ["eager-kv"])
        self.assertEqual([s["mode"] for s in out["skipped"]], ["graph-kv"])
        self.assertNotIn("mesh", out)

    def test_strict_fails(self):
        proc = run([*DEMO, *self.args, "--modes", "graph-kv", "--strict"], check=False)
        self.assertNotEqual(proc.returncode, 0, proc.stdout)
        self.assertIn("graph-kv", proc.stderr)
        self.assertIn("cuda", proc.stderr)


class WeightsDirTest(unittest.TestCase):
    """--weights-dir: checkpoints from files (our writer's, as bench/official_engine.py hands
    the official engine), not random weights from the seed."""

    def test_weights_from_files(self):
        with tempfile.TemporaryDirectory() as tmp:
            writer = os.path.join(SOURCE, "scripts", "make_random_checkpoint.py")
            subprocess.run([sys.executable, writer, DEMO[1], tmp], check=True,
                           capture_output=True, timeout=120)
            args = [*DEMO, *QUIET, "--weights-dir", tmp, "--modes", "eager-kv", "--buckets", "1",
                    "--mesh-resolution", "0", "--warmup", "0", "--repeat", "1"]
            path = os.path.join(tmp, "bench.json")
            proc = run([*args, "--json", path])
            with open(path) as f:
                out = json.load(f)
            self.assertEqual(out["weights"], f"weights from {tmp}")
            self.assertIn(f"weights from {tmp}", proc.stdout)
            self.assertEqual(len(out["results"]), 1)
            # Other values than the seed's random weights: other tokens.
            seeded = run_json(args[args.index("--modes"):])[1]
            self.assertTrue(seeded["weights"].startswith("random weights (seed "), seeded)
            self.assertNotEqual(out["results"][0]["ids_checksum"],
                                seeded["results"][0]["ids_checksum"])

    def test_the_official_section_is_kept(self):
        # bench/official_engine.py may have written its section into the file first.
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "bench.json")
            with open(path, "w") as f:
                json.dump({"official": {"results": [{"mode": "eager-kv"}]}, "device": "x"}, f)
            run([*DEMO, *QUIET, "--modes", "eager-kv", "--buckets", "1", "--tokens", "2",
                 "--mesh-resolution", "0", "--warmup", "0", "--repeat", "1", "--json", path])
            with open(path) as f:
                out = json.load(f)
            self.assertEqual(out["official"], {"results": [{"mode": "eager-kv"}]})
            self.assertEqual(out["device"], "cpu")  # everything else is this run's

    def test_a_folder_without_checkpoints(self):
        with tempfile.TemporaryDirectory() as tmp:
            proc = run([*DEMO, "--weights-dir", tmp, "--mesh-resolution", "0"], check=False)
            self.assertNotEqual(proc.returncode, 0, proc.stdout)
            self.assertIn(os.path.join(tmp, "shape_gpt.safetensors"), proc.stderr)


class ErrorsTest(unittest.TestCase):
    def expect_error(self, args, *needles):
        assert_failed_naming(self, run(args, check=False), *needles)

    def test_bad_options(self):
        self.expect_error(["--tokens", "4"], "INVALID_ARGUMENT", "--model-config")
        self.expect_error([*DEMO, "--tokens", "0"], "INVALID_ARGUMENT", "--tokens", "1..64")
        self.expect_error([*DEMO, "--tokens", "100000"], "INVALID_ARGUMENT", "--tokens", "1..64")
        self.expect_error([*DEMO, "--buckets", "0"], "INVALID_ARGUMENT", "--buckets")
        self.expect_error([*DEMO, "--buckets", "1,x"], "INVALID_ARGUMENT", "--buckets")
        self.expect_error([*DEMO, "--modes", "foo"], "INVALID_ARGUMENT", "--modes", "foo")
        self.expect_error([*DEMO, "--repeat", "0"], "INVALID_ARGUMENT", "--repeat")
        self.expect_error([*DEMO, "--mesh-resolution", "12"], "INVALID_ARGUMENT",
                          "--mesh-resolution")
        self.expect_error([*DEMO, "--frobnicate"], "INVALID_ARGUMENT", "--frobnicate")
        self.expect_error([*DEMO, "--occupancy", "sparse"], "INVALID_ARGUMENT", "--occupancy")
        self.expect_error([*DEMO, "--cuda-graphs", "maybe"], "INVALID_ARGUMENT", "--cuda-graphs")
        self.expect_error([*DEMO, "--cuda-graphs", "off"], "INVALID_ARGUMENT", "--cuda-graphs")

    def test_cuda_without_a_device(self):
        skip_if_cuda_device(self)
        self.expect_error([*DEMO, "--device", "cuda"], "FAILED_PRECONDITION", "cuda")


if __name__ == "__main__":
    unittest.main()
